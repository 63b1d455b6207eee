"""One Slurm job per combination, sweepit's Slurm launcher against hydra-submitit-launcher's `submitit_slurm`, on a
plain Hydra app (`bench/apps/fixed_work.py`: `work_s` seconds of sleep, no torch, no sweepit import).

Run: flock /tmp/slurm-bench.lock python bench/bench_slurm_jobs.py [--jobs 16] [--work-s 1] [--pairs 5] [--json PATH]
     (or: make bench-slurm-jobs, which holds the lock; needs `make slurm-up`; about 25 s a pair for 16 jobs of 1 s on a
     2-core machine)

`--pairs` alternated pairs (sweepit first in even pairs, submitit_slurm first in odd ones) of the same sweep,
`fixed_work.py -m +work_s=W +x=range(N)`, both with 1 task and 1 CPU a job; sweepit's summary table and report are
on (what its users get: the report through sweepit's callback, added to the plain app). Per run: the wall time from
the command to its exit, the driver's CPU (its own and its
children's: sbatch, squeue, sacct), and per job (medians over the sweep's jobs): the time from submitit's "Loading
pickle" to its "Job completed successfully" in the job's own log, that minus `work_s` (the job's own overhead), the
job's CPU as sacct counts it (TotalCPU, every step of the job), and the size of the pickle submitit loads; and where
the wall time goes: from the command to the first job's pickle load, and from the last job's end to the exit. The
ratios sweepit / submitit_slurm are of the medians over the pairs. With sweepit installed beside it, Hydra's plugin
scan in submitit_slurm's driver and jobs imports sweepit's plugins too: `--hsl-python` runs it from a venv without.
`--python` runs sweepit's side from another venv (another checkout: a before and after). `--launchers slurm` measures
sweepit's alone (nothing installed).

sweepit's sources are compiled first (`compileall`, as `make test` does): where PYTHONDONTWRITEBYTECODE is set an
editable install keeps no bytecode, and every job would compile them again, which an installed package does not.
hydra-submitit-launcher is installed for the run (`pip install --no-deps`) when missing, and uninstalled at the end
(`bench_slurm.py` does the same). Sweeps and logs go under `--work` (default bench/out/slurm-jobs/).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from bench_slurm import SUBMITIT_SPEC, pip, require_cluster  # noqa: E402
from machine import machine_info, machine_line, write_json  # noqa: E402

OUT = REPO / "bench" / "out" / "slurm-jobs"
APP = REPO / "bench" / "apps" / "fixed_work.py"
LAUNCHERS = ("slurm", "submitit_slurm")
REQUEST = {
    # sweepit's end as its users get it: the results table (the launcher's) and the report (its callback's, which
    # sweepit's own apps configure and a plain app adds so).
    "slurm": ["hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1",
              "+hydra.callbacks.summary._target_=hydra_plugins.sweepit.callbacks.SweepSummary"],
    "submitit_slurm": ["hydra/launcher=submitit_slurm", "hydra.launcher.tasks_per_node=1",
                       "hydra.launcher.cpus_per_task=1", "hydra.launcher.array_parallelism=256"],
}
# sweepit's sources compiled by the interpreter that runs its sweeps (the one of `--python`)
COMPILE = ("import compileall, importlib.util as u\n"
           "for p in ('sweepit', 'hydra_plugins.sweepit'):\n"
           "    compileall.compile_dir(next(iter(u.find_spec(p).submodule_search_locations)), quiet=1)\n")
_STAMP = r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\)"
_LOADING = re.compile(_STAMP + r" - Loading pickle")
_COMPLETED = re.compile(_STAMP + r" - Job completed successfully")


@dataclass
class Run:
    launcher: str
    pair: int
    wall_s: float
    driver_cpu_s: float
    returncode: int
    loadavg_1min: float
    job_ids: list[str] = field(default_factory=list)
    in_job_s: list[float] = field(default_factory=list)  # "Loading pickle" to "Job completed", each job
    pickle_bytes: list[int] = field(default_factory=list)
    job_cpu_s: list[float] = field(default_factory=list)  # sacct's TotalCPU, read after the last run
    first_load_s: float | None = None  # from the command to the first job's "Loading pickle"
    last_done_s: float | None = None   # from the command to the last job's "Job completed"


def _stamp(match: re.Match[str] | None) -> float | None:
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() if match else None


def jobs_of(sweep_dir: Path) -> tuple[list[str], list[float], list[int], list[tuple[float, float]]]:
    """Each job's Slurm id, its time from loading the pickle to completed (from its log), its pickle's size, and
    (pickle loaded, completed) in seconds since the epoch."""
    ids, spans, sizes, stamps = [], [], [], []
    for out in sorted((sweep_dir / ".submitit").glob("**/*_0_log.out")):
        job_id = out.name.removesuffix("_0_log.out")
        text = out.read_text()
        start, end = _stamp(_LOADING.search(text)), _stamp(_COMPLETED.search(text))
        ids.append(job_id)
        if start is not None and end is not None:
            spans.append(end - start)
            stamps.append((start, end))
        pkl = out.parent / f"{job_id}_submitted.pkl"
        if pkl.exists():
            sizes.append(pkl.stat().st_size)
    return ids, spans, sizes, stamps


def cpu_s(text: str) -> float:
    """sacct's `[DD-][HH:]MM:SS[.mmm]` in seconds."""
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return (int(days or 0) * 24 + parts[0]) * 3600 + parts[1] * 60 + parts[2]


