"""CPU of each process (own utime+stime and reaped children's cutime+cstime), two snapshots WINDOW s apart."""
import os, sys, time
HZ = os.sysconf("SC_CLK_TCK")
def snap():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit(): continue
        try:
            stat = open(f"/proc/{pid}/stat").read()
            cmd = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")[:150]
        except OSError: continue
        rest = stat[stat.rindex(")") + 2:].split()
        ppid = int(rest[1]); ut, st, cut, cst = (int(x) / HZ for x in rest[11:15])
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        out[int(pid)] = (ppid, comm, cmd, ut, st, cut, cst)
    return out
def count(d):
    return len(os.listdir(d))
sweep = sys.argv[1]; window = float(sys.argv[2])
a, na, ta = snap(), count(sweep), time.time()
time.sleep(window)
b, nb, tb = snap(), count(sweep), time.time()
print(f"window {tb-ta:.1f} s, job dirs {na} -> {nb} (+{nb-na}), {(nb-na)/(tb-ta):.1f} jobs/s")
rows = []
for pid, (ppid, comm, cmd, ut, st, cut, cst) in b.items():
    if pid in a:
        _, _, _, ut0, st0, cut0, cst0 = a[pid]
    else:
        ut0 = st0 = cut0 = cst0 = 0.0
    d = (ut - ut0, st - st0, cut - cut0, cst - cst0)
    if sum(d) > 0.05:
        rows.append((sum(d), pid, ppid, comm, cmd, d))
for tot, pid, ppid, comm, cmd, d in sorted(rows, reverse=True)[:25]:
    print(f"{tot:7.2f} pid {pid:>7} ppid {ppid:>7} user {d[0]:6.2f} sys {d[1]:6.2f} reaped-children user {d[2]:6.2f} sys {d[3]:6.2f}  {comm}: {cmd[:110]}")
