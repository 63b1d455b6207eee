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
from sweepit.results._job_files import read_metrics
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
    """What a halving sweep of `plan` spent, against its full grid, from each job's epoch times (`metrics.jsonl`'s
    `epoch_time_s`): spent, the sum of the epochs it trained; the full grid, each job's first epoch and its steady
    epochs' mean for the rest of `epochs`. A start's first epoch is the slowest (warm-up), a promoted job's first
    after a rung too, so neither is steady; a job with no steady epoch takes the median of the others' means."""

    plan: RungPlan
    epochs: int = 0                  # trained, over the jobs timed
    spent_s: float = 0.0
    n_jobs: int = 0
    timed: list[tuple[float, float | None]] = field(default_factory=list)  # each job's first epoch, later mean

    def add(self, job_dir: Path | None) -> None:
        self.n_jobs += 1
        rows, _ = read_metrics(job_dir) if job_dir is not None else ([], [])
        times = {row.get("epoch"): t for row in rows if (t := finite_number(row.get("epoch_time_s"))) is not None}
        if not times:
            return  # it ended before its first epoch (or reports no epoch time): nothing to estimate its run by
        self.epochs += len(times)
        self.spent_s += sum(times.values())
        steady = [t for e, t in times.items() if isinstance(e, int) and e > 1 and e - 1 not in self.plan.rungs]
        first = times.get(1, next(iter(times.values())))
        self.timed.append((first, sum(steady) / len(steady) if steady else None))

    @property
    def full_s(self) -> float:
        later = sorted(mean for _, mean in self.timed if mean is not None)
        median = later[len(later) // 2] if later else None
        rest = self.plan.epochs - 1
        return sum(first + rest * (mean if mean is not None else median if median is not None else first)
                   for first, mean in self.timed)

    def line(self) -> str:
        """`halving: 21 of 81 epochs, 3.1 of 11.9 epoch-seconds (0.26x the full grid's estimate, from the epochs'
        times)`, and the jobs left out."""
        if not self.timed:
            return "halving: no job reported an epoch time, so what it saved is not known."
        full = self.full_s
        ratio = f" ({self.spent_s / full:.2f}x the full grid's estimate" if full > 0 else " (the full grid's estimate"
        untimed = self.n_jobs - len(self.timed)
        out = (f"halving: {self.epochs} of {len(self.timed) * self.plan.epochs} epochs, {_seconds(self.spent_s)} of "
               f"{_seconds(full)} epoch-seconds{ratio}, from the epochs' times)")
        return out + (f"; {untimed} job(s) without an epoch time left out" if untimed else "")


def _seconds(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
