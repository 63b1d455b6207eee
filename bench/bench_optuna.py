"""Search efficiency of the Optuna sweeper's methods against the full grid of the same space (issue 7).

    python bench/bench_optuna.py --root /work/shared/data/mnist      # MNIST MLP (make bench-optuna MNIST_ROOT=...)
    python bench/bench_optuna.py --task digits                       # no data files needed
    python bench/bench_optuna.py --root DIR --seeds 3 --epochs 3     # a quick look

The space is the study's: optimizer (adam, sgd, rmsprop) x learning rate, on the grid's `--grid-lrs` log-spaced
values in [1e-4, 1] (an ordered integer step for the samplers, so TPE sees which rates are neighbours).

1. The grid trains every point for real, `--epochs` epochs each (seed 0, CPU, one thread per process,
   `--processes` at once), and keeps each point's per-epoch validation accuracy. The grid's best is the best
   final val_acc; the target is `--tolerance` (0.003 = 0.3 accuracy points) below it.
2. Each method (TPE + Hyperband, TPE alone, random) searches the same space `--seeds` times, one trial after
   another. A trial's epochs are those of its point's training: training is deterministic (same seed, same
   device: same metrics), so the grid's curve is what the trial would train, epoch by epoch. Every epoch is
   reported to the trial through sweepit's own `TrialReporter` and a journal file, as a job does, and a
   pruned trial stops there. Figure of merit: epochs trained, summed over trials (pruned ones included),
   until a complete trial reaches the target; a search that has not reached it at `--budget` x the grid's
   compute is counted at that budget and flagged.
3. `--verify N` trains N of the points again for real and checks that their curves are the grid's, bit for bit.

The grid's curves are kept in bench/out/optuna/ (keyed by every setting) and reused by the next run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

OPTIMIZERS = ("adam", "sgd", "rmsprop")
LR_LOW, LR_HIGH = 1e-4, 1.0
METHODS = ("tpe+hyperband", "tpe", "random")
OUT = Path(__file__).resolve().parent / "out" / "optuna"


def _overrides(task: str, root: str | None) -> list[str]:
    if task == "mnist":
        # 50,000 training images, 10,000 held out of the training set for validation (the test set stays unseen).
        return ["task=mnist", "task.model=mlp", f"data.root={root}", "data.val_fraction=0.1667"]
    return [f"task={task}"]


def _config(point: tuple[str, float], epochs: int, extra: list[str]) -> Any:
    from hydra import compose, initialize_config_dir

    optimizer, lr = point
    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return compose(config_name="config", overrides=[
            *extra, f"optimizer={optimizer}", f"lr={lr!r}", f"epochs={epochs}", "device=cpu", "trainer.threads=1",
            "trainer.checkpoint=false", "trainer.log_every_epoch=false"])


def _curve(args: tuple[tuple[str, float], int, list[str]]) -> list[float]:
    """Per-epoch val_acc of one grid point, trained for real; a diverged run's curve ends with NaN."""
    import torch

    from sweepit.errors import DivergedError
    from sweepit.train._loop import train

    point, epochs, extra = args
    torch.set_num_threads(1)
    curve: list[float] = []

    def keep(epoch: int, row: dict[str, Any]) -> bool:
        curve.append(float(row["val_acc"]))
        return False

    try:
        train(_config(point, epochs, extra), on_epoch=keep, log=lambda _: None)
    except DivergedError:
        curve.append(math.nan)
    return curve


def _search(method: str, seed: int, points: list[tuple[str, float]], curves: dict[int, list[float]], epochs: int,
            target: float, budget: int) -> dict[str, Any]:
    """One search, trial after trial, until a complete trial reaches `target` or `budget` epochs are spent."""
    import optuna

    from sweepit.search._pruning import PRUNER_ATTR, TrialReporter, build_pruner, open_storage

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    pruner_spec = {"name": "hyperband" if method == "tpe+hyperband" else "none", "min_resource": 1,
                   "max_resource": epochs, "reduction_factor": 3}
    sampler = (optuna.samplers.RandomSampler(seed=seed) if method == "random"
               else optuna.samplers.TPESampler(seed=seed, n_startup_trials=10, multivariate=True))
    n_lrs = len(points) // len(OPTIMIZERS)
    space = {"optimizer": optuna.distributions.CategoricalDistribution(list(OPTIMIZERS)),
             "lr_step": optuna.distributions.IntDistribution(0, n_lrs - 1)}
    with tempfile.TemporaryDirectory() as tmp:
        url = str(Path(tmp) / "optuna.journal")
        study = optuna.create_study(storage=open_storage(url), study_name="bench", direction="maximize",
                                    sampler=sampler, pruner=build_pruner(pruner_spec))
        study.set_user_attr(PRUNER_ATTR, pruner_spec)
        spent, n_trials, best = 0, 0, -math.inf
        while spent < budget:
            trial = study.ask(space)
            index = OPTIMIZERS.index(trial.params["optimizer"]) * n_lrs + trial.params["lr_step"]
            reporter = TrialReporter(url, "bench", trial.number, "val_acc", n_epochs=epochs, log=lambda _: None)
            curve, done, pruned = curves[index], 0, False
            for epoch, value in enumerate(curve, start=1):
                done = epoch
                if math.isnan(value) or reporter(epoch, {"val_acc": value}):
                    pruned = not math.isnan(value)
                    break
            spent += done
            n_trials += 1
            if math.isnan(curve[done - 1]):
                study.tell(trial, state=optuna.trial.TrialState.FAIL)  # diverged: failed, as the sweeper tells it
            elif pruned:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                value = curve[-1]
                study.tell(trial, value)
                best = max(best, value)
                if value >= target:
                    return {"method": method, "seed": seed, "epochs": spent, "trials": n_trials, "best": best,
                            "reached": True}
        return {"method": method, "seed": seed, "epochs": budget, "trials": n_trials, "best": best, "reached": False}


