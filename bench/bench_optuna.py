"""Search efficiency of the Optuna sweeper's methods against the full grid of the same space (issues 7, 14).

    python bench/bench_optuna.py --root /work/shared/data/mnist      # MNIST MLP (make bench-optuna MNIST_ROOT=...)
    python bench/bench_optuna.py --task digits                       # no data files needed
    python bench/bench_optuna.py --root DIR --seeds 3 --epochs 3     # a quick look
    python bench/bench_optuna.py --root DIR --mode sweeper --sweeper-seeds 3 --json out.json   # the real sweeper only

Two measurements of the same figure (compute until a trial comes within the tolerance of the grid's best, as a
share of the grid's compute), `--mode replay`, `sweeper` or `both` (default):
- replay (steps 1-3 below): trained curves replayed one trial at a time over the grid's points; cheap, so many seeds.
- sweeper (step 4): the study itself, `train.py -m --config-dir sweeps --config-name optuna_lr` (its own space with
  the continuous log-uniform lr, its n_jobs trials in flight, asynchronous, TPE + Hyperband pruning), on the same
  task and epochs as the grid; the random baseline is the same command with `hydra/sweeper/sampler=random
  hydra/sweeper/pruner=none`. The bench watches the jobs' result.json files and stops the sweep (SIGINT, as
  Ctrl-C) as soon as a completed trial reaches the target; compute = every epoch the study's journal holds then
  (reported epochs of all trials, pruned and in-flight ones included; +1 for each diverged trial's last epoch).

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
4. (`--mode sweeper|both`) `--sweeper-seeds` runs of the study per method of `--sweeper-methods`, one after another.

The grid's curves are kept in bench/out/optuna/ (keyed by every setting) and reused by the next run; `--work DIR`
keeps them, and the sweeper's sweeps, in DIR instead.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from machine import machine_info, machine_line, write_json

OPTIMIZERS = ("adam", "sgd", "rmsprop")
LR_LOW, LR_HIGH = 1e-4, 1.0
METHODS = ("tpe+hyperband", "tpe", "random")
OUT = Path(__file__).resolve().parent / "out" / "optuna"
REPO = Path(__file__).resolve().parents[1]
# What each method adds to the study's command (the study itself is TPE + Hyperband, whose keys the study leaves to
# the pruner's group: choosing another pruner replaces them).
NO_PRUNER = ["hydra/sweeper/pruner=none"]
SWEEPER_METHODS = {
    "tpe+hyperband": [],
    "tpe": NO_PRUNER,
    "random": ["hydra/sweeper/sampler=random", *NO_PRUNER],
}


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
    pruner_spec = ({"_target_": "optuna.pruners.HyperbandPruner", "min_resource": 1, "max_resource": epochs,
                    "reduction_factor": 3} if method == "tpe+hyperband" else {"_target_": "optuna.pruners.NopPruner"})
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


def _grid(points: list[tuple[str, float]], epochs: int, extra: list[str], processes: int,
          cache_dir: Path) -> dict[int, list[float]]:
    key = hashlib.sha256(json.dumps([points, epochs, extra]).encode()).hexdigest()[:12]
    cache = cache_dir / f"grid-{key}.json"
    if cache.is_file():
        print(f"grid: the curves trained before, from {cache}", flush=True)
        return {int(k): v for k, v in json.loads(cache.read_text()).items()}
    t0 = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        curves = dict(enumerate(pool.map(_curve, [(p, epochs, extra) for p in points])))
    print(f"grid: trained {len(points)} points x {epochs} epochs in {time.perf_counter() - t0:.0f} s", flush=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(curves))
    return curves


def _first_hit(sweep_dir: Path, target: float) -> dict[str, Any] | None:
    """The first completed job (by its end) whose objective reaches `target`, from the jobs' result.json files."""
    hits = []
    for path in sweep_dir.glob("*/result.json"):
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # written atomically, but a job directory may be mid-creation
        objective = result.get("objective")
        if result.get("status") == "completed" and objective is not None and objective >= target:
            hits.append({"job": path.parent.name, "objective": objective, "ended_at": result.get("ended_at")})
    return min(hits, key=lambda h: (h["ended_at"] or "", h["job"])) if hits else None


