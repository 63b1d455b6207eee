"""Packed Slurm sweeps (`hydra.launcher.workers=N`) against one Slurm job per job, on the local cluster, in one run.

Run: flock /tmp/slurm-bench.lock python bench/bench_packing.py [--jobs 2000] [--workers 2] [--slots 1] --json PATH
     (`--first-job-only`: the command to the first job's start of a packed sweep, which is then cancelled)
     (needs `make slurm-up`; the one-job-per-job mode of 2,000 jobs takes about half an hour on a 2-core machine)

Two sweeps (`--app`):
- `fixed` (default): bench/apps/fixed_work.py, any Hydra app, every job sleeping `--work-s` (0.1 s) and doing
  nothing else, `--jobs` of them as one grid (`+x=range(0,N)`), CPU only, 1 core per job. The overhead of packing is
  the packed wall time divided by the ideal: total work / slots (`--workers` x `--slots`). Target (issue 23): <= 1.10.
- `digits`: real short trainings, train.py's digits MLP, `--epochs` each, a grid of 2 optimizers x 5 learning rates
  x `--jobs`/10 seeds, one (fake) GPU per job as train.py asks, run on the CPU. Compared: wall, and the GPU-hours
  Slurm bills (each Slurm job's allocated GPUs x its elapsed time, from sacct).
Measured per mode: the driver's wall time from its start to its exit (the results table and report included), jobs
completed, how many times `sbatch`, `squeue`, `sacct` and `scontrol` ran (a PATH shim counts the driver's calls and
those of everything it starts), how many Slurm jobs the sweep created (array tasks count one each, as Slurm
counts them), the driver's peak resident memory (its VmHWM, sampled every 0.5 s; its VmRSS every 5 s, to see
when), and with `--status-every S` the wall and CPU time of `sweepit status DIR` run every S seconds during the
sweep (issue 39's targets at 100,000 jobs: driver <= 300 MB, status CPU <= 0.5 s).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import bench_slurm  # noqa: E402

APPS = {"fixed": REPO / "bench" / "apps" / "fixed_work.py", "digits": REPO / "train.py"}
OUT = REPO / "bench" / "out" / "packing"  # --work replaces it
TARGET_OVERHEAD = 1.10
MODES = ("packed", "per_job")


def sweep_args(app: str, n_jobs: int, work_s: float, epochs: int) -> list[str]:
    common = ["hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.array_parallelism=1000"]
    if app == "fixed":
        return [*common, f"+x=range(0,{n_jobs})", f"+work_s={work_s}", "hydra.launcher.timeout_min=10"]
    if n_jobs % 10:
        raise SystemExit(f"--app digits takes --jobs in tens (2 optimizers x 5 learning rates x seeds), not {n_jobs}")
    return [*common, "task=digits", f"epochs={epochs}", "optimizer=adam,sgd", "lr=0.001,0.003,0.01,0.03,0.1",
            f"seed=range(0,{n_jobs // 10})", "device=cpu", "trainer.threads=1", "timeout_min=10"]


def jobs_span_s(sweep_dir: Path) -> float | None:
    """From the first job's start to the last job's end, as the jobs' result.json files say: the sweep's running
    phase, without the driver's own start and its results table and report at the end."""
    from datetime import datetime

    starts, ends = [], []
    for path in sweep_dir.glob("*/result.json"):
        result = json.loads(path.read_text())
        if result.get("started_at") and result.get("ended_at"):
            starts.append(datetime.fromisoformat(result["started_at"]))
            ends.append(datetime.fromisoformat(result["ended_at"]))
    return round((max(ends) - min(starts)).total_seconds(), 2) if starts else None


def billed_gpu_hours(job_ids: list[str]) -> float | None:
    """Sum over Slurm jobs of allocated GPUs x elapsed time, as sacct records them; None without accounting."""
    bases = sorted({i.split("_", 1)[0] for i in job_ids})
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", ",".join(bases), "-o", "JobID,ElapsedRaw,AllocTRES"],
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        return None
    total = 0.0
    for line in out.stdout.splitlines():
        job_id, elapsed, tres = [*line.split("|"), "", "", ""][:3]
        gpus = next((int(t.split("=")[1]) for t in tres.split(",") if t.startswith("gres/gpu=")), 0)
        if "[" not in job_id and elapsed.isdigit():
            total += gpus * int(elapsed) / 3600
    return total


