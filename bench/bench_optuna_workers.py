"""Optuna on Slurm, the same study in both modes: each trial its own sbatch job (`hydra.sweeper.workers=0`, n_jobs
in flight) against long-lived workers (`hydra.sweeper.workers=N`, one array) asking trials from the journal.

Run: flock /tmp/slurm-bench.lock python bench/bench_optuna_workers.py [--trials 64] [--parallel 4] --json PATH
     (needs `make slurm-up`; about 5 minutes on a 2-core machine)

The study: train.py on the digits task (an MLP, `epochs` per trial, a few seconds each on one core), TPE over
optimizer x log-uniform lr, seed 0, `--trials` trials with `--parallel` in flight (n_jobs in per-trial mode, workers
in worker mode), 1 CPU per job, CPU only. Measured: wall time of the driver from its start to its exit, how many
trials completed, and how many times `sbatch`, `squeue`, `sacct`, `scontrol` and `sinfo` ran (a PATH shim counts the
calls of the driver and of everything it starts, workers included). Target (issue 14): worker mode's wall <= 0.5x
per-trial mode's in the same run, with one sbatch call.
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

bench_slurm.COUNTED = COUNTED = (*bench_slurm.COUNTED, "sinfo")  # the partition query counts too

OUT = REPO / "bench" / "out" / "optuna_workers"  # --work replaces it
TARGET_RATIO = 0.5


def study_args(n_trials: int, epochs: int) -> list[str]:
    return ["hydra/sweeper=optuna", "optimizer=choice(adam,sgd)", "lr=tag(log, interval(1e-3, 0.3))",
            f"hydra.sweeper.n_trials={n_trials}", "hydra.sweeper.sampler.seed=0", f"epochs={epochs}", "device=cpu",
            "trainer.threads=1", "hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1",
            "hydra.launcher.gpus_key=null", "timeout_min=10", "hydra.callbacks.summary.report=false"]


def run_mode(mode: str, n_trials: int, parallel: int, epochs: int, work: Path) -> dict[str, Any]:
    label = f"{mode}-{n_trials}-{time.strftime('%H%M%S')}"
    sweep_dir, calls_log, shim_dir = work / label, work / f"{label}.calls", work / "shims"
    extra = [f"hydra.sweeper.n_jobs={parallel}"] if mode == "per_trial" else [f"hydra.sweeper.workers={parallel}"]
    cmd = [sys.executable, "train.py", "-m", *study_args(n_trials, epochs), *extra, f"hydra.sweep.dir={sweep_dir}"]
    bench_slurm.make_shims(shim_dir, calls_log)
    env = {**os.environ, "PATH": f"{shim_dir}:{os.environ['PATH']}"}
    print(f"$ {' '.join(cmd)}", flush=True)
    t0 = time.time()
    with open(work / f"{label}.log", "w") as log:
        code = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    wall = time.time() - t0
    results = [json.loads(p.read_text()) for p in sweep_dir.glob("*/result.json")]
    statuses = [r.get("status") for r in results]
    times = [r["wall_time_s"] for r in results if isinstance(r.get("wall_time_s"), int | float)]
    row = {"mode": mode, "command": " ".join(cmd[1:]), "wall_s": round(wall, 2), "exit_code": code,
           "n_jobs": len(results), "n_completed": statuses.count("completed"), "n_pruned": statuses.count("pruned"),
           "trial_wall_s_mean": round(sum(times) / len(times), 2) if times else None,
           "calls": bench_slurm.count_calls(calls_log), "sweep_dir": str(sweep_dir)}
    print(f"  {mode}: {wall:.1f} s wall, {row['n_completed']}/{n_trials} completed, trial {row['trial_wall_s_mean']}"
          f" s mean, calls {row['calls']}, exit {code}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=64, help="trials in the study (default 64)")
    parser.add_argument("--parallel", type=int, default=4, help="n_jobs in per-trial mode, workers in worker mode")
    parser.add_argument("--epochs", type=int, default=15, help="digits MLP epochs per trial (default 15)")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    parser.add_argument("--work", type=Path, default=OUT, help=f"sweeps, logs and call counts (default {OUT})")
    args = parser.parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    bench_slurm.require_cluster()
    from machine import machine_info, machine_line

    machine, info = machine_line(), machine_info()  # info: taken at the start (the commit it runs)
    print(machine, flush=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    rows = [run_mode(mode, args.trials, args.parallel, args.epochs, work) for mode in ("per_trial", "workers")]
    per_trial, workers = rows
    ratio = workers["wall_s"] / per_trial["wall_s"]
    met = (ratio <= TARGET_RATIO and workers["calls"]["sbatch"] == 1
           and all(r["n_completed"] + r["n_pruned"] == args.trials and r["exit_code"] == 0 for r in rows))
    print(f"\n{args.trials} trials, {args.parallel} in flight (train.py digits, epochs={args.epochs}, 1 CPU each):")
    print(f"{'mode':<12}{'wall_s':>8}{'completed':>11}{'trial_s':>9}" + "".join(f"{n:>9}" for n in COUNTED))
    for r in rows:
        print(f"{r['mode']:<12}{r['wall_s']:>8.1f}{r['n_completed']:>11}{r['trial_wall_s_mean'] or 0:>9.2f}"
              + "".join(f"{r['calls'][n]:>9}" for n in COUNTED))
    print(f"worker / per-trial wall: {ratio:.2f}x (target <= {TARGET_RATIO}x and 1 sbatch): "
          f"{'met' if met else 'missed'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "benchmark": "bench/bench_optuna_workers.py", "argv": sys.argv[1:], "started": started,
            "machine": machine, "machine_info": info, "trials": args.trials, "parallel": args.parallel,
            "epochs": args.epochs,
            "runs": rows, "ratio_workers_to_per_trial": round(ratio, 3), "target_ratio": TARGET_RATIO,
            "verdict": "met" if met else "missed"}, indent=1) + "\n")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
