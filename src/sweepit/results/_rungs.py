"""`halving.json`: a halving sweep's plan (the config's epochs, the rungs, eta, the metric) and the decision of each
rung it has taken. The one reader and writer of the file: the halving sweeper writes it, and the end table, `sweepit
status` and a resume read it. What the jobs did stays in their own records."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sweepit._files import atomic_write
from sweepit.errors import is_count
from sweepit.results._paths import SweepPaths
from sweepit.results._status import JobState, finite_number


@dataclass
class RungPlan:
    epochs: int                      # the config's: what a job trains to when it is never cut
    rungs: list[int]                 # the epochs at which jobs pause
    eta: int
    metric: str
    direction: str
    n_jobs: int                      # the grid's points: job numbers 0 to n_jobs - 1
    # The jobs promoted from each rung decided so far, in rung order: a resume goes on from the first rung missing.
    promoted: list[list[int]] = field(default_factory=list)

    def same_sweep(self, other: RungPlan) -> bool:
        """Whether `other` plans the same rungs of the same grid (decisions aside)."""
        return {**asdict(self), "promoted": None} == {**asdict(other), "promoted": None}

    def last_rung_jobs(self) -> list[int] | None:
        """The jobs that train to `epochs`, once every rung is decided; None before."""
        if len(self.promoted) < len(self.rungs):
            return None
        return self.promoted[-1] if self.promoted else list(range(self.n_jobs))

    def ended(self, states: Mapping[int, str]) -> bool:
        """Whether the sweep has run its last rung: every rung decided and each job of the last one ended with a
        result (`states`: each job's state)."""
        last = self.last_rung_jobs()
        return last is not None and all(JobState.is_success(states.get(n)) for n in last)


def write_rungs(sweep_dir: Path, plan: RungPlan) -> Path:
    """Record `plan` atomically: a driver killed at any point leaves the decisions taken before, whole."""
    return atomic_write(SweepPaths(sweep_dir).halving, json.dumps(asdict(plan), indent=1) + "\n")


def read_rungs(sweep_dir: Path) -> RungPlan | None:
    """The plan, or None for a sweep that is not a halving one (or whose file cannot be read)."""
    try:
        data: Any = json.loads(SweepPaths(sweep_dir).halving.read_text())
        return RungPlan(**data)
    except (OSError, ValueError, TypeError):
        return None


@dataclass
class EpochSeconds:
    """What a halving sweep of `plan` spent, against its full grid: each job's mean epoch time (result.json's
    `epoch_time_s_mean`) times the epochs it trained, and times the config's `epochs`, summed over the jobs."""

    plan: RungPlan
    epochs: int = 0                  # trained, over the jobs timed
    spent_s: float = 0.0
    full_s: float = 0.0
    n_timed: int = 0
    n_jobs: int = 0

    def add(self, result: dict[str, Any]) -> None:
        self.n_jobs += 1
        mean, done = finite_number(result.get("epoch_time_s_mean")), result.get("epochs_completed")
        if mean is None or not isinstance(done, int) or not is_count(done, 1):
            return  # it ended before its first epoch: nothing spent, and no time to estimate its full run by
        self.n_timed += 1
        self.epochs += done
        self.spent_s += mean * done
        self.full_s += mean * self.plan.epochs

    def line(self) -> str:
        """`halving: 21 of 81 epochs, 3.1 of 11.9 epoch-seconds (0.26x the full grid's, from each job's mean epoch
        time)`, and the jobs left out."""
        if not self.n_timed:
            return "halving: no job reported an epoch time, so what it saved is not known."
        ratio = f" ({self.spent_s / self.full_s:.2f}x the full grid's" if self.full_s > 0 else " (the full grid's"
        untimed = self.n_jobs - self.n_timed
        out = (f"halving: {self.epochs} of {self.n_timed * self.plan.epochs} epochs, {_seconds(self.spent_s)} of "
               f"{_seconds(self.full_s)} epoch-seconds{ratio}, from each job's mean epoch time)")
        return out + (f"; {untimed} job(s) without an epoch time left out" if untimed else "")


def _seconds(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