def worker_phases(sweep_dir: Path, t0: float) -> dict[str, Any] | None:
    """A packed sweep's time, phase by phase, from its workers' logs (`.submitit/*/*_log.err`, each line stamped to
    the millisecond): from the driver's start (`t0`, epoch seconds) to the first job's start (planning, submission,
    Slurm and the workers' own start), and per job in a worker, the median time from its start (forked) to its end
    (recorded by the worker) and from that end to the worker's next start. None without worker logs."""
    import re
    from datetime import datetime

    line = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[sweepit\.slurm\._engine\] worker \S+: "
                      r"job (\d+) (started|\w+ after)")
    starts, runs, gaps = [], [], []
    for log in sweep_dir.glob(".submitit/*/*_log.err"):
        last_end, begun = None, {}
        for text in log.read_text(errors="replace").splitlines():
            m = line.match(text)
            if m is None:
                continue
            at = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if m[3] == "started":
                begun[m[2]] = at
                starts.append(at)
                if last_end is not None:
                    gaps.append(at - last_end)
            elif m[2] in begun:
                runs.append(at - begun.pop(m[2]))
                last_end = at
    if not starts:
        return None
    ms = [None if m is None else round(m * 1000, 1) for m in (upper_median(runs), upper_median(gaps))]
    return {"driver_start_to_first_job_s": round(min(starts) - t0, 1), "jobs_seen": len(runs),
            "job_start_to_end_ms_median": ms[0], "job_end_to_next_start_ms_median": ms[1]}


def upper_median(values: list[float]) -> float | None:
    """The middle value (the upper one of an even count), None for none."""
    return sorted(values)[len(values) // 2] if values else None


def vm_kb(pid: int, field: str = "VmHWM") -> int:
    """The process's peak resident memory so far (VmHWM), or another /proc status field in KB; 0 once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in text.splitlines() if line.startswith(f"{field}:")), 0)


def timed_status(sweep_dir: Path) -> tuple[float, float]:
    """`sweepit status DIR` as a user types it, in a new process: its wall time and its CPU time (user + system, as
    the children's rusage counts it once the process is reaped; the driver, this script's other child, is reaped only
    at its end) in seconds. On a cluster the look runs on a login node while the workers run elsewhere: its CPU is
    what it costs there; its wall here also waits for the cores the workers keep busy."""
    import resource

    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    subprocess.run([str(Path(sys.executable).parent / "sweepit"), "status", str(sweep_dir)], cwd=REPO,
                   capture_output=True, timeout=120)
    wall, after = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return round(wall, 2), round(cpu, 2)


def first_start(sweep_dir: Path) -> tuple[float, list[str]] | None:
    """The first job's start (epoch seconds, from the workers' logs) and the workers' array ids (their log files'
    names), once a job has started; else None. Reads the logs alone (a glob of 100,000 job directories would not)."""
    import re
    from datetime import datetime

    line = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[sweepit\.slurm\._engine\] worker \S+: "
                      r"job \d+ started")
    logs = list(sweep_dir.glob(".submitit/*/*_log.err"))
    starts = [datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp() for log in logs
              for m in map(line.match, log.read_text(errors="replace").splitlines()) if m]
    return (min(starts), sorted({log.name.split("_")[0] for log in logs})) if starts else None


def stop_at_first_job(proc: subprocess.Popen[bytes], sweep_dir: Path, t0: float) -> tuple[float | None, int]:
    """`--first-job-only`: once a job has started, cancel the workers' arrays (by id: other sweeps on the cluster
    are left alone) and stop the driver (SIGINT, then SIGKILL after 60 s); the seconds from the command to that
    start (None if the driver ended first), and the driver's peak resident memory until then in KB (its plan)."""
    import signal

    peak_kb = 0
    while proc.poll() is None:
        peak_kb = max(peak_kb, vm_kb(proc.pid))
        found = first_start(sweep_dir)
        if found is not None:
            subprocess.run(["scancel", *found[1]], check=False)
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return round(found[0] - t0, 1), peak_kb
        time.sleep(0.5)
    return None, peak_kb


