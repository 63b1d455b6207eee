"""Successive halving against the full grid, on the seed study's optimizer x lr grid (issue 50).
Run: python bench/bench_halving.py   (or: make bench-halving; ~10 min on 2 cores)

    python bench/bench_halving.py --json bench/results/halving/run.json   # 10 optimizers x 4 rates, digits
    python bench/bench_halving.py --optimizers adam,sgd --lrs 0.1,0.001 --epochs 3 --seeds 1   # a smoke run

The grid is sweeps/optimizers.yaml's (10 optimizers x lr 0.1..0.0001) on `--task` (digits: no data files needed).
1. The full grid, `train.py -m --config-dir sweeps --config-name optimizers task=T epochs=E seed=S`, once per seed of
   `--seeds` (seed 0 first): each seed's best (optimizer, lr) by the task's metric; the spread is the best metric's
   range over the seeds.
2. The same grid with `hydra/sweeper=halving hydra.sweeper.eta=ETA`, seed 0: its one job trained to the last epoch
   is its pick.
The verdict: the pick is seed 0's best point, or its metric in seed 0's grid is within the spread of the best one's.
Compute: epochs trained, and epoch-seconds measured (every metrics row's `epoch_time_s`, summed over the jobs),
halving's as a ratio of seed 0's grid (goal <= 0.35x). Each sweep runs `--workers` jobs at once, one thread each.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from machine import machine_info, machine_line, write_json
from sweepit.results import job_folders, read_manifest, read_metrics, read_record

REPO = Path(__file__).resolve().parents[1]
GOAL_RATIO = 0.35  # issue 50: halving's epoch-seconds at most this share of the full grid's


def run_sweep(sweep_dir: Path, overrides: list[str]) -> tuple[int, float, str]:
    """One sweep of the study into `sweep_dir`; its exit code, wall seconds and output (echoed as it comes)."""
    cmd = [sys.executable, str(REPO / "train.py"), "-m", "--config-dir", str(REPO / "sweeps"), "--config-name",
           "optimizers", f"hydra.sweep.dir={sweep_dir}", *overrides]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall_s = time.perf_counter() - t0
    print("\n".join(line for line in proc.stdout.splitlines() if not line.startswith("job ")), flush=True)
    if proc.returncode:
        print(proc.stderr[-3000:], file=sys.stderr, flush=True)
    return proc.returncode, wall_s, proc.stdout


def read_jobs(sweep_dir: Path) -> list[dict[str, Any]]:
    """Each job's point (optimizer, lr), status, epochs, final metrics and measured epoch-seconds."""
    entries = read_manifest(sweep_dir).jobs
    jobs = []
    for num, folder in sorted(job_folders(sweep_dir).items()):
        assert folder is not None, f"job {num} of {sweep_dir} has no folder"
        result = read_record(folder).result
        rows, _ = read_metrics(folder)
        point = dict(o.split("=", 1) for o in entries[num].overrides if o.startswith(("optimizer=", "lr=")))
        jobs.append({"num": num, "optimizer": point["optimizer"], "lr": point["lr"], "status": result.get("status"),
                     "epochs": len(rows), "final": result.get("final") or {},
                     "epoch_s": sum(float(r.get("epoch_time_s") or 0.0) for r in rows)})
    return jobs