def _grid(points: list[tuple[str, float]], epochs: int, extra: list[str], processes: int) -> dict[int, list[float]]:
    key = hashlib.sha256(json.dumps([points, epochs, extra]).encode()).hexdigest()[:12]
    cache = OUT / f"grid-{key}.json"
    if cache.is_file():
        print(f"grid: the curves trained before, from {cache}", flush=True)
        return {int(k): v for k, v in json.loads(cache.read_text()).items()}
    t0 = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        curves = dict(enumerate(pool.map(_curve, [(p, epochs, extra) for p in points])))
    print(f"grid: trained {len(points)} points x {epochs} epochs in {time.perf_counter() - t0:.0f} s", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(curves))
    return curves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=("mnist", "digits"), default="mnist", help="default mnist (needs --root)")
    parser.add_argument("--root", default=None, help="directory with MNIST's IDX files (task mnist)")
    parser.add_argument("--seeds", type=int, default=20, help="sampler seeds per method (default 20)")
    parser.add_argument("--epochs", type=int, default=9, help="epochs of a full trial (default 9: rungs 1, 3, 9)")
    parser.add_argument("--grid-lrs", type=int, default=13, help="learning rates of the grid, log-spaced (default 13)")
    parser.add_argument("--tolerance", type=float, default=0.003, help="how close to the grid's best (default 0.003)")
    parser.add_argument("--budget", type=float, default=1.5, help="cap per search, x the grid's compute (default 1.5)")
    parser.add_argument("--processes", type=int, default=2, help="grid points trained at once (default 2)")
    parser.add_argument("--verify", type=int, default=2, help="points trained again to check the curves (default 2)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.task == "mnist" and not args.root:
        parser.error("--task mnist needs --root DIR with MNIST's IDX files (or use --task digits)")

    t0 = time.perf_counter()
    extra = _overrides(args.task, args.root)
    lrs = [LR_LOW * (LR_HIGH / LR_LOW) ** (i / (args.grid_lrs - 1)) for i in range(args.grid_lrs)]
    points = [(o, lr) for o in OPTIMIZERS for lr in lrs]
    curves = _grid(points, args.epochs, extra, args.processes)
    finals = {i: c[-1] for i, c in curves.items() if len(c) == args.epochs and not math.isnan(c[-1])}
    best_i = max(finals, key=lambda i: finals[i])
    best_acc = finals[best_i]
    grid_epochs = sum(len(c) for c in curves.values())
    target = best_acc - args.tolerance
    n_within = sum(v >= target for v in finals.values())
    print(f"grid ({args.task}): {len(points)} points, {grid_epochs} epochs; best val_acc {best_acc:.4f} "
          f"({points[best_i][0]}, lr={points[best_i][1]:.3g}); target >= {target:.4f}, met by {n_within} of "
          f"{len(points)} points", flush=True)

    if args.verify:
        chosen = random.Random(0).sample(sorted(curves), min(args.verify, len(curves)))
        with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
            again = pool.map(_curve, [(points[i], args.epochs, extra) for i in chosen])
        for i, curve in zip(chosen, again, strict=True):
            same = json.dumps(curve) == json.dumps(curves[i])
            print(f"verify: {points[i][0]} lr={points[i][1]:.3g} trained again: "
                  f"{'the same curve' if same else 'A DIFFERENT CURVE'}", flush=True)
            if not same:
                raise SystemExit(f"training is not deterministic here: {curve} != {curves[i]}; the replay is void")

    budget = int(args.budget * grid_epochs)
    runs = [_search(m, s, points, curves, args.epochs, target, budget) for m in METHODS for s in range(args.seeds)]
    print(f"\n{'method':<15} {'epochs (mean)':>13} {'% of grid':>10} {'median %':>9} {'min-max %':>12} {'trials':>7} "
          f"{'reached':>8}")
    figures: dict[str, Any] = {"task": args.task, "grid_epochs": grid_epochs, "grid_best": best_acc,
                               "target": target, "n_grid_within_target": n_within, "methods": {},
                               "grid": {f"{o} {lr:.4g}": curves[i] for i, (o, lr) in enumerate(points)}}
    for method in METHODS:
        mine = [r for r in runs if r["method"] == method]
        share = [100 * r["epochs"] / grid_epochs for r in mine]
        reached = sum(r["reached"] for r in mine)
        print(f"{method:<15} {statistics.fmean(r['epochs'] for r in mine):>13.0f} {statistics.fmean(share):>9.1f}% "
              f"{statistics.median(share):>8.1f}% {min(share):>5.0f}-{max(share):<5.0f} "
              f"{statistics.fmean(r['trials'] for r in mine):>7.1f} {reached:>5}/{len(mine)}")
        figures["methods"][method] = {"percent_of_grid": statistics.fmean(share),
                                      "median_percent": statistics.median(share), "reached": reached, "runs": mine}
    print(f"\n(a search that did not reach the target counts at its budget, {args.budget:g} x the grid; "
          f"{time.perf_counter() - t0:.0f} s in all)")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
