"""Does the mnist_best study reach the courses' 99.4% MNIST test accuracy, and how long does it take here?

Run: python bench/bench_mnist_best.py --root /path/to/mnist   (or: make bench-mnist-best MNIST_ROOT=/path/to/mnist)
Extra arguments go to train.py as overrides (a smoke test: `... --root DIR epochs=1`); `--json PATH` writes the
job's result, its per-epoch rows, the command and the machine.

Runs the real entry point, `train.py -m --config-dir sweeps --config-name mnist_best data.root=DIR`, in a
subprocess with its sweep directory under outputs/bench/mnist_best/ (or `--work DIR`), then reads the job's
result.json and metrics.jsonl. val_acc is on MNIST's official 10,000-image test split (the study sets val_fraction=0).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from machine import machine_info, machine_line, write_json

REPO = Path(__file__).resolve().parents[1]
TARGET_ACC = 0.994  # the courses' figure for this CNN with augmentation


def run_study(root: Path, sweep_dir: Path, overrides: list[str]) -> tuple[int, float]:
    """Run the study; its output streams through. Returns the exit code and the wall time in seconds."""
    cmd = [sys.executable, str(REPO / "train.py"), "-m", "--config-dir", str(REPO / "sweeps"),
           "--config-name", "mnist_best", f"data.root={root}", f"hydra.sweep.dir={sweep_dir}", *overrides]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, cwd=REPO).returncode
    return rc, time.perf_counter() - t0


def read_job(job_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    result = json.loads((job_dir / "result.json").read_text())
    metrics_path = job_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()] \
        if metrics_path.exists() else []
    return result, rows


def report(job_dir: Path, result: dict[str, Any], rows: list[dict[str, Any]], wall_s: float) -> bool:
    """Print the per-epoch table and the summary; True when the final test accuracy meets the target."""
    print(f"\njob: {job_dir}")
    print(f"{'epoch':>5} {'train_loss':>10} {'train_acc':>9} {'test_loss':>9} {'test_acc':>8} "
          f"{'epoch_s':>7} {'samples/s':>9}")
    for r in rows:
        print(f"{r['epoch']:>5} {r['train_loss']:>10.4f} {r['train_acc']:>9.4f} {r['val_loss']:>9.4f} "
              f"{r['val_acc']:>8.4f} {r['epoch_time_s']:>7.1f} {r['samples_per_s']:>9,.0f}")
    final = result.get("final") or (rows[-1] if rows else {})
    acc = final.get("val_acc")
    train_s = sum(r["epoch_time_s"] for r in rows)
    print(f"\nstatus: {result.get('status')}")
    print(f"final test accuracy: {acc:.4f}" if acc is not None else "final test accuracy: n/a")
    if rows:
        best = max(rows, key=lambda r: r["val_acc"])
        print(f"best test accuracy: {best['val_acc']:.4f} at epoch {best['epoch']}")
    print(f"epochs: {result.get('epochs_completed')}")
    print(f"time: job wall {result.get('wall_time_s', float('nan')):.0f} s (training epochs {train_s:.0f} s), "
          f"subprocess wall {wall_s:.0f} s")
    print(f"device: {result.get('device')}; code: {result.get('code_version')}")
    print(f"machine: {machine_line()}")
    met = acc is not None and acc >= TARGET_ACC
    print(f"target: final test accuracy >= {TARGET_ACC:.1%}: {'MET' if met else 'MISSED'}")
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.environ.get("MNIST_ROOT", ""),
                        help="folder with MNIST's 4 IDX files, raw or .gz (default: $MNIST_ROOT)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="torch threads for the one job (default: every core; the local launcher would "
                             "give a job 1 thread)")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures, command and machine here")
    parser.add_argument("--work", type=Path, default=REPO / "outputs" / "bench" / "mnist_best",
                        help="the study's sweep goes in here, in a folder named by the time "
                             "(default outputs/bench/mnist_best)")
    args, overrides = parser.parse_known_args()
    started = machine_info()
    if not any(o.startswith("trainer.threads=") for o in overrides):
        overrides = [f"trainer.threads={args.threads}", *overrides]
    if not any(o.startswith(("hydra/launcher=", "hydra.launcher.n_workers=")) for o in overrides):
        overrides.append("hydra.launcher.n_workers=1")  # one job; a single worker also echoes its epoch lines
    if not args.root:
        parser.error("--root must name the folder with MNIST's IDX files, but none was given. "
                     "Fix: --root DIR, or set MNIST_ROOT (`sweepit data download mnist --root DIR` fetches them).")
    root = Path(args.root).resolve()
    sweep_dir = args.work.resolve() / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    print(f"machine: {machine_line()}", flush=True)
    rc, wall_s = run_study(root, sweep_dir, overrides)
    results = sorted(sweep_dir.glob("*/result.json"))
    if not results:
        print(f"no result.json under {sweep_dir} (train.py exited with {rc})", file=sys.stderr)
        return rc or 1
    jobs = []
    for path in results:  # one job: the study sweeps nothing but seed=0
        result, rows = read_job(path.parent)
        met = report(path.parent, result, rows, wall_s)
        jobs.append({"job_dir": str(path.parent), "result": result, "epochs": rows, "met": met})
    if args.json is not None:
        write_json(args.json, {"benchmark": "mnist_best", "overrides": overrides, "target_acc": TARGET_ACC,
                               "subprocess_wall_s": wall_s, "exit_code": rc, "jobs": jobs}, started)
    return rc  # a missed target is a figure to report, not a crash


if __name__ == "__main__":
    sys.exit(main())
