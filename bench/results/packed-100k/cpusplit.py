"""CPU of each process over a window: its own (utime + stime) and its reaped children's (cutime + cstime), from two
snapshots of /proc/PID/stat WINDOW seconds apart, with the jobs a sweep started in between (its job directories).

Run: python cpusplit.py SWEEP_DIR WINDOW_S   (the top 25 processes by CPU in the window)"""

from __future__ import annotations

import os
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")


def snapshot() -> dict[int, tuple[int, str, str, tuple[float, ...]]]:
    """pid -> (parent pid, name, command line, (utime, stime, cutime, cstime) in seconds)."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline") as f:
                cmd = f.read().replace("\0", " ")[:150]
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()  # after the name, which may hold spaces
        times = tuple(int(x) / HZ for x in rest[11:15])
        out[int(pid)] = (int(rest[1]), stat[stat.index("(") + 1:stat.rindex(")")], cmd, times)
    return out


def main() -> None:
    sweep, window = sys.argv[1], float(sys.argv[2])
    before, n_before, t0 = snapshot(), len(os.listdir(sweep)), time.time()
    time.sleep(window)
    after, n_after, t1 = snapshot(), len(os.listdir(sweep)), time.time()
    print(f"window {t1 - t0:.1f} s, job dirs {n_before} -> {n_after} (+{n_after - n_before}), "
          f"{(n_after - n_before) / (t1 - t0):.1f} jobs/s")
    rows = []
    for pid, (ppid, name, cmd, times) in after.items():
        start = before[pid][3] if pid in before else (0.0,) * 4
        d = tuple(a - b for a, b in zip(times, start, strict=True))
        if sum(d) > 0.05:
            rows.append((sum(d), pid, ppid, name, cmd, d))
    for total, pid, ppid, name, cmd, d in sorted(rows, reverse=True)[:25]:
        print(f"{total:7.2f} pid {pid:>7} ppid {ppid:>7} user {d[0]:6.2f} sys {d[1]:6.2f} reaped-children user "
              f"{d[2]:6.2f} sys {d[3]:6.2f}  {name}: {cmd[:110]}")


if __name__ == "__main__":
    main()