def sacct_cpu(ids: list[str], wait_s: float = 120.0) -> dict[str, float]:
    """TotalCPU of each job (its first row, which sums its steps; `-X` would show the allocation alone: 0).

    slurmdbd records a job's end some time after squeue drops it (seconds on a busy machine), so this asks again
    until every job's row has an end, or `wait_s` has passed; a job still missing then is left out and named."""
    deadline = time.monotonic() + wait_s
    while True:
        out = subprocess.run(["sacct", "-n", "-P", "--format=JobID,End,TotalCPU", "-j", ",".join(ids)],
                             capture_output=True, text=True, timeout=60).stdout if ids else ""
        rows = (line.split("|") for line in out.splitlines() if line.count("|") == 2)
        ended = {job_id: cpu_s(total) for job_id, end, total in rows
                 if "." not in job_id and total and end not in ("", "Unknown", "None")}
        missing = [i for i in ids if i not in ended]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(1)
    if missing:
        print(f"sacct has no end for job(s) {', '.join(missing)} after {wait_s:g} s: their CPU is left out",
              file=sys.stderr)
    return ended


def sweep(launcher: str, pair: int, n_jobs: int, work_s: float, work: Path, python: str) -> Run:
    label = f"{launcher}-{n_jobs}x{work_s:g}s-pair{pair}-{time.strftime('%H%M%S')}"
    sweep_dir = work / label
    cmd = [python, str(APP), "-m", f"+work_s={work_s}", f"+x=range({n_jobs})", *REQUEST[launcher],
           f"hydra.sweep.dir={sweep_dir}"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    load = os.getloadavg()[0]
    t0, epoch0 = time.perf_counter(), time.time()
    with open(work / f"{label}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    ids, spans, sizes, stamps = jobs_of(sweep_dir)
    run = Run(launcher, pair, wall, usage.ru_utime + usage.ru_stime, proc.returncode, load, ids, spans, sizes)
    if stamps:
        run.first_load_s = min(s for s, _ in stamps) - epoch0
        run.last_done_s = max(e for _, e in stamps) - epoch0
    print(f"  pair {pair} {launcher:<15} wall {wall:5.2f} s  driver CPU {run.driver_cpu_s:5.2f} s  "
          f"in-job {_med(spans):5.2f} s  first load {run.first_load_s or 0:5.2f} s  last done "
          f"{run.last_done_s or 0:5.2f} s  pickle {_med(sizes) / 1e3:5.1f} KB  {len(spans)}/{n_jobs} jobs logged  "
          f"exit {proc.returncode}  load {load:.2f}", flush=True)
    return run


def _med(values: list[float] | list[int]) -> float:
    return statistics.median(values) if values else float("nan")


def summary(runs: list[Run], work_s: float, launchers: list[str]) -> dict[str, dict[str, float]]:
    """Per launcher, the median over its runs of each run's figure (per-job figures: the run's median first)."""
    figures: dict[str, dict[str, float]] = {}
    for launcher in launchers:
        mine = [r for r in runs if r.launcher == launcher]
        figures[launcher] = {
            "wall_s": _med([r.wall_s for r in mine]),
            "driver_cpu_s": _med([r.driver_cpu_s for r in mine]),
            "in_job_s": _med([_med(r.in_job_s) for r in mine]),
            "job_overhead_s": _med([_med(r.in_job_s) for r in mine]) - work_s,
            "job_cpu_s": _med([_med(r.job_cpu_s) for r in mine]),
            "pickle_kb": _med([_med(r.pickle_bytes) for r in mine]) / 1e3,
            "first_load_s": _med([r.first_load_s for r in mine if r.first_load_s is not None]),
            "after_last_s": _med([r.wall_s - r.last_done_s for r in mine if r.last_done_s is not None]),
        }
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=16, help="jobs in each sweep (default 16)")
    parser.add_argument("--work-s", type=float, default=1.0, help="seconds of work in each job (default 1)")
    parser.add_argument("--pairs", type=int, default=5, help="alternated pairs of sweeps (default 5)")
    parser.add_argument("--keep-submitit", action="store_true", help="do not uninstall hydra-submitit-launcher")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter of sweepit's sweeps (default this one): another checkout's venv "
                             "measures that code (its sources compiled first, as here)")
    parser.add_argument("--hsl-python", default=sys.executable,
                        help="the interpreter of submitit_slurm's sweeps (default this one): one of a venv without "
                             "sweepit measures it as its users have it, with no sweepit plugin for Hydra to scan in "
                             "its driver and every job")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS),
                        help=f"comma-separated subset of {','.join(LAUNCHERS)} (default both)")
    parser.add_argument("--work", type=Path, default=OUT, help=f"sweeps and logs (default {OUT})")
    parser.add_argument("--json", type=Path, default=None, help="write the figures, command and machine here")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.pairs < 1:
        parser.error(f"--jobs and --pairs must be at least 1, but got {args.jobs} and {args.pairs}")
    launchers = [name for name in LAUNCHERS if name in args.launchers.split(",")]
    if "slurm" not in launchers or set(args.launchers.split(",")) - set(LAUNCHERS):
        parser.error(f"--launchers must name slurm and may add submitit_slurm, but got {args.launchers!r}")
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    require_cluster()
    subprocess.run([args.python, "-c", COMPILE], check=True, timeout=300)
    installed = False
    if "submitit_slurm" in launchers and importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
        pip("install", SUBMITIT_SPEC, "--no-deps")
        installed = True
    started = machine_info()
    print(machine_line(), flush=True)
    runs: list[Run] = []
    try:
        for pair in range(args.pairs):
            order = launchers if pair % 2 == 0 else launchers[::-1]
            runs += [sweep(launcher, pair, args.jobs, args.work_s, work,
                           args.hsl_python if launcher == "submitit_slurm" else args.python) for launcher in order]
    finally:
        if installed and not args.keep_submitit:
            pip("uninstall", "-y", "hydra-submitit-launcher")
    cpu = sacct_cpu([i for r in runs for i in r.job_ids])
    for r in runs:
        r.job_cpu_s = [cpu[i] for i in r.job_ids if i in cpu]
    figures = summary(runs, args.work_s, launchers)
    print(f"\n{args.jobs} Slurm jobs of {args.work_s:g} s ({APP.name}), medians of {args.pairs} alternated pairs:")
    names = list(figures["slurm"])
    print(f"{'launcher':<16}" + "".join(f"{n:>16}" for n in names))
    for launcher, row in figures.items():
        print(f"{launcher:<16}" + "".join(f"{row[n]:>16.3f}" for n in names))
    ratios = {n: figures["slurm"][n] / figures["submitit_slurm"][n] if figures["submitit_slurm"][n] else float("nan")
              for n in names} if "submitit_slurm" in figures else {}
    if ratios:
        print(f"{'sweepit / hsl':<16}" + "".join(f"{ratios[n]:>15.2f}x" for n in names))
    ok = all(r.returncode == 0 and len(r.in_job_s) == args.jobs for r in runs)
    if args.json is not None:
        write_json(args.json, {
            "benchmark": "slurm_jobs", "settings": {**vars(args), "work": str(work), "json": str(args.json)},
            "runs": [asdict(r) for r in runs], "figures": figures, "ratios": ratios, "all_completed": ok}, started)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
