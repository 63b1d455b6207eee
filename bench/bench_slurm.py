"""sweepit's Slurm launcher against hydra-submitit-launcher's `submitit_slurm`, on the local cluster.

Run: flock /tmp/slurm-bench.lock python bench/bench_slurm.py [--jobs 64] [--cancel-jobs 6] [--json PATH]
     (or: make bench-slurm, which holds the lock; needs `make slurm-up`; about 8 minutes on a 2-core machine)

1. A sweep of `--jobs` short trainings (`train.py -m task=linreg epochs=2 seed=range(N)`, one GPU each, so
   four run at once on the cluster's four fake GPUs), under each launcher in turn: wall time until the
   driver has every result (and the last result.json's time), and how many times each launcher ran `sbatch`,
   `squeue`, `sacct` and `scontrol`: a PATH shim logs every call and execs the real command.
2. Cancel detection: a sweep of `--cancel-jobs` longer trainings (about a minute each); once job 1 runs, it
   is cancelled with `scancel`, and the time until the driver reports it is measured (target <= 10 s):
   sweepit prints `sweepit: job 1 ... interrupted`; submitit_slurm has nothing to print until its wait on
   that job raises, which ends the driver (capped at --cancel-cap-s). The rest of the sweep is then cancelled.

hydra-submitit-launcher is not a dependency of sweepit: when missing, this script installs it with
`python -m pip install hydra-submitit-launcher==1.2.0 --no-deps` (for this benchmark only) and uninstalls it
at the end, because its plugin would otherwise be scanned by every Hydra start. Both launchers get the same
request: 1 task, 1 GPU, 1 CPU, 5 minutes. The report is off in both (`hydra.callbacks.summary.report=false`).
`--launchers slurm` measures sweepit's alone (nothing installed). Sweeps, logs and the call counts go under `--work`
(default bench/out/slurm/); `--json PATH` writes the figures with the command and the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sweepit.results._manifest import read_manifest

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "slurm"  # --work replaces it
LAUNCHERS = ("slurm", "submitit_slurm")
SUBMITIT_SPEC = "hydra-submitit-launcher==1.2.0"
COUNTED = ("sbatch", "squeue", "sacct", "scontrol")
TARGET_CANCEL_S = 10.0
REQUEST = {
    "slurm": ["hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1", "timeout_min=5"],
    "submitit_slurm": ["hydra/launcher=submitit_slurm", "hydra.launcher.gpus_per_node=1",
                       "hydra.launcher.tasks_per_node=1", "hydra.launcher.cpus_per_task=1",
                       "hydra.launcher.timeout_min=5", "hydra.launcher.array_parallelism=64"],
}
COMMON = ["device=cpu", "hydra.callbacks.summary.report=false"]


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "-q", *args]
    print(f"$ {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True)


def require_cluster() -> None:
    """Stop with what to do unless the local Slurm cluster takes jobs (`scripts/slurm-cluster.sh status`)."""
    status = subprocess.run([str(REPO / "scripts" / "slurm-cluster.sh"), "status"], capture_output=True, text=True)
    if status.returncode != 0:
        raise SystemExit("the local Slurm cluster is not usable: run `make slurm-up` (as root) first")


def make_shims(shim_dir: Path, calls_log: Path) -> None:
    """Executables named like Slurm's clients that log their name and exec the real one."""
    shim_dir.mkdir(parents=True, exist_ok=True)
    for name in COUNTED:
        real = shutil.which(name)
        if real is None:
            raise SystemExit(f"`{name}` must be on PATH (the local cluster's clients): run `make slurm-up` first")
        shim = shim_dir / name
        shim.write_text(f'#!/bin/sh\necho {name} >> "{calls_log}"\nexec "{real}" "$@"\n')
        shim.chmod(0o755)


def count_calls(calls_log: Path) -> dict[str, int]:
    lines = calls_log.read_text().split() if calls_log.exists() else []
    return {name: lines.count(name) for name in COUNTED}


def results(sweep_dir: Path) -> tuple[int, float | None]:
    """How many jobs wrote a completed result.json, and when the last result.json was written."""
    paths = list(sweep_dir.glob("*/result.json"))
    done = sum(json.loads(p.read_text()).get("status") == "completed" for p in paths)
    return done, max((p.stat().st_mtime for p in paths), default=None)


