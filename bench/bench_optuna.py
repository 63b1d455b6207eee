"""Search efficiency of the Optuna sweeper's methods against the full grid, on optimizer x learning rate (digits).

    python bench/bench_optuna.py                 # 5 seeds, 2 processes; about 10 minutes on 2 CPU cores
    python bench/bench_optuna.py --seeds 2 --epochs 3 --grid-lrs 5   # a quick look

The grid trains every optimizer at `--grid-lrs` log-spaced learning rates in [1e-4, 1] for `--epochs` epochs.
Each search method (TPE + Hyperband, TPE alone, random) then searches the continuous space optimizer x
log-uniform lr in [1e-4, 1], one trial after another, with the same training function in-process and the
job's pruning callback (`sweepit.pruning.TrialReporter` via a journal file). The figure of merit is the
compute (epochs trained, summed over trials, pruned ones included) until a complete trial comes within
`--tolerance` (0.003 = 0.3 accuracy points) of the grid's best final val_acc. A search that does not get there
within `--budget` x the grid's compute is counted at that budget (and flagged). Training is deterministic
(seed 0, CPU, one thread), so the objective of a configuration is the same in every search.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

OPTIMIZERS = ("adam", "sgd", "rmsprop")
LR_LOW, LR_HIGH = 1e-4, 1.0
METHODS = ("tpe+hyperband", "tpe", "random")


def _config(optimizer: str, lr: float, epochs: int) -> Any:
    from hydra import compose, initialize_config_dir

    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return compose(config_name="config", overrides=[
            f"optimizer={optimizer}", f"lr={lr!r}", f"epochs={epochs}", "device=cpu", "trainer.threads=1",
            "trainer.checkpoint=false", "trainer.log_every_epoch=false"])


def _train(optimizer: str, lr: float, epochs: int, on_epoch: Any = None) -> tuple[float, int]:
    """Final val_acc (or NaN when diverged) and epochs trained."""
    import torch

    from sweepit.errors import DivergedError
    from sweepit.training import train

    torch.set_num_threads(1)
    seen: list[int] = []

    def count(epoch: int, row: dict[str, Any]) -> bool:
        seen.append(epoch)
        return bool(on_epoch(epoch, row)) if on_epoch is not None else False

    try:
        out = train(_config(optimizer, lr, epochs), on_epoch=count, log=lambda _: None)
    except DivergedError:
        return math.nan, len(seen) + 1
    return float(out.rows[-1]["val_acc"]), len(seen)


def _grid_point(args: tuple[str, float, int]) -> tuple[str, float, float]:
    optimizer, lr, epochs = args
    return optimizer, lr, _train(optimizer, lr, epochs)[0]


def _search(args: tuple[str, int, int, float, int]) -> dict[str, Any]:
    """One search until a complete trial reaches `target`, or `budget` epochs are spent."""
    import optuna
    from sweepit.pruning import PRUNER_ATTR, TrialReporter, build_pruner, open_storage

    method, seed, epochs, target, budget = args
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    pruner_spec = {"name": "hyperband" if method == "tpe+hyperband" else "none", "min_resource": 1,
                   "max_resource": epochs, "reduction_factor": 3}
    sampler = (optuna.samplers.RandomSampler(seed=seed) if method == "random"
               else optuna.samplers.TPESampler(seed=seed, n_startup_trials=10, multivariate=True))
    with tempfile.TemporaryDirectory() as tmp:
        url = str(Path(tmp) / "optuna.journal")
        study = optuna.create_study(storage=open_storage(url), study_name="bench", direction="maximize",
                                    sampler=sampler, pruner=build_pruner(pruner_spec))
        study.set_user_attr(PRUNER_ATTR, pruner_spec)
        space = {"optimizer": optuna.distributions.CategoricalDistribution(list(OPTIMIZERS)),
                 "lr": optuna.distributions.FloatDistribution(LR_LOW, LR_HIGH, log=True)}
        spent, n_trials, best = 0, 0, -math.inf
        while spent < budget:
            trial = study.ask(space)
            reporter = TrialReporter(url, "bench", trial.number, "val_acc", n_epochs=epochs, log=lambda _: None)
            value, done = _train(trial.params["optimizer"], trial.params["lr"], epochs, reporter)
            spent += done
            n_trials += 1
            if math.isnan(value):
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            elif done < epochs:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, value)
                best = max(best, value)
                if value >= target:
                    return {"method": method, "seed": seed, "epochs": spent, "trials": n_trials, "best": best,
                            "reached": True}
        return {"method": method, "seed": seed, "epochs": budget, "trials": n_trials, "best": best, "reached": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="sampler seeds per method (default 5)")
    parser.add_argument("--epochs", type=int, default=9, help="epochs of a full trial (default 9: rungs 1, 3, 9)")
    parser.add_argument("--grid-lrs", type=int, default=13, help="learning rates of the grid, log-spaced (default 13)")
    parser.add_argument("--tolerance", type=float, default=0.003, help="how close to the grid's best (default 0.003)")
    parser.add_argument("--budget", type=float, default=1.5, help="cap per search, x the grid's compute (default 1.5)")
    parser.add_argument("--processes", type=int, default=2, help="parallel training processes (default 2)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()

    t0 = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    lrs = [LR_LOW * (LR_HIGH / LR_LOW) ** (i / (args.grid_lrs - 1)) for i in range(args.grid_lrs)]
    with ctx.Pool(args.processes) as pool:
        grid = pool.map(_grid_point, [(o, lr, args.epochs) for o in OPTIMIZERS for lr in lrs])
        scored = [g for g in grid if not math.isnan(g[2])]
        best_opt, best_lr, best_acc = max(scored, key=lambda g: g[2])
        grid_epochs = len(grid) * args.epochs
        target = best_acc - args.tolerance
        print(f"grid: {len(grid)} configurations x {args.epochs} epochs = {grid_epochs} epochs; best val_acc "
              f"{best_acc:.4f} ({best_opt}, lr={best_lr:.3g}); target >= {target:.4f}", flush=True)
        budget = int(args.budget * grid_epochs)
        tasks = [(m, s, args.epochs, target, budget) for m in METHODS for s in range(args.seeds)]
        runs = pool.map(_search, tasks)
    print(f"{sum(g[2] >= target for g in scored)} of {len(grid)} grid points are within the target")
    print(f"\n{'method':<15} {'epochs (mean)':>13} {'% of grid':>10} {'min-max %':>12} {'trials':>7} {'reached':>8}")
    figures: dict[str, Any] = {"grid_epochs": grid_epochs, "grid_best": best_acc, "target": target, "methods": {},
                               "grid": grid, "n_grid_within_target": sum(g[2] >= target for g in scored)}
    for method in METHODS:
        mine = [r for r in runs if r["method"] == method]
        spent = [r["epochs"] for r in mine]
        share = [100 * e / grid_epochs for e in spent]
        reached = sum(r["reached"] for r in mine)
        print(f"{method:<15} {statistics.fmean(spent):>13.0f} {statistics.fmean(share):>9.1f}% "
              f"{min(share):>5.0f}-{max(share):<5.0f} {statistics.fmean(r['trials'] for r in mine):>7.1f} "
              f"{reached:>5}/{len(mine)}")
        figures["methods"][method] = {"epochs_mean": statistics.fmean(spent), "reached": reached,
                                      "percent_of_grid": statistics.fmean(share), "runs": mine}
    print(f"\n(a search that did not reach the target counts at its budget, {args.budget:g} x the grid; "
          f"{time.perf_counter() - t0:.0f} s in all)")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