def run_mode(mode: str, app: str, n_jobs: int, work_s: float, epochs: int, workers: int, slots: int,
             work: Path, status_every_s: float = 0.0, first_job_only: bool = False) -> dict[str, Any]:
    label = f"{app}-{mode}-{n_jobs}-{time.strftime('%H%M%S')}"
    sweep_dir, calls_log, shim_dir = work / label, work / f"{label}.calls", work / "shims"
    extra = [f"hydra.launcher.workers={workers}", f"hydra.launcher.slots={slots}"] if mode == "packed" else []
    cmd = [sys.executable, str(APPS[app]), "-m", *sweep_args(app, n_jobs, work_s, epochs), *extra,
           f"hydra.sweep.dir={sweep_dir}"]
    bench_slurm.make_shims(shim_dir, calls_log)
    env = {**os.environ, "PATH": f"{shim_dir}:{os.environ['PATH']}"}
    print(f"$ {' '.join(cmd)}", flush=True)
    t0 = time.time()
    peak_kb, status_s, status_cpu_s, rss_mb = 0, [], [], []
    with open(work / f"{label}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
        if first_job_only:
            to_first, peak_kb = stop_at_first_job(proc, sweep_dir, t0)
            print(f"  {mode}: command to the first job's start {to_first} s (then cancelled), driver peak RSS until "
                  f"then {peak_kb / 1024:.1f} MB", flush=True)
            return {"mode": mode, "app": app, "command": " ".join(cmd[1:]), "n_jobs": n_jobs,
                    "command_to_first_job_s": to_first, "driver_peak_rss_mb_to_first_job": round(peak_kb / 1024, 1),
                    "sweep_dir": str(sweep_dir)}
        next_status = time.monotonic() + status_every_s if status_every_s else float("inf")
        next_rss = time.monotonic()
        while proc.poll() is None:
            peak_kb = max(peak_kb, vm_kb(proc.pid))
            # When the driver holds what: its resident memory every 5 s. Under 1 MB is not yet the Python driver (seen
            # twice under load right after the fork, 0 and under 0.05 MB, while exec swaps the image): the next look.
            if time.monotonic() >= next_rss and (rss_kb := vm_kb(proc.pid, "VmRSS")) >= 1024:
                rss_mb.append((round(time.time() - t0, 1), round(rss_kb / 1024, 1)))
                next_rss += 5.0
            if time.monotonic() >= next_status and (sweep_dir / "sweep.json").exists():
                wall_s, cpu_s = timed_status(sweep_dir)
                status_s.append(wall_s)
                status_cpu_s.append(cpu_s)
                next_status = time.monotonic() + status_every_s
            time.sleep(0.5)
        code = proc.returncode
    wall = time.time() - t0
    statuses = [json.loads(p.read_text()).get("status") for p in sweep_dir.glob("*/result.json")]
    from sweepit.results._manifest import read_manifest

    m = read_manifest(sweep_dir)
    ids = (list(m.workers.get("ids", [])) if mode == "packed"
           else sorted({str(e.extra.get("slurm_job_id")) for e in m.jobs.values()}))
    time.sleep(2)  # slurmdbd records a job's end a moment after it
    row = {"mode": mode, "app": app, "command": " ".join(cmd[1:]), "wall_s": round(wall, 2), "exit_code": code,
           "n_jobs": n_jobs, "n_completed": statuses.count("completed"), "slurm_jobs_created": len(ids),
           "jobs_span_s": jobs_span_s(sweep_dir), "billed_gpu_hours": billed_gpu_hours(ids),
           "calls": bench_slurm.count_calls(calls_log), "driver_peak_rss_mb": round(peak_kb / 1024, 1),
           "status_s": {"n": len(status_s), "max": max(status_s, default=None),
                        "median": upper_median(status_s)},
           "status_cpu_s": {"n": len(status_cpu_s), "max": max(status_cpu_s, default=None),
                            "median": upper_median(status_cpu_s), "all": status_cpu_s},
           "driver_rss_mb_every_5s": rss_mb,
           "sweep_dir": str(sweep_dir), "phases": worker_phases(sweep_dir, t0) if mode == "packed" else None}
    print(f"  {mode}: {wall:.1f} s wall, {row['n_completed']}/{n_jobs} completed, {len(ids)} Slurm job(s), "
          f"{row['billed_gpu_hours']} GPU-hours billed, calls {row['calls']}, driver peak RSS "
          f"{row['driver_peak_rss_mb']} MB, `sweepit status` during it: wall {row['status_s']}, "
          f"CPU {row['status_cpu_s']}, exit {code}", flush=True)
    if row["phases"]:
        print(f"  {mode}, phases from the workers' logs: {row['phases']}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--app", choices=sorted(APPS), default="fixed", help="the sweep (default fixed)")
    parser.add_argument("--jobs", type=int, default=2000, help="jobs in the grid (default 2000)")
    parser.add_argument("--epochs", type=int, default=3, help="--app digits: epochs per training (default 3)")
    parser.add_argument("--work-s", type=float, default=0.1, help="each job's fixed work in seconds (default 0.1)")
    parser.add_argument("--workers", type=int, default=2, help="packed workers (default 2: this machine's cores)")
    parser.add_argument("--slots", type=int, default=1, help="jobs at once per packed worker (default 1)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="default: both")
    parser.add_argument("--status-every", type=float, default=0.0, metavar="S",
                        help="run `sweepit status` every S seconds during each sweep and time it (default: never)")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    parser.add_argument("--work", type=Path, default=OUT, help=f"sweeps, logs and call counts (default {OUT})")
    parser.add_argument("--first-job-only", action="store_true",
                        help="packed mode: time the command to the first job's start, then cancel the sweep")
    args = parser.parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    bench_slurm.require_cluster()
    from machine import machine_info, machine_line

    machine, info = machine_line(), machine_info()  # info: taken at the start (the commit it runs)
    print(machine, flush=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    if args.first_job_only:
        rows = {"packed": run_mode("packed", args.app, args.jobs, args.work_s, args.epochs, args.workers, args.slots,
                                   work, first_job_only=True)}
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"benchmark": "bench/bench_packing.py", "argv": sys.argv[1:],
                                             "started": started, "machine": machine, "machine_info": info,
                                             "runs": list(rows.values())}, indent=1) + "\n")
        return 0 if rows["packed"]["command_to_first_job_s"] is not None else 1
    rows = {mode: run_mode(mode, args.app, args.jobs, args.work_s, args.epochs, args.workers, args.slots, work,
                           args.status_every) for mode in args.modes}
    ideal = args.jobs * args.work_s / (args.workers * args.slots) if args.app == "fixed" else None
    packed, per_job = rows.get("packed"), rows.get("per_job")
    overhead = packed["wall_s"] / ideal if packed and ideal else None
    span = packed["jobs_span_s"] / ideal if packed and ideal and packed["jobs_span_s"] else None
    ratio = packed["wall_s"] / per_job["wall_s"] if packed and per_job else None
    all_ran = all(r["exit_code"] == 0 and r["n_completed"] == args.jobs for r in rows.values())
    met = all_ran and (overhead <= TARGET_OVERHEAD if overhead is not None else True)
    what = (f"{args.jobs} jobs of {args.work_s} s (bench/apps/fixed_work.py)" if args.app == "fixed" else
            f"{args.jobs} digits trainings of {args.epochs} epochs (train.py task=digits)")
    print(f"\n{what}, packed: {args.workers} worker(s) x {args.slots} slot(s)"
          + (f"; ideal {ideal:.1f} s (total work / slots):" if ideal else ":"))
    print(f"{'mode':<10}{'wall_s':>9}{'completed':>11}{'slurm_jobs':>12}{'gpu_h':>8}" + "".join(
        f"{n:>9}" for n in bench_slurm.COUNTED))
    for r in rows.values():
        print(f"{r['mode']:<10}{r['wall_s']:>9.1f}{r['n_completed']:>11}{r['slurm_jobs_created']:>12}"
              f"{r['billed_gpu_hours'] if r['billed_gpu_hours'] is not None else float('nan'):>8.3f}"
              + "".join(f"{r['calls'][n]:>9}" for n in bench_slurm.COUNTED))
    if overhead is not None:
        print(f"packed / ideal: {overhead:.2f}x (target <= {TARGET_OVERHEAD}x): {'met' if met else 'missed'}")
    if span is not None:
        print(f"packed, first job's start to last job's end / ideal: {span:.2f}x (without the driver's start and its "
              "table and report)")
    if ratio is not None:
        print(f"packed / one Slurm job per job: {ratio:.3f}x wall")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "benchmark": "bench/bench_packing.py", "argv": sys.argv[1:], "started": started, "machine": machine,
            "machine_info": info, "app": args.app, "jobs": args.jobs, "work_s": args.work_s, "epochs": args.epochs,
            "workers": args.workers, "slots": args.slots, "ideal_s": round(ideal, 2) if ideal else None,
            "runs": list(rows.values()),
            "overhead_packed_to_ideal": None if overhead is None else round(overhead, 3),
            "overhead_jobs_span_to_ideal": None if span is None else round(span, 3),
            "ratio_packed_to_per_job": None if ratio is None else round(ratio, 4), "target_overhead": TARGET_OVERHEAD,
            "verdict": "met" if met else "missed"}, indent=1) + "\n")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
