"""The plan of a Slurm sweep's jobs, shared by its drivers (the per-job `SlurmSweep`, the workers' `WorkerDriver`):
each job's directory and request checked (its config is composed where it runs), the sweep's lock and manifest, the
end of a followed run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweepit.errors import SweepFailedError
from sweepit.results import Ledger, Manifest, SweepLock, failure_report, summarize
from sweepit.slurm._budget import END_SETTLE_S, budget_line
from sweepit.slurm._place import ClusterFacts, asked, place
from sweepit.slurm._request import Request, SlurmOptions

# What a plan reads of each job's config besides the request's keys: for sweep.json, and hydra.job.env_set, which a
# packed worker sets in the job's config again.
PLANNED_KEYS = ("metric", "direction", "hydra.job.env_set")


@dataclass
class PlannedJob:
    num: int
    overrides: list[str]
    config: Any = None               # the composed job config (a DictConfig, hydra node included), once composed
    job_dir: Path = Path()
    request: Request | None = None   # filled in when the sweep is planned
    # Read from the config when the sweep is planned, for sweep.json (the config may be let go of then).
    metric: str | None = None
    direction: str | None = None
    env_set: dict[str, str] = field(default_factory=dict)  # hydra.job.env_set
    gate: Any = None                 # what its task runs first under a GPU budget (slurm._budget.Gate), else None

    def planned(self, o: SlurmOptions) -> dict[str, Any]:
        """What sweep.json keeps of the job's plan (`result_grace_s` for `sweepit status`, which has no options)."""
        r = self.request
        return {"gpus": r.n_gpus if r else None, "nodes": r.nodes if r else None,
                "timeout_min": r.timeout_min if r else None, "metric": self.metric, "direction": self.direction,
                "result_grace_s": o.result_grace_s}


class Planner:
    """One sweep directory as its drivers share it (the per-job `SlurmSweep`, the workers' `WorkerDriver`): the
    options, the lock, what Slurm said of itself, and the plan of each job (its directory and its request, checked).
    `plan_job(job, keys)` fills in the job's directory and returns the values of those keys of its config (None where
    absent): the launcher's, which composes the job's config only where the job runs."""

    def __init__(self, options: SlurmOptions, sweep_dir: Path,
                 plan_job: Callable[[PlannedJob, tuple[str, ...]], dict[str, Any]],
                 lock: SweepLock | None = None, facts: ClusterFacts | None = None) -> None:
        self.options = options
        self.sweep_dir = sweep_dir
        self.plan_job = plan_job
        # Asked at the first plan and kept for the sweep; a launcher passes one for all its batches.
        self.facts = facts if facts is not None else ClusterFacts()
        # One driver per sweep directory: a lock of the caller's (held for the whole sweep), or one per run.
        self.own_lock = lock is None
        self.lock = SweepLock(sweep_dir) if lock is None else lock

    def plan(self, jobs: list[PlannedJob]) -> int:
        """Each job's directory and request, checked against the options and the partition (ConfigError,
        SlurmError); returns the most jobs one array may hold."""
        o = self.options
        keys = tuple(k for k in (o.gpus_key, o.timeout_key) if k is not None) + PLANNED_KEYS
        asks = []
        for job in jobs:
            values = self.plan_job(job, keys)
            asks.append(asked(job.num, _get(values, o.gpus_key), _get(values, o.timeout_key), o))
            job.metric, job.direction = _text(values["metric"]), _text(values["direction"])
            job.env_set = _env_set(values["hydra.job.env_set"])
        requests, max_array_size = place(asks, o, self.facts)
        for job, request in zip(jobs, requests, strict=True):
            job.request = request
        return max_array_size

    def begin(self) -> Ledger:
        """Hold the sweep's lock (released by `end`) and take its ledger."""
        return Ledger.open(self.sweep_dir, "slurm", self.lock)

    def end(self) -> None:
        if self.own_lock:
            self.lock.release()

    def skip_finished(self, m: Ledger, jobs: list[PlannedJob]) -> set[int]:
        """A resume's jobs that finished before: not run again, their entries' states from their results."""
        skipped = set()
        for job in jobs:
            if self.options.resume and m.skip_finished(job.num, job.overrides, job.job_dir):
                skipped.add(job.num)
        return skipped

    def finish(self, m: Manifest, jobs: list[PlannedJob], skipped: set[int]) -> None:
        """The end of a followed run: the results table, and SweepFailedError when jobs failed (and
        `fail_on_error`)."""
        # Every run has ended by its record: the budget's figures wait for accounting's (the report reads them next).
        line = budget_line(self.sweep_dir, settle_s=END_SETTLE_S)
        if self.options.print_summary:
            print(summarize(self.sweep_dir) + (f"\n{line}" if line else ""), flush=True)
        report = failure_report(m, jobs, skipped, None, self.options.fail_on_error)
        if report is not None:
            raise SweepFailedError(report)


def by_request(jobs: list[PlannedJob]) -> dict[Request | None, list[PlannedJob]]:
    groups: dict[Request | None, list[PlannedJob]] = {}
    for job in jobs:
        groups.setdefault(job.request, []).append(job)
    return groups


def _get(values: dict[str, Any], key: str | None) -> Any:
    return None if key is None else values.get(key)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _env_set(env: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}
