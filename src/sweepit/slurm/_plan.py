"""The plan of a Slurm sweep's jobs, shared by its drivers (the per-job `SlurmSweep`, the workers' `WorkerDriver`):
each job's config composed and its request checked, the sweep's lock and manifest, the end of a followed run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sweepit.errors import SweepFailedError
from sweepit.results import (
    JobEntry,
    Manifest,
    State,
    Status,
    SweepLock,
    failure_report,
    is_finished,
    open_manifest,
    read_record,
    summarize,
)
from sweepit.slurm._budget import budget_line
from sweepit.slurm._request import ClusterFacts, Request, SlurmOptions, asked, place


@dataclass
class PlannedJob:
    num: int
    overrides: list[str]
    config: Any = None               # the composed job config (a DictConfig, hydra node included)
    job_dir: Path = Path()
    request: Request | None = None   # filled in when the sweep is planned
    # Read from the config when the sweep is planned, for sweep.json (the config may be let go of then).
    metric: str | None = None
    direction: str | None = None
    env_set: dict[str, str] = field(default_factory=dict)  # hydra.job.env_set
    gate: Any = None                 # what its task runs first under a GPU budget (slurm._budget.Gate), else None

    def entry(self) -> JobEntry:
        return JobEntry(num=self.num, overrides=self.overrides, job_dir=str(self.job_dir), state=State.NOT_STARTED)

    def planned(self, o: SlurmOptions) -> dict[str, Any]:
        """What sweep.json keeps of the job's plan (`result_grace_s` for `sweepit status`, which has no options)."""
        r = self.request
        return {"gpus": r.n_gpus if r else None, "nodes": r.nodes if r else None,
                "timeout_min": r.timeout_min if r else None, "metric": self.metric, "direction": self.direction,
                "result_grace_s": o.result_grace_s}


class Planner:
    """One sweep directory as its drivers share it (the per-job `SlurmSweep`, the workers' `WorkerDriver`): the
    options, the lock, what Slurm said of itself, and the plan of each job (its config composed, its request checked).
    `compose(job)` fills in the job's config and directory."""

    def __init__(self, options: SlurmOptions, sweep_dir: Path, compose: Callable[[PlannedJob], None],
                 lock: SweepLock | None = None, facts: ClusterFacts | None = None,
                 release_config: Callable[[PlannedJob], None] | None = None) -> None:
        self.options = options
        self.sweep_dir = sweep_dir
        self.compose = compose
        # Asked at the first plan and kept for the sweep; a launcher passes one for all its batches.
        self.facts = facts if facts is not None else ClusterFacts()
        # How the launcher lets go of a job's config once it is planned (it sets job.config to something lighter).
        self.release_config: Callable[[PlannedJob], None] = release_config or (lambda job: None)
        # One driver per sweep directory: a lock of the caller's (held for the whole sweep), or one per run.
        self.own_lock = lock is None
        self.lock = SweepLock(sweep_dir) if lock is None else lock

    def plan(self, jobs: list[PlannedJob], release: bool = False) -> int:
        """Compose each job and set its request, checked against the options and the partition (ConfigError,
        SlurmError); returns the most jobs one array may hold. `release`: let go of each job's config once read (a
        packed sweep's workers compose the jobs again; 100,000 composed configs would not fit)."""
        o = self.options
        asks = []
        for job in jobs:
            self.compose(job)
            asks.append(asked(job.num, _select(job.config, o.gpus_key), _select(job.config, o.timeout_key), o))
            job.metric, job.direction = _select_str(job.config, "metric"), _select_str(job.config, "direction")
            job.env_set = _env_set(job.config)
            if release:
                self.release_config(job)
        requests, max_array_size = place(asks, o, self.facts)
        for job, request in zip(jobs, requests, strict=True):
            job.request = request
        return max_array_size

    def begin(self) -> Manifest:
        """Hold the sweep's lock (released by `end`) and read its manifest."""
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        self.lock.acquire()
        return open_manifest(self.sweep_dir, launcher="slurm")

    def end(self) -> None:
        if self.own_lock:
            self.lock.release()

    def skip_finished(self, m: Manifest, jobs: list[PlannedJob]) -> set[int]:
        """A resume's jobs that finished before: not run again, their entries' states from their results."""
        skipped = set()
        for job in jobs:
            if self.options.resume and is_finished(job.job_dir):
                skipped.add(job.num)
                m.jobs.setdefault(job.num, job.entry()).state = read_record(job.job_dir).status or Status.COMPLETED
        return skipped

    def finish(self, m: Manifest, jobs: list[PlannedJob], statuses: dict[int, str], skipped: set[int]) -> None:
        """The end of a followed run: the results table, and SweepFailedError when jobs failed (and
        `fail_on_error`)."""
        if self.options.print_summary:
            line = budget_line(self.sweep_dir)
            print(summarize(self.sweep_dir) + (f"\n{line}" if line else ""), flush=True)
        report = failure_report(m, jobs, statuses, skipped, None, self.options.fail_on_error)
        if report is not None:
            raise SweepFailedError(report)


def by_request(jobs: list[PlannedJob]) -> dict[Request | None, list[PlannedJob]]:
    groups: dict[Request | None, list[PlannedJob]] = {}
    for job in jobs:
        groups.setdefault(job.request, []).append(job)
    return groups


def _select(config: Any, key: str | None) -> Any:
    return None if key is None or config is None else OmegaConf.select(config, key, default=None)


def _select_str(config: Any, key: str) -> str | None:
    value = _select(config, key)
    return None if value is None else str(value)


def _env_set(config: Any) -> dict[str, str]:
    env = _select(config, "hydra.job.env_set")
    plain = OmegaConf.to_container(env) if env is not None else None
    return {str(k): str(v) for k, v in plain.items()} if isinstance(plain, dict) else {}