def _study_trials(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every trial in the sweep's journal: state, parameters, epochs reported, value, start and end."""
    import optuna

    from sweepit.search._pruning import open_storage
    from sweepit.search._study import STATUS_ATTR

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = open_storage(str(sweep_dir / "optuna.journal"))
    (name,) = optuna.get_all_study_names(storage)
    study = optuna.load_study(study_name=name, storage=storage)
    interrupted = "interrupted"  # sweepit marks the trials its stop failed (and enqueued again) so
    return [{"number": t.number, "params": t.params,
             "state": interrupted.upper() if t.user_attrs.get(STATUS_ATTR) == interrupted else t.state.name,
             "epochs_reported": len(t.intermediate_values), "value": t.value, "start": t.datetime_start,
             "complete": t.datetime_complete}
            for t in study.get_trials(deepcopy=False)]


def _sweep(method: str, seed: int, extra: list[str], epochs: int, target: float, grid_epochs: int,
           out_dir: Path) -> dict[str, Any]:
    """One run of the study (sweeps/optuna_lr.yaml) with `method`, stopped when a trial reaches `target`."""
    sweep_dir = out_dir / f"{method}-seed{seed}"
    cmd = [sys.executable, "train.py", "-m", "--config-dir", "sweeps", "--config-name", "optuna_lr", *extra,
           f"epochs={epochs}", *SWEEPER_METHODS[method], f"hydra.sweeper.sampler.seed={seed}",
           f"hydra.sweep.dir={sweep_dir}"]
    log_path = out_dir / f"{method}-seed{seed}.log"
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    hit, reached_s, reached_at = None, None, None
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        while proc.poll() is None:
            time.sleep(0.25)
            hit = _first_hit(sweep_dir, target)
            if hit is not None:
                reached_s, reached_at = time.perf_counter() - t0, datetime.now()  # naive local, as Optuna's times
                proc.send_signal(signal.SIGINT)  # Ctrl-C: the driver stops its jobs and tells them interrupted
                break
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall_s = time.perf_counter() - t0
    if hit is None:  # the sweep ended by itself: did its last trial reach the target?
        hit = _first_hit(sweep_dir, target)
        reached_s = wall_s if hit is not None else None
    if not (sweep_dir / "optuna.journal").is_file():
        raise SystemExit(f"the sweep ({' '.join(cmd[1:])}) ended with exit code {proc.returncode} before its study "
                         f"began; its output is in {log_path}")
    # The trials started before the target was seen (not the retries the stop enqueued, nor any the driver started
    # in the moment before the stop): every epoch they reported, in flight ones included.
    trials = [t for t in _study_trials(sweep_dir)
              if t["start"] is not None and (reached_at is None or t["start"] < reached_at)]
    numbers = {t["number"] for t in trials}
    diverged = sum(json.loads(p.read_text()).get("status") == "diverged" for p in sweep_dir.glob("*/result.json")
                   if int(p.parent.name.split("_", 1)[0]) in numbers)  # job n is trial n in a new sweep
    spent = sum(t["epochs_reported"] for t in trials) + diverged  # a diverged epoch is trained, never reported
    states = {s: sum(t["state"] == s for t in trials) for s in sorted({t["state"] for t in trials})}
    run = {"method": method, "seed": seed, "reached": hit is not None, "hit": hit, "epochs": spent,
           "percent_of_grid": 100 * spent / grid_epochs, "trials": len(trials), "states": states,
           "diverged": diverged, "wall_to_target_s": reached_s, "wall_s": wall_s, "exit_code": proc.returncode,
           "command": " ".join(cmd[1:]), "sweep_dir": str(sweep_dir), "trials_detail": trials}
    print(f"sweeper {method} seed {seed}: {'reached' if hit else 'DID NOT REACH'} the target with {spent} epochs "
          f"({run['percent_of_grid']:.1f}% of the grid) in {len(trials)} trials {states}, "
          f"{reached_s or wall_s:.0f} s" + (f"; hit: job {hit['job']} = {hit['objective']:.4f}" if hit else ""),
          flush=True)
    return run


def _sweeper_table(runs: list[dict[str, Any]], methods: list[str]) -> dict[str, Any]:
    print(f"\nthe sweeper itself (async, the study's space and n_jobs):\n{'method':<15} {'epochs (mean)':>13} "
          f"{'% of grid':>10} {'median %':>9} {'min-max %':>12} {'trials':>7} {'wall s':>7} {'reached':>8}")
    out: dict[str, Any] = {}
    for method in methods:
        mine = [r for r in runs if r["method"] == method]
        share = [r["percent_of_grid"] for r in mine]
        reached = sum(r["reached"] for r in mine)
        wall = statistics.fmean(r["wall_to_target_s"] or r["wall_s"] for r in mine)
        print(f"{method:<15} {statistics.fmean(r['epochs'] for r in mine):>13.0f} {statistics.fmean(share):>9.1f}% "
              f"{statistics.median(share):>8.1f}% {min(share):>5.0f}-{max(share):<5.0f} "
              f"{statistics.fmean(r['trials'] for r in mine):>7.1f} {wall:>7.0f} {reached:>5}/{len(mine)}")
        out[method] = {"percent_of_grid": statistics.fmean(share), "median_percent": statistics.median(share),
                       "reached": reached, "mean_wall_to_target_s": wall, "runs": mine}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=("mnist", "digits"), default="mnist", help="default mnist (needs --root)")
    parser.add_argument("--root", default=None, help="directory with MNIST's IDX files (task mnist)")
    parser.add_argument("--mode", choices=("replay", "sweeper", "both"), default="both",
                        help="replay trained curves, run the sweeper itself, or both (default)")
    parser.add_argument("--seeds", type=int, default=20, help="replay: sampler seeds per method (default 20)")
    parser.add_argument("--epochs", type=int, default=9, help="epochs of a full trial (default 9: rungs 1, 3, 9)")
    parser.add_argument("--grid-lrs", type=int, default=13, help="learning rates of the grid, log-spaced (default 13)")
    parser.add_argument("--tolerance", type=float, default=0.003, help="how close to the grid's best (default 0.003)")
    parser.add_argument("--budget", type=float, default=1.5, help="replay: cap per search, x the grid's compute")
    parser.add_argument("--processes", type=int, default=2, help="grid points trained at once (default 2)")
    parser.add_argument("--verify", type=int, default=2, help="replay: points trained again to check the curves")
    parser.add_argument("--sweeper-seeds", type=int, default=3, help="sweeper: runs of the study per method")
    parser.add_argument("--sweeper-methods", default="tpe+hyperband,random",
                        help=f"sweeper: comma-separated, among {', '.join(SWEEPER_METHODS)}")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures, command and machine here")
    parser.add_argument("--work", type=Path, default=None,
                        help=f"the grid's cache and the sweeper's sweeps (default: {OUT} and outputs/bench/optuna/)")
    args = parser.parse_args()
    if args.work is not None:
        args.work = args.work.resolve()  # the sweeps run with the repository as their working directory
    if args.task == "mnist" and not args.root:
        parser.error("--task mnist needs --root DIR with MNIST's IDX files (or use --task digits)")
    sweeper_methods = [m.strip() for m in args.sweeper_methods.split(",") if m.strip()]
    unknown = sorted(set(sweeper_methods) - set(SWEEPER_METHODS))
    if unknown:
        parser.error(f"--sweeper-methods must be among {', '.join(SWEEPER_METHODS)}, but got {unknown}")
    started = machine_info()
    print(f"machine: {machine_line()}", flush=True)
    t0 = time.perf_counter()
    extra = _overrides(args.task, args.root)
    lrs = [LR_LOW * (LR_HIGH / LR_LOW) ** (i / (args.grid_lrs - 1)) for i in range(args.grid_lrs)]
    points = [(o, lr) for o in OPTIMIZERS for lr in lrs]
    curves = _grid(points, args.epochs, extra, args.processes, args.work or OUT)
    finals = {i: c[-1] for i, c in curves.items() if len(c) == args.epochs and not math.isnan(c[-1])}
    best_i = max(finals, key=lambda i: finals[i])
    best_acc = finals[best_i]
    grid_epochs = sum(len(c) for c in curves.values())
    target = best_acc - args.tolerance
    n_within = sum(v >= target for v in finals.values())
    print(f"grid ({args.task}): {len(points)} points, {grid_epochs} epochs; best val_acc {best_acc:.4f} "
          f"({points[best_i][0]}, lr={points[best_i][1]:.3g}); target >= {target:.4f}, met by {n_within} of "
          f"{len(points)} points", flush=True)
    figures: dict[str, Any] = {"benchmark": "optuna", "settings": {**vars(args), "json": str(args.json)},
                               "task": args.task, "grid_epochs": grid_epochs, "grid_best": best_acc,
                               "grid_best_point": list(points[best_i]), "target": target,
                               "n_grid_within_target": n_within,
                               "grid": {f"{o} {lr:.4g}": curves[i] for i, (o, lr) in enumerate(points)}}

    if args.mode in ("replay", "both"):
        figures["verify"] = _verify(args, points, curves, extra)
        budget = int(args.budget * grid_epochs)
        runs = [_search(m, s, points, curves, args.epochs, target, budget) for m in METHODS for s in range(args.seeds)]
        print(f"\nreplay (one trial at a time, the grid's points):\n{'method':<15} {'epochs (mean)':>13} "
              f"{'% of grid':>10} {'median %':>9} {'min-max %':>12} {'trials':>7} {'reached':>8}")
        figures["methods"] = {}
        for method in METHODS:
            mine = [r for r in runs if r["method"] == method]
            share = [100 * r["epochs"] / grid_epochs for r in mine]
            reached = sum(r["reached"] for r in mine)
            print(f"{method:<15} {statistics.fmean(r['epochs'] for r in mine):>13.0f} "
                  f"{statistics.fmean(share):>9.1f}% {statistics.median(share):>8.1f}% "
                  f"{min(share):>5.0f}-{max(share):<5.0f} {statistics.fmean(r['trials'] for r in mine):>7.1f} "
                  f"{reached:>5}/{len(mine)}")
            figures["methods"][method] = {"percent_of_grid": statistics.fmean(share),
                                          "median_percent": statistics.median(share), "reached": reached,
                                          "runs": mine}
        print(f"(a replayed search that did not reach the target counts at its budget, {args.budget:g} x the grid)")

    if args.mode in ("sweeper", "both"):
        out_dir = args.work or REPO / "outputs" / "bench" / "optuna"
        out_dir /= datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        print(f"\nsweeper: the study (sweeps/optuna_lr.yaml) on the grid's task, {args.epochs} epochs; sweeps and "
              f"logs in {out_dir}", flush=True)
        sweeps = [_sweep(m, s, extra, args.epochs, target, grid_epochs, out_dir)
                  for s in range(args.sweeper_seeds) for m in sweeper_methods]  # methods alternate: load hits both
        figures["sweeper"] = _sweeper_table(sweeps, sweeper_methods)
        print("(a sweep that did not reach the target counts with the epochs it spent: its n_trials ran out)")
    wall_s = time.perf_counter() - t0
    figures["wall_s"] = wall_s
    print(f"\n{wall_s:.0f} s in all; machine at end: {machine_line()}")
    if args.json is not None:
        write_json(args.json, figures, started)


def _verify(args: argparse.Namespace, points: list[tuple[str, float]], curves: dict[int, list[float]],
            extra: list[str]) -> list[dict[str, Any]]:
    """Train `--verify` points again: the replay is valid only if their curves are the grid's, bit for bit."""
    if not args.verify:
        return []
    chosen = random.Random(0).sample(sorted(curves), min(args.verify, len(curves)))
    with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
        again = pool.map(_curve, [(points[i], args.epochs, extra) for i in chosen])
    checked = []
    for i, curve in zip(chosen, again, strict=True):
        same = json.dumps(curve) == json.dumps(curves[i])
        print(f"verify: {points[i][0]} lr={points[i][1]:.3g} trained again: "
              f"{'the same curve' if same else 'A DIFFERENT CURVE'}", flush=True)
        if not same:
            raise SystemExit(f"training is not deterministic here: {curve} != {curves[i]}; the replay is void")
        checked.append({"point": list(points[i]), "same_curve": same})
    return checked


if __name__ == "__main__":
    main()
