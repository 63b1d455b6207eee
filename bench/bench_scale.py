"""The driver side of sweeps of 1,000 to 100,000 jobs (issue 14): planning, sweep.json writes, `sweepit status`,
`sweepit ls` and `sweepit report`, each timed with its peak memory, at every size given.

Run: python bench/bench_scale.py --jobs 1000,10000,100000 --json bench/results/scale/scale.json

No job runs and no Hydra composes: the sweep is generated (`bench/synthetic_sweep.py`: job directories with
.hydra/overrides.yaml, metrics.jsonl of --epochs epochs and result.json, mostly completed, a few failed, diverged
and running) with a local launcher's sweep.json that records each job's state.
- plan: the Slurm launcher's own per-job work for the generated overrides: `SlurmSweep.plan` (Hydra's
  composition bypassed: every job gets the same small config, so a real app's config memory is not in this
  figure), then `submit_jobs` with sbatch replaced by a function that returns array ids (job directories, log
  links, sweep.json entries and their journal lines, one array per MaxArraySize=1001 jobs). The local cluster
  is asked once for its partition, as a real sweep does.
- writes: every job started and ended once, as the drivers record them (one `write_manifest` per change);
  against the whole rewrite at every change that sweepit did before (run in full up to 1,000 jobs, beyond
  that one rewrite timed and multiplied by the 2N changes: marked `extrapolated`).
- status, ls, report: the `sweepit` command in a new process, as a user types it (imports included).
Each step runs in its own process; peak memory is that process's maxrss.

With --live SIZES: `sweepit status` on a sweep its driver follows, halfway (`write_followed_sweep`: a packed sweep's
records, half the jobs ended through the journal, a live process holding the sweep's lock), --repeat times each;
with the CPU of the driver's record writes that made it and the size of its record files. Run it with each code's
Python (a worktree's venv) to compare two versions of the records: the bench is the same, the records each one's.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine import machine_line

STATUS_GOAL_S, REPORT_GOAL_S, DRIVER_GOAL_MB = 2.0, 10.0, 500.0
FULL_OLD_WRITES_UP_TO = 1000


def _grid(n_jobs: int) -> dict[str, list[str]]:
    """optimizer (10) x lr (10) x seed: as many seeds as `n_jobs` needs."""
    from synthetic_sweep import DEFAULT_GRID

    return {"optimizer": DEFAULT_GRID["optimizer"], "lr": DEFAULT_GRID["lr"],
            "seed": [str(s) for s in range(max(1, -(-n_jobs // 100)))]}


def generate(sweep: Path, n_jobs: int, n_epochs: int) -> None:
    """The job directories and a local launcher's sweep.json (whole), each job's state its result's."""
    from sweepit.results._job_files import read_record
    from sweepit.results._manifest import JobEntry, Manifest, write_manifest
    from synthetic_sweep import write_synthetic_sweep

    dirs = write_synthetic_sweep(sweep, n_jobs=n_jobs, n_epochs=n_epochs, grid=_grid(n_jobs))
    jobs = {}
    for num, job_dir in enumerate(dirs):
        overrides = (job_dir / ".hydra" / "overrides.yaml").read_text().replace("- ", "").split()
        status = read_record(job_dir).status
        jobs[num] = JobEntry(num=num, overrides=overrides, job_dir=str(job_dir), state=status or "running",
                             pid=None if status else 2 ** 22 + 1, started_at="2026-01-01T00:00:00.000+00:00")
    write_manifest(Manifest(sweep_dir=str(sweep), argv=[sys.executable, "train.py", "-m"], cwd=str(sweep.parent),
                            launcher="local", jobs=jobs))