@dataclass
class SweepRun:
    launcher: str
    wall_s: float
    last_result_s: float | None
    n_completed: int
    calls: dict[str, int]
    returncode: int


def sweep(launcher: str, n_jobs: int, work: Path) -> SweepRun:
    label = f"sweep-{launcher}-{n_jobs}-{time.strftime('%H%M%S')}"
    sweep_dir, calls_log, shim_dir = work / label, work / f"{label}.calls", work / "shims"
    cmd = [sys.executable, "train.py", "-m", "task=linreg", "epochs=2", f"seed=range({n_jobs})", *COMMON,
           *REQUEST[launcher], f"hydra.sweep.dir={sweep_dir}"]
    env = {**os.environ, "PATH": f"{shim_dir}:{os.environ['PATH']}"}
    make_shims(shim_dir, calls_log)
    print(f"$ {' '.join(cmd)}", flush=True)
    t0 = time.time()
    with open(work / f"{label}.log", "w") as log:
        code = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    wall = time.time() - t0
    done, last = results(sweep_dir)
    run = SweepRun(launcher, wall, None if last is None else last - t0, done, count_calls(calls_log), code)
    print(f"  {launcher}: {wall:.1f} s wall, {done}/{n_jobs} completed, calls {run.calls}, exit {code}", flush=True)
    return run


