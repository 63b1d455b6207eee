"""Successive halving over a grid, synchronous: every job of a rung trains to the rung's epoch and pauses there (its
checkpoint saved), the best 1/eta by the config's `metric` at that epoch go on from their checkpoints, and the last
rung's survivors train to their last epoch. Hydra-free: the sweeper plugin (`hydra/sweeper=halving`) hands it the
grid's points and a launcher that starts jobs by number (`AsyncLauncher`), so a job keeps its folder across rungs."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweepit.errors import ConfigError, SweepStoppedError, is_count, require
from sweepit.results import (
    STOP_EPOCH_ENV,
    JobState,
    RungPlan,
    finite_number,
    job_folders,
    read_metrics,
    read_record,
    read_rungs,
    write_rungs,
)
from sweepit.search._trials import AsyncLauncher

log = logging.getLogger(__name__)


@dataclass
class HalvingOptions:
    """The halving sweeper's options, `hydra.sweeper.*` (the plugin's schema adds the keys only Hydra has);
    docs/configuration.md is generated from the comments on its fields."""

    # Keep the best 1/eta of a rung's jobs (at least one), by the config's `metric` and `direction` at its epoch.
    eta: int = 3
    # Epochs at which to cut, increasing, each below the config's `epochs`, e.g. [3, 9]. null: min_epochs x eta^k
    # below `epochs` (epochs=9 eta=3: [1, 3]).
    rungs: list[int] | None = None
    # The first rung's epoch when `rungs` is null.
    min_epochs: int = 1

    def __post_init__(self) -> None:
        require(is_count(self.eta, 2), f"hydra.sweeper.eta must be an integer >= 2 (keep the best 1/eta), but got "
                f"eta={self.eta!r}. Set for example hydra.sweeper.eta=3.")
        require(is_count(self.min_epochs, 1), "hydra.sweeper.min_epochs must be an integer >= 1, but got "
                f"min_epochs={self.min_epochs!r}. Set for example hydra.sweeper.min_epochs=1.")
        if self.rungs is not None:
            rungs = list(self.rungs)
            require(all(is_count(r, 1) for r in rungs) and rungs == sorted(set(rungs)), "hydra.sweeper.rungs must be "
                    f"increasing epochs >= 1, but got rungs={rungs!r}. Set for example 'hydra.sweeper.rungs=[1,3]'.")

    def rung_epochs(self, epochs: Any) -> list[int]:
        """The epochs at which the jobs of a sweep whose config trains `epochs` epochs are cut."""
        if not is_count(epochs, 1):
            raise ConfigError(f"hydra/sweeper=halving cuts jobs at epochs below the config's `epochs`, but got "
                              f"epochs={epochs!r}. Add `epochs: N` to the app's config.")
        if self.rungs is not None:
            require(not self.rungs or self.rungs[-1] < epochs, f"hydra.sweeper.rungs must be below the config's "
                    f"epochs={epochs}, but got rungs={self.rungs}. Drop the last, or raise epochs.")
            return list(self.rungs)
        rungs, epoch = [], self.min_epochs
        while epoch < epochs:
            rungs.append(epoch)
            epoch *= self.eta
        return rungs


def survivors(values: dict[int, float | None], direction: str, eta: int) -> list[int]:
    """The jobs promoted from a rung: the best `len(values) // eta` (at least one) of those with a finite value,
    in their order, ties to the lower job number. A job without one (failed, diverged) is never promoted."""
    scored = [(v, n) for n, v in values.items() if v is not None]
    sign = -1.0 if direction == "maximize" else 1.0
    scored.sort(key=lambda item: (sign * item[0], item[1]))
    return sorted(n for _, n in scored[:max(1, len(values) // eta)])


def value_at(job_dir: Path | None, metric: str, epoch: int) -> float | None:
    """A paused job's `metric` at `epoch`, from its metrics.jsonl; None when it did not pause there with one."""
    if job_dir is None or read_record(job_dir).status != JobState.PAUSED:
        return None
    rows, _ = read_metrics(job_dir)
    return next((finite_number(r.get(metric)) for r in rows if r.get("epoch") == epoch), None)