def best(jobs: list[dict[str, Any]], metric: str, direction: str) -> dict[str, Any]:
    done = [j for j in jobs if j["status"] == "completed" and metric in j["final"]]
    sign = 1.0 if direction == "maximize" else -1.0
    return max(done, key=lambda j: (sign * float(j["final"][metric]), -j["num"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="digits", help="the task (default digits; mnist needs data.root=DIR)")
    parser.add_argument("--epochs", type=int, default=27, help="the grid's epochs (default 27: rungs 1, 3, 9)")
    parser.add_argument("--eta", type=int, default=3, help="halving keeps the best 1/eta at each rung (default 3)")
    parser.add_argument("--seeds", type=int, default=3, help="full grids, seeds 0..N-1, for the spread (default 3)")
    parser.add_argument("--optimizers", default="", help="comma-separated; default the study's 10")
    parser.add_argument("--lrs", default="", help="comma-separated; default the study's 4 (0.1..0.0001)")
    parser.add_argument("--metric", default="val_acc", help="the task's metric (default val_acc)")
    parser.add_argument("--direction", default="maximize", choices=("maximize", "minimize"))
    parser.add_argument("--workers", type=int, default=2, help="jobs at once in each sweep (default 2)")
    parser.add_argument("--work", type=Path, default=REPO / "outputs" / "bench" / "halving",
                        help="the sweeps go in here, in a folder named by the time (default outputs/bench/halving)")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures, commands and machine here")
    args, extra = parser.parse_known_args()
    started = machine_info()
    print(f"machine: {machine_line()}", flush=True)
    work = args.work.resolve() / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    common = [f"task={args.task}", f"epochs={args.epochs}", "device=cpu", "trainer.threads=1",
              "trainer.log_every_epoch=false", f"hydra.launcher.n_workers={args.workers}",
              "hydra.callbacks.summary.report=false",
              *([f"hydra.sweeper.params.optimizer='{args.optimizers}'"] if args.optimizers else []),
              *([f"hydra.sweeper.params.lr='{args.lrs}'"] if args.lrs else []), *extra]

    runs: dict[str, Any] = {}
    rc, wall_s, out = run_sweep(work / "halving", [*common, "seed=0", "hydra/sweeper=halving",
                                                   f"hydra.sweeper.eta={args.eta}"])
    if rc:
        return rc
    saved_line = next((line for line in out.splitlines() if line.startswith("halving: ")), "")
    runs["halving"] = {"seed": 0, "wall_s": wall_s, "jobs": read_jobs(work / "halving"), "saved_line": saved_line}
    for seed in range(args.seeds):
        rc, wall_s, _ = run_sweep(work / f"grid-seed{seed}", [*common, f"seed={seed}"])
        if rc:
            return rc
        runs[f"grid-seed{seed}"] = {"seed": seed, "wall_s": wall_s, "jobs": read_jobs(work / f"grid-seed{seed}")}

    m, d = args.metric, args.direction
    halving, grid = runs["halving"]["jobs"], runs["grid-seed0"]["jobs"]
    bests = {seed: best(runs[f"grid-seed{seed}"]["jobs"], m, d) for seed in range(args.seeds)}
    values = [float(b["final"][m]) for b in bests.values()]
    spread = max(values) - min(values)
    pick = best(halving, m, d)
    same_point = next(j for j in grid if (j["optimizer"], j["lr"]) == (pick["optimizer"], pick["lr"]))
    gap = abs(float(bests[0]["final"][m]) - float(same_point["final"][m]))
    is_best = (pick["optimizer"], pick["lr"]) == (bests[0]["optimizer"], bests[0]["lr"])
    within = is_best or gap <= spread
    epochs = {"halving": sum(j["epochs"] for j in halving), "grid": sum(j["epochs"] for j in grid)}
    epoch_s = {"halving": sum(j["epoch_s"] for j in halving), "grid": sum(j["epoch_s"] for j in grid)}
    ratio = epoch_s["halving"] / epoch_s["grid"]
    bit_for_bit = pick["final"].get(m) == same_point["final"].get(m)

    print(f"\ngrid: {len(grid)} points ({args.task}, {args.epochs} epochs), {m} {d}")
    for seed, b in bests.items():
        print(f"full grid seed {seed}: best {b['optimizer']} lr={b['lr']} {m}={float(b['final'][m]):.4f}")
    print(f"seed-to-seed spread of the best {m}: {spread:.4f} over {args.seeds} seed(s)")
    print(f"halving (eta {args.eta}, seed 0): pick {pick['optimizer']} lr={pick['lr']} "
          f"{m}={float(pick['final'][m]):.4f}; in seed 0's grid that point has {float(same_point['final'][m]):.4f} "
          f"(same value bit for bit: {bit_for_bit})")
    print(f"verdict: halving's pick is {'the full grid best' if is_best else 'not the full grid best'}; "
          f"{gap:.4f} below it, {'within' if within else 'OUTSIDE'} the spread {spread:.4f}")
    print(f"epochs: halving {epochs['halving']}, full grid {epochs['grid']} "
          f"({epochs['halving'] / epochs['grid']:.3f}x)")
    print(f"epoch-seconds measured: halving {epoch_s['halving']:.1f}, full grid seed 0 {epoch_s['grid']:.1f} "
          f"({ratio:.3f}x; goal <= {GOAL_RATIO}x: {'met' if ratio <= GOAL_RATIO else 'MISSED'})")
    print(f"the halving sweep's own line: {saved_line}")
    print(f"machine at end: {machine_line()}")
    if args.json is not None:
        write_json(args.json, {
            "benchmark": "halving", "task": args.task, "epochs_per_job": args.epochs, "eta": args.eta,
            "metric": m, "direction": d, "overrides": common, "work": str(work), "runs": runs,
            "grid_bests": {str(s): b for s, b in bests.items()}, "spread": spread, "pick": pick,
            "pick_in_grid": same_point, "pick_is_grid_best": is_best, "gap_to_grid_best": gap,
            "within_spread": within, "pick_same_as_grid_bit_for_bit": bit_for_bit, "epochs": epochs,
            "epoch_s": epoch_s, "epoch_s_ratio": ratio, "goal_ratio": GOAL_RATIO, "goal_met": ratio <= GOAL_RATIO,
        }, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