def cancel_latency(launcher: str, n_jobs: int, cap_s: float, work: Path) -> float | None:
    """Seconds from `scancel` of job 1 until the driver reports it; None when it did not within cap_s."""
    label = f"cancel-{launcher}-{time.strftime('%H%M%S')}"
    sweep_dir = work / label
    cmd = [sys.executable, "train.py", "-m", "task=linreg", "epochs=60", "data.n_synthetic=40000",
           f"seed=range({n_jobs})", *COMMON, *REQUEST[launcher], f"hydra.sweep.dir={sweep_dir}"]
    print(f"$ {' '.join(cmd)}", flush=True)
    lines: list[tuple[float, str]] = []
    with open(work / f"{label}.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.PIPE, text=True)

        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.append((time.time(), line))
                log.write(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            job_dir = _wait_for_job_dir(sweep_dir, 1, timeout_s=120)
            while not (job_dir / "metrics.jsonl").exists():  # training has started
                time.sleep(0.2)
            job_id = _slurm_id(launcher, sweep_dir, job_dir)
            cancelled_at = time.time()
            subprocess.run(["scancel", job_id], check=True, timeout=30)
            print(f"  scancel {job_id} (job 1)", flush=True)
            while time.time() - cancelled_at < cap_s:
                if launcher == "slurm" and any(t > cancelled_at and line.startswith("sweepit: job 1 ")
                                               for t, line in list(lines)):
                    break
                if launcher == "submitit_slurm" and proc.poll() is not None:
                    break
                time.sleep(0.05)
            reported_at = time.time()
            took = reported_at - cancelled_at if reported_at - cancelled_at < cap_s else None
        finally:
            _cancel_sweep(launcher, sweep_dir)
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=60)
            reader.join(timeout=10)
    shown = f"{took:.1f} s" if took is not None else f"not reported within {cap_s:.0f} s"
    print(f"  {launcher}: cancel reported after {shown}", flush=True)
    return took


def _wait_for_job_dir(sweep_dir: Path, num: int, timeout_s: float) -> Path:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        found = sorted(sweep_dir.glob(f"{num}_*")) if sweep_dir.exists() else []
        if found:
            return found[0]
        time.sleep(0.2)
    raise SystemExit(f"job {num} of {sweep_dir} did not start within {timeout_s:.0f} s")


def _slurm_id(launcher: str, sweep_dir: Path, job_dir: Path) -> str:
    """Job 1's Slurm id: sweepit's manifest has it; submitit_slurm's jobs are tasks 0.. of one array."""
    if launcher == "slurm":
        # read_manifest, not sweep.json alone: that is a snapshot which sweep.journal continues, and while the sweep
        # runs the jobs' Slurm ids are only in the journal.
        return str(read_manifest(sweep_dir).jobs[1].extra["slurm_job_id"])
    pickles = sorted((sweep_dir / ".submitit").glob("*/*_submitted.pkl"))
    array_id = pickles[0].name.split("_")[0]
    return f"{array_id}_1"


def _cancel_sweep(launcher: str, sweep_dir: Path) -> None:
    ids: set[str] = set()
    if launcher == "slurm" and (sweep_dir / "sweep.json").exists():
        jobs = read_manifest(sweep_dir).jobs.values()
        ids = {str(j.extra["slurm_array_job_id"]) for j in jobs if j.extra.get("slurm_array_job_id")}
    elif launcher == "submitit_slurm":
        ids = {p.name.split("_")[0] for p in (sweep_dir / ".submitit").glob("*/*_submitted.pkl")}
    if ids:
        subprocess.run(["scancel", *sorted(ids)], timeout=30, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=64, help="jobs in the sweep of part 1 (default 64)")
    parser.add_argument("--cancel-jobs", type=int, default=6,
                        help="jobs in the sweep of part 2, at least 2: job 1 is the one cancelled (default 6)")
    parser.add_argument("--cancel-cap-s", type=float, default=120.0, help="give up waiting for a report after this")
    parser.add_argument("--keep-submitit", action="store_true", help="do not uninstall hydra-submitit-launcher")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS),
                        help=f"comma-separated subset of {','.join(LAUNCHERS)} (default both)")
    parser.add_argument("--work", type=Path, default=OUT, help=f"sweeps, logs and call counts (default {OUT})")
    parser.add_argument("--json", type=Path, default=None, help="write the figures, command and machine here")
    args = parser.parse_args(argv)
    launchers = [name for name in args.launchers.split(",") if name]
    unknown = sorted(set(launchers) - set(LAUNCHERS))
    if unknown or "slurm" not in launchers:
        parser.error(f"--launchers must name slurm and may add submitit_slurm, but got {args.launchers!r}")
    if args.cancel_jobs < 2:  # job numbers start at 0: with one job, part 2 waited 2 minutes for a job 1
        parser.error(f"--cancel-jobs must be at least 2 (job 1 is the one cancelled), but got {args.cancel_jobs}")
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    require_cluster()
    installed = False
    if "submitit_slurm" in launchers and importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
        pip("install", SUBMITIT_SPEC, "--no-deps")
        installed = True
    sys.path.insert(0, str(REPO / "bench"))
    from machine import machine_info, machine_line, write_json

    started = machine_info()
    print(machine_line(), flush=True)
    try:
        runs = [sweep(launcher, args.jobs, work) for launcher in launchers]
        latency = {launcher: cancel_latency(launcher, args.cancel_jobs, args.cancel_cap_s, work)
                   for launcher in launchers}
    finally:
        if installed and not args.keep_submitit:
            pip("uninstall", "-y", "hydra-submitit-launcher")
    print(f"\n{args.jobs}-job sweep (task=linreg epochs=2, 1 GPU each, 4 fake GPUs):")
    print(f"{'launcher':<16}{'wall_s':>8}{'last_result_s':>15}{'completed':>11}"
          + "".join(f"{name:>10}" for name in COUNTED))
    for r in runs:
        last = f"{r.last_result_s:.1f}" if r.last_result_s is not None else "-"
        print(f"{r.launcher:<16}{r.wall_s:>8.1f}{last:>15}{r.n_completed:>11}"
              + "".join(f"{r.calls[name]:>10}" for name in COUNTED))
    print(f"\nscancel of one running job until the driver reports it (target <= {TARGET_CANCEL_S:.0f} s):")
    for launcher, took in latency.items():
        shown = f"{took:.1f} s" if took is not None else f"> {args.cancel_cap_s:.0f} s (not reported)"
        print(f"  {launcher:<16}{shown}")
    ok = all(r.returncode == 0 and r.n_completed == args.jobs for r in runs[:1])
    ok = ok and latency["slurm"] is not None and latency["slurm"] <= TARGET_CANCEL_S
    if args.json is not None:
        write_json(args.json, {
            "benchmark": "slurm", "settings": {**vars(args), "work": str(work), "json": str(args.json)},
            "runs": [dataclasses.asdict(r) for r in runs], "cancel_latency_s": latency,
            "target_cancel_s": TARGET_CANCEL_S, "met": ok}, started)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