# -- steps, each in its own process ------------------------------------------------------------------------------
def step_plan(work: Path, n_jobs: int) -> dict[str, Any]:
    from omegaconf import OmegaConf

    import sweepit.slurm._submit as submit_module
    from sweepit.slurm import PlannedJob, SlurmOptions, SlurmSweep

    sweep = work / "planned"
    shutil.rmtree(sweep, ignore_errors=True)
    grid = _grid(n_jobs)
    config = OmegaConf.create({"trainer": {"gpus": 0}, "metric": "val_acc", "direction": "maximize"})
    n_calls = [0]

    def fake_submit(tasks: list[Any], params: dict[str, Any], folder: Path, *_: Any) -> list[str]:
        n_calls[0] += 1
        return [f"{1000 + n_calls[0]}_{i}" for i in range(len(tasks))]

    submit_module.submit = fake_submit  # type: ignore[assignment]

    def plan_job(job: PlannedJob, keys: tuple[str, ...]) -> dict[str, Any]:
        job.config = config
        job.job_dir = sweep / f"{job.num}_{','.join(job.overrides)}"
        return {key: OmegaConf.select(config, key, default=None) for key in keys}

    options = SlurmOptions.from_params({"gpus_key": None, "timeout_min": 10})
    slurm = SlurmSweep(options, sweep, plan_job=plan_job, make_task=lambda job: print)
    t0, c0 = time.perf_counter(), time.process_time()
    seeds = grid["seed"]
    overrides = [[f"optimizer={o}", f"lr={lr}", f"seed={s}"] for s in seeds for o in grid["optimizer"]
                 for lr in grid["lr"]][:n_jobs]
    jobs = [PlannedJob(num=n, overrides=o) for n, o in enumerate(overrides)]
    max_array_size = slurm.plan(jobs)
    t_plan, c_plan = time.perf_counter() - t0, time.process_time() - c0
    u0, k0 = _user_sys()
    sweep.mkdir(parents=True)
    from sweepit.results import JobState, Ledger, SweepLock

    manifest = Ledger.open(sweep, "slurm", SweepLock(sweep))
    for job in jobs:
        manifest.plan(job.num, job.overrides, str(job.job_dir), JobState.NOT_STARTED)
    manifest.write()
    for chunk in submit_module.arrays(jobs, max_array_size):
        submit_module.submit_jobs(chunk, manifest, options, lambda job: print)
    t_submit, c_submit = time.perf_counter() - t0 - t_plan, time.process_time() - c0 - c_plan
    u1, k1 = _user_sys()
    return {"plan_s": t_plan, "plan_cpu_s": c_plan, "submit_s": t_submit, "submit_cpu_s": c_submit,
            "submit_user_s": u1 - u0, "submit_sys_s": k1 - k0,
            "sbatch_calls": n_calls[0], "max_array_size": max_array_size}


def _user_sys() -> tuple[float, float]:
    """This process's CPU seconds so far: in its own code (user) and in the kernel for it (system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def step_fs(work: Path, n_jobs: int) -> dict[str, Any]:
    """The file system's own part of submitting: what the submit step asks of the kernel for each job (its
    directory in the sweep directory, two log links in it), done by a bare loop. The kernel's time for these grows
    with the directory's size on this machine whatever the program; it is the baseline for the submit step."""
    base = work / "fs"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    t0, (u0, k0) = time.perf_counter(), _user_sys()
    for i in range(n_jobs):
        job_dir = f"{base}/{i}_optimizer=adam,lr=0.001,seed={i}"
        os.mkdir(job_dir)
        os.symlink(f"{work}/logs/{i}_0_log.out", f"{job_dir}/stdout.log")
        os.symlink(f"{work}/logs/{i}_0_log.err", f"{job_dir}/stderr.log")
    wall, (u1, k1) = time.perf_counter() - t0, _user_sys()
    shutil.rmtree(base)
    return {"fs_s": wall, "fs_user_s": u1 - u0, "fs_sys_s": k1 - k0}