@dataclass
class Halving:
    """One halving sweep of `points` (a job's number is its point's index) in `sweep_dir`. `set_env(num, env)` gives
    job `num` the environment of its next start (its rung's stop epoch)."""

    options: HalvingOptions
    points: Sequence[list[str]]
    sweep_dir: Path
    metric: str
    direction: str
    epochs: int

    def plan(self, resume: bool = False) -> RungPlan:
        """The sweep's rungs, with the decisions a resume goes on from; ConfigError when the sweep recorded other
        rungs, or a grid of another size."""
        plan = RungPlan(self.epochs, self.options.rung_epochs(self.epochs), self.options.eta, self.metric,
                        self.direction, len(self.points))
        recorded = read_rungs(self.sweep_dir) if resume else None
        if recorded is not None:
            require(recorded.same_sweep(plan), "a resumed halving sweep must have the rungs, eta, metric and grid it "
                    f"ran with, but {self.sweep_dir} recorded {_plain(recorded)} and the config now gives "
                    f"{_plain(plan)}. Resume it with `sweepit resume {self.sweep_dir}`, which runs its own command.")
            plan.promoted = recorded.promoted
        return plan

    def run(self, launcher: AsyncLauncher, set_env: Callable[[int, dict[str, str]], None],
            resume: bool = False) -> list[tuple[int, Any]]:
        """Run every rung; returns `(job_num, what the launcher returned)` of each job started, in job order. Each
        rung's decision is recorded (halving.json) before the next rung starts. `resume`: go on from the decisions
        recorded, and start only the jobs whose records say they have not reached their rung."""
        returns: dict[int, Any] = {}
        alive = list(range(len(self.points)))
        plan = self.plan(resume)
        write_rungs(self.sweep_dir, plan)
        for rung, stop in enumerate([*plan.rungs, None]):
            if rung < len(plan.promoted):  # decided before the sweep stopped: every job of it reached it then
                alive = plan.promoted[rung]
                continue
            folders = job_folders(self.sweep_dir) if resume else {}
            todo = [n for n in alive if not reached(folders.get(n), stop)]
            log.info(f"halving: {len(todo)} job(s) to epoch {stop or self.epochs}"
                     + (f" ({len(alive) - len(todo)} reached it before)" if len(todo) < len(alive) else ""))
            for num in todo:
                set_env(num, {STOP_EPOCH_ENV: str(stop)} if stop else {})
                launcher.start(self.points[num], num)
            self._wait(launcher, todo, returns)
            if stop is None:
                break
            folders = job_folders(self.sweep_dir)
            values = {n: value_at(folders.get(n), self.metric, stop) for n in alive}
            alive = survivors(values, self.direction, self.options.eta)
            plan.promoted.append(alive)
            write_rungs(self.sweep_dir, plan)  # before any promoted job starts: a resume never decides it again
        return sorted(returns.items())

    def _wait(self, launcher: AsyncLauncher, nums: list[int], returns: dict[int, Any]) -> None:
        """Until the jobs `nums` of a rung have ended. A job interrupted (Ctrl-C, SIGTERM) stops the sweep: the
        rung's decision would rank jobs that did not reach it."""
        waiting = set(nums)
        try:
            while waiting:
                ended = launcher.wait_any()
                if not ended:
                    break  # nothing more in flight (the launcher gave up on the rest)
                for num, ret in ended:
                    returns[num] = ret
                    waiting.discard(num)
        except KeyboardInterrupt as e:
            raise SweepStoppedError(_stopped(str(e), self.sweep_dir)) from None
        folders = job_folders(self.sweep_dir)
        stopped = [n for n in nums if read_record(folders.get(n)).status == JobState.INTERRUPTED]
        if stopped:
            raise SweepStoppedError(_stopped(f"job {stopped[0]} was interrupted", self.sweep_dir))


def reached(job_dir: Path | None, stop: int | None) -> bool:
    """Whether a job's record says it has run its rung to `stop` (None: its last epoch) or ended for good: a resume
    starts it no more for that rung."""
    record = read_record(job_dir)
    if record.status is None:
        return False
    if JobState.is_success(record.status):  # completed, or diverged: nothing left to run
        return True
    done = record.result.get("epochs_completed")
    return record.status == JobState.PAUSED and stop is not None and isinstance(done, int) and done >= stop


def _plain(plan: RungPlan) -> str:
    return (f"epochs={plan.epochs} rungs={plan.rungs} eta={plan.eta} metric={plan.metric} direction={plan.direction} "
            f"with {plan.n_jobs} jobs")


def _stopped(why: str, sweep_dir: Path) -> str:
    return (f"{why}, so the halving sweep stops; its jobs' folders, records, checkpoints and rung decisions stay.\n"
            f"`sweepit resume {sweep_dir}` goes on from there: no job runs a rung twice.")