def step_real(work: Path, n_jobs: int) -> dict[str, Any]:
    """A real Hydra sweep of `n_jobs` jobs on the local launcher (examples/any_hydra_app: jobs that take
    milliseconds), driven in this process: the driver's peak memory with Hydra's sweeper, the composed configs,
    the JobReturns and sweepit's records of every job. The jobs run in forked workers (not counted).

    Besides the peak, a thread samples the driver's RSS and the jobs started (entries of the sweep directory)
    every second while the jobs run: the least-squares slope of RSS against jobs, over the samples of the second
    half of the jobs (the first few hundred jobs grow the driver faster: caches and allocator pools filling up),
    is the driver's growth a job, which a difference of two peaks (a few MB of noise)
    cannot measure at 1-5 KB a job. The end of the sweep (the summary it prints) is the peak's excess over the
    last sample."""
    import runpy
    import threading

    sweep = work / "real"
    shutil.rmtree(sweep, ignore_errors=True)
    app = Path(__file__).resolve().parent.parent / "examples" / "any_hydra_app" / "app.py"
    sys.argv = [str(app), "-m", f"x=range(0,{n_jobs})", f"hydra.sweep.dir={sweep}",
                "hydra/job_logging=none", "hydra/hydra_logging=none"]
    samples: list[tuple[int, float]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_rss, args=(sweep, samples, stop), daemon=True)
    t0 = time.perf_counter()
    sampler.start()
    with contextlib.redirect_stdout(io.StringIO()):
        runpy.run_path(str(app), run_name="__main__")
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    done = len(list(sweep.glob("*/result.json")))
    shutil.rmtree(sweep)
    running = [(n, mb) for n, mb in samples if n_jobs // 2 <= n < n_jobs]  # after the warm-up (~500 jobs here)
    slope_kb = _slope(running) * 1024 if len(running) >= 3 else None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    step = max(1, len(samples) // 200)
    return {"real_jobs": n_jobs, "real_completed": done, "real_wall_s": wall, "real_peak_mb": peak,
            "real_growth_kb_per_job": slope_kb, "real_samples_used": len(running),
            "real_last_running_mb": running[-1][1] if running else None,
            "real_end_excess_mb": peak - running[-1][1] if running else None,
            "real_samples": samples[::step]}


def _sample_rss(sweep: Path, samples: list[tuple[int, float]], stop: Any) -> None:
    page_mb = os.sysconf("SC_PAGE_SIZE") / 2**20
    while not stop.wait(1.0):
        with open("/proc/self/statm") as f:
            rss_mb = int(f.read().split()[1]) * page_mb
        try:
            with os.scandir(sweep) as entries:
                started = sum(1 for e in entries if e.name[:1].isdigit())  # the job directories
        except FileNotFoundError:
            started = 0
        samples.append((started, rss_mb))


def _slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of y over x."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


def step_writes(work: Path, n_jobs: int) -> dict[str, Any]:
    """2N journal writes; the old whole rewrites for comparison."""
    from sweepit.results._manifest import read_manifest, write_manifest

    sweep = work / "planned"  # the planned Slurm sweep's manifest: the largest records (Slurm ids, log paths)
    m = read_manifest(sweep)
    t0, c0 = time.perf_counter(), time.process_time()
    for n in sorted(m.jobs):
        m.jobs[n].state = "running"
        write_manifest(m, [n])
        m.jobs[n].state = "completed"
        write_manifest(m, [n])
    journal_s, journal_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    size_mb = (sweep / "sweep.json").stat().st_size / 1e6
    t0, c0 = time.perf_counter(), time.process_time()
    if n_jobs <= FULL_OLD_WRITES_UP_TO:
        for n in sorted(m.jobs):
            m.jobs[n].state = "running"
            write_manifest(m)
            m.jobs[n].state = "completed"
            write_manifest(m)
        whole_s, whole_cpu_s, extrapolated = time.perf_counter() - t0, time.process_time() - c0, False
    else:
        for _ in range(3):
            write_manifest(m)
        whole_s, extrapolated = (time.perf_counter() - t0) / 3 * 2 * n_jobs, True
        whole_cpu_s = (time.process_time() - c0) / 3 * 2 * n_jobs
    return {"journal_writes_s": journal_s, "journal_writes_cpu_s": journal_cpu_s, "whole_rewrites_s": whole_s,
            "whole_rewrites_cpu_s": whole_cpu_s, "whole_extrapolated": extrapolated,
            "n_writes": 2 * n_jobs, "snapshot_mb": size_mb, "generations": m.generation}


def _child_peak(argv: list[str], out: bool = False) -> dict[str, Any]:
    """Run `argv` to its end: its wall time, its own peak memory (wait4's maxrss of that process) and, with
    `out`, the JSON object its last line printed."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: a pipe left unread while stdout is read fills up
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err)
        stdout = proc.stdout.read() if proc.stdout else b""
        _, status, usage = os.wait4(proc.pid, 0)
        err.seek(0)
        stderr = err.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} failed ({proc.returncode}): {stderr.decode()[-2000:]}")
    measured = json.loads(stdout.decode().strip().splitlines()[-1]) if out else {}
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024, **measured}


def run_size(work: Path, n_jobs: int, n_epochs: int) -> dict[str, Any]:
    here = [sys.executable, str(Path(__file__).resolve())]
    sweepit = [sys.executable, "-m", "sweepit.cli"]
    sweep = work / "outputs" / "synthetic" / f"n{n_jobs}"
    t0 = time.perf_counter()
    generate(sweep, n_jobs, n_epochs)
    row: dict[str, Any] = {"jobs": n_jobs, "epochs": n_epochs, "generate_s": time.perf_counter() - t0}
    print(f"{n_jobs} jobs generated in {row['generate_s']:.1f} s", flush=True)
    row["plan"] = _child_peak([*here, "--step", "plan", "--n", str(n_jobs), "--work", str(work)], out=True)
    row["writes"] = _child_peak([*here, "--step", "writes", "--n", str(n_jobs), "--work", str(work)], out=True)
    row["fs"] = _child_peak([*here, "--step", "fs", "--n", str(n_jobs), "--work", str(work)], out=True)
    row["status"] = _child_peak([*sweepit, "status", str(sweep)])
    row["ls"] = _child_peak([*sweepit, "ls", str(work / "outputs")])
    row["report"] = _child_peak([*sweepit, "report", str(sweep)])
    report_dir = sweep / "report"
    row["report"]["html_mb"] = (report_dir / "index.html").stat().st_size / 1e6
    row["report"]["csv_mb"] = (report_dir / "results.csv").stat().st_size / 1e6
    print(json.dumps(row), flush=True)
    shutil.rmtree(sweep)
    shutil.rmtree(work / "planned", ignore_errors=True)
    return row


# Per step, the CPU seconds whose growth with the sweep's size is judged (wall time on a shared 2-core machine
# is noise): (label, part of a row, key).
GROWTH = (("plan (CPU)", "plan", "plan_cpu_s"), ("submit, sweepit's code (user CPU)", "plan", "submit_user_s"),
          ("submit, kernel (system CPU)", "plan", "submit_sys_s"), ("bare mkdir+symlinks, kernel", "fs", "fs_sys_s"),
          ("sweep.json journal writes (CPU)", "writes", "journal_writes_cpu_s"), ("status (CPU)", "status", "cpu_s"),
          ("ls (CPU)", "ls", "cpu_s"), ("report (CPU)", "report", "cpu_s"))
LINEAR_SLACK = 1.5  # a step grows "faster than linearly" when its time grows more than 1.5x the jobs' factor


def step_live(work: Path, n_jobs: int) -> dict[str, Any]:
    from synthetic_sweep import write_followed_sweep

    sweep = work / f"live-{n_jobs}"
    shutil.rmtree(sweep, ignore_errors=True)
    writes_cpu_s = write_followed_sweep(sweep, n_jobs)
    sizes = {name: (sweep / name).stat().st_size for name in ("sweep.json", "sweep.journal", "sweep.live.json")
             if (sweep / name).exists()}
    return {"writes_cpu_s": writes_cpu_s, "n_writes": n_jobs + 4 + 1, "bytes": sizes}


def run_live(work: Path, n_jobs: int, repeat: int) -> dict[str, Any]:
    """A followed sweep of `n_jobs` written by this Python's sweepit, then `sweepit status` on it `repeat` times."""
    import socket

    here = [sys.executable, str(Path(__file__).resolve())]
    row: dict[str, Any] = {"jobs": n_jobs, "python": sys.executable}
    row["generate"] = _child_peak([*here, "--step", "live", "--n", str(n_jobs), "--work", str(work)], out=True)
    sweep = work / f"live-{n_jobs}"
    holder = subprocess.Popen(["sleep", "3600"])  # the driver, as `sweepit status` sees one: alive, on this host
    try:
        (sweep / "sweep.lock").write_text(json.dumps({"host": socket.gethostname(), "pid": holder.pid,
                                                      "since": "2026-11-26T17:00:00.000+00:00", "argv": ["bench"]}))
        row["status"] = [_child_peak([sys.executable, "-m", "sweepit.cli", "status", str(sweep)])
                         for _ in range(repeat)]
    finally:
        holder.kill()
        holder.wait()
    shutil.rmtree(sweep)
    cpu = sorted(r["cpu_s"] for r in row["status"])
    print(f"{n_jobs} jobs, followed: status CPU median {cpu[len(cpu) // 2]:.3f} s (min {cpu[0]:.3f}, max "
          f"{cpu[-1]:.3f}), peak {max(r['peak_mb'] for r in row['status']):.0f} MB; records "
          f"{json.dumps(row['generate']['bytes'])}; the driver's record writes {row['generate']['writes_cpu_s']:.2f} "
          "s CPU", flush=True)
    return row


def run_real(work: Path, n_jobs: int) -> dict[str, Any]:
    here = [sys.executable, str(Path(__file__).resolve())]
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        row = _child_peak([*here, "--step", "real", "--n", str(n_jobs), "--work", tmp], out=True)
    print(json.dumps(row), flush=True)
    return row


def _print_real(real: list[dict[str, Any]]) -> None:
    print("\nA real Hydra sweep on the local launcher (examples/any_hydra_app), the driver's own peak memory:")
    for r in real:
        print(f"  {r['real_jobs']:>7} jobs ({r['real_completed']} completed) in {r['real_wall_s']:.0f} s: "
              f"{r['real_peak_mb']:.0f} MB")
        if r.get("real_growth_kb_per_job") is None:
            continue
        # the last RSS while jobs ran, the growth a job up to 100,000, and the end's excess (its summary) on top
        at_100k = (r["real_last_running_mb"] + r["real_growth_kb_per_job"] * (100_000 - r["real_jobs"]) / 1024
                   + r["real_end_excess_mb"])
        print(f"    while the jobs ran: {r['real_growth_kb_per_job']:.2f} KB a job (least squares over "
              f"{r['real_samples_used']} samples, last {r['real_last_running_mb']:.0f} MB); the end adds "
              f"{r['real_end_excess_mb']:.0f} MB; extrapolated to 100,000 jobs: {at_100k:.0f} MB "
              f"(goal <= {DRIVER_GOAL_MB:g} MB: {'met' if at_100k <= DRIVER_GOAL_MB else 'missed'}; not run)")
    if len(real) < 2:
        return
    a, b = real[-2], real[-1]
    per_job_kb = (b["real_peak_mb"] - a["real_peak_mb"]) * 1024 / (b["real_jobs"] - a["real_jobs"])
    at_100k = b["real_peak_mb"] + per_job_kb * (100_000 - b["real_jobs"]) / 1024
    print(f"  growth {per_job_kb:.1f} KB a job from {a['real_jobs']} to {b['real_jobs']} jobs; extrapolated to "
          f"100,000 jobs: {at_100k:.0f} MB (goal <= {DRIVER_GOAL_MB:g} MB): "
          f"{'met' if at_100k <= DRIVER_GOAL_MB else 'missed'} (extrapolated, not run)")


def _print_table(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'jobs':>8} {'plan s':>8} {'submit s':>9} {'usr':>6} {'sys':>6} {'fs sys':>7} {'drv MB':>7} "
          f"{'writes s':>9} {'old s':>9} {'status s':>9} {'MB':>5} {'ls s':>6} {'MB':>5} {'report s':>9} {'MB':>5}")
    for r in rows:
        w, pl = r["writes"], r["plan"]
        old = f"{w['whole_rewrites_s']:.1f}{'*' if w['whole_extrapolated'] else ''}"
        print(f"{r['jobs']:>8} {pl['plan_s']:>8.2f} {pl['submit_s']:>9.2f} {pl['submit_user_s']:>6.2f} "
              f"{pl['submit_sys_s']:>6.2f} {r['fs']['fs_sys_s']:>7.2f} {pl['peak_mb']:>7.0f} "
              f"{w['journal_writes_s']:>9.2f} {old:>9} {r['status']['wall_s']:>9.2f} {r['status']['peak_mb']:>5.0f} "
              f"{r['ls']['wall_s']:>6.2f} {r['ls']['peak_mb']:>5.0f} {r['report']['wall_s']:>9.2f} "
              f"{r['report']['peak_mb']:>5.0f}")
    print("(* extrapolated from one whole rewrite x 2N changes; usr/sys: the submit step's CPU in sweepit's code and "
          "in the kernel; fs sys: the kernel's CPU for a bare loop making the same directories and links)")
    for a, b in itertools.pairwise(rows):
        factor = b["jobs"] / a["jobs"]
        print(f"growth from {a['jobs']} to {b['jobs']} jobs (x{factor:g}):")
        for label, part, key in GROWTH:
            before, after = a[part][key], b[part][key]
            grew = after / before if before > 0 else float("inf")
            verdict = "linear or better" if grew <= LINEAR_SLACK * factor else "faster than linear"
            print(f"  {label:<36} {before:8.2f} -> {after:8.2f} s: x{grew:.1f} ({verdict})")
    big = rows[-1]
    if big["jobs"] < 100_000:
        print(f"(the goals are for 100,000 jobs; the largest size here is {big['jobs']}: no verdict)")
        return
    for name, value, goal, unit in (("driver peak memory (plan + submit)", big["plan"]["peak_mb"], DRIVER_GOAL_MB,
                                     "MB"),
                                    ("sweepit status", big["status"]["wall_s"], STATUS_GOAL_S, "s"),
                                    ("sweepit report", big["report"]["wall_s"], REPORT_GOAL_S, "s")):
        print(f"{name} at {big['jobs']} jobs: {value:.2f} {unit} (goal <= {goal:g} {unit}): "
              f"{'met' if value <= goal else 'missed'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="1000,10000,100000", help="comma-separated sweep sizes")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    parser.add_argument("--work", type=Path, help="where to generate the sweeps (default: a temporary directory)")
    parser.add_argument("--real", default="", help="comma-separated sizes of real Hydra sweeps (local launcher, "
                        "examples/any_hydra_app) whose driver peak memory is measured and extrapolated to 100,000 "
                        "jobs (e.g. 1000,4000: about 40 ms a job here)")
    parser.add_argument("--live", default="", help="comma-separated sizes of followed sweeps whose `sweepit status` "
                        "alone is timed (no other step runs)")
    parser.add_argument("--repeat", type=int, default=3, help="`sweepit status` runs per --live size")
    parser.add_argument("--step", choices=["plan", "writes", "fs", "real", "live"], help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        fn = {"plan": step_plan, "writes": step_writes, "fs": step_fs, "real": step_real, "live": step_live}[args.step]
        print(json.dumps(fn(args.work, args.n)))
        return 0
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
    if args.live:
        with tempfile.TemporaryDirectory(dir=args.work) as tmp:
            live = [run_live(Path(tmp), int(n), args.repeat) for n in args.live.split(",")]
        uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        print(uptime)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"command": " ".join(sys.argv), "machine": machine_line(),
                                             "uptime": uptime, "live": live}, indent=1) + "\n")
        return 0
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        rows = [run_size(Path(tmp), int(n), args.epochs) for n in args.jobs.split(",")]
    _print_table(rows)
    real = [run_real(Path(args.work or tempfile.gettempdir()), int(n)) for n in args.real.split(",") if n]
    if real:
        _print_real(real)
    machine = machine_line()
    print(machine)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), "machine": machine, "uptime": uptime,
                                         "sizes": rows, "real": real}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
