"""One job's session in its own process: its directory, config, rank, the metrics reported so far, its Optuna
trial and its record. The public calls (sweepit.train._api) act on the active session."""

from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sweepit._host import now_iso
from sweepit.errors import ConfigError, DivergedError, PausedAtRung
from sweepit.results import (
    STOP_EPOCH_ENV,
    JobPaths,
    JobRecord,
    JobState,
    Recorder,
    as_number,
    finite_number,
    objective_direction,
    read_metrics,
    read_record,
    record_end,
    returned_fields,
    write_metrics,
    write_result,
)
from sweepit.train._rank import SINGLE, Rank, from_environment, gpus_given

log = logging.getLogger(__name__)
ENV_JOB_DIR = "SWEEPIT_JOB_DIR"  # where a job writes, when no launcher or Hydra says (set it to try the API alone)
_NOTHING = object()


@dataclass
class Session:
    job_dir: Path | None
    config: Any = None                               # the job's config (an OmegaConf object or a mapping)
    rank: Rank | None = None                         # None: from the environment (Slurm, torchrun) at first use
    rows: list[dict[str, Any]] = field(default_factory=list)
    started_at: str = field(default_factory=now_iso)
    t0: float = field(default_factory=time.perf_counter)
    _trial: Any = _NOTHING                           # the pruning callback, once opened (None: no study)
    _stop: bool = False                              # the pruner's verdict after the latest report
    told_to_stop: bool = False                       # should_stop() said True: a task that returns was pruned
    _trackers: list[Any] | None = None               # the config's experiment trackers, once opened (rank 0)
    config_hash: str | None = None                   # the config as the job started: see _checkpoint.fingerprint
    implicit: bool = False                           # begun by a first call, not by a launcher: see active()
    saves: int = 0                                   # save_checkpoint calls of the job so far (resumed ones too)

    def value(self, key: str, default: Any = None) -> Any:
        from omegaconf import OmegaConf

        if self.config is None:
            return default
        if OmegaConf.is_config(self.config):
            return OmegaConf.select(self.config, key, default=default)
        node: Any = self.config
        for part in key.split("."):
            node = node.get(part, default) if isinstance(node, Mapping) else getattr(node, part, default)
        return node

    @property
    def metric(self) -> str | None:
        metric = self.value("metric")
        return None if metric is None else str(metric)

    @property
    def direction(self) -> str:
        return objective_direction(self.value("direction"))

    @property
    def the_rank(self) -> Rank:
        if self.rank is None:
            self.rank = from_environment() or SINGLE
        return self.rank

    @property
    def is_main(self) -> bool:
        return self.the_rank.is_main

    def report(self, metrics: Mapping[str, Any], epoch: int | None = None) -> None:
        epoch = len(self.rows) + 1 if epoch is None else int(epoch)
        if epoch < 1:
            raise ConfigError(f"sweepit.report's epoch must be >= 1 (epochs count from 1), but got epoch={epoch}.")
        row = {"epoch": epoch, **{str(k): _plain(v) for k, v in metrics.items() if k != "epoch"}}
        # An epoch reported again (a run resumed from an earlier checkpoint) replaces that epoch and later ones.
        self.rows = [r for r in self.rows if int(r.get("epoch", 0)) < epoch] + [row]
        self._stop = False
        if not self.is_main:
            return
        if self.job_dir is not None:
            self.restore(self.rows)
            self._track(row, epoch)
        trial = self._open_trial()
        if trial is not None:
            self._stop = bool(trial(epoch, row))

    def _track(self, row: Mapping[str, Any] | None, epoch: int) -> None:
        if self._trackers is None:
            from sweepit.trackers import open_trackers

            self._trackers = []  # a tracker that fails to open is not retried at every epoch
            if self.job_dir is not None:
                _tracked.add(self.job_dir.resolve())
                self._trackers = open_trackers(self.config, self.job_dir)
        if self._trackers and row is not None:
            numbers = {k: float(v) for k, v in row.items() if k != "epoch" and as_number(v) is not None}
            for tracker in self._trackers:
                tracker.log(numbers, epoch)

    def close_trackers(self, status: str | None = None) -> None:
        """End the trackers' runs with the job's status: its result.json's when it has one, else `status`
        (a job stopped before it recorded one: interrupted)."""
        job_dir = self.job_dir
        # A job that ended before its first report (none here, no metrics.jsonl from a forked rank) is still a run
        # in rank 0's trackers, with its status, so that their comparisons show every job of the sweep.
        if (self._trackers is None and job_dir is not None and self.is_main and job_dir.resolve() not in _tracked
                and not JobPaths(job_dir).metrics.exists()):
            try:
                self._track(None, 0)
            except Exception as e:
                log.warning(f"sweepit: the job's trackers could not record it: {type(e).__name__}: {e}")
        trackers, self._trackers = self._trackers or [], []
        if not trackers:
            return
        record = read_record(self.job_dir)
        final = str(record.status if record.ended else status or JobState.INTERRUPTED)
        for tracker in trackers:
            try:
                tracker.finish(final, record.result or None)
            except Exception as e:  # the job's own outcome is recorded already: a tracker must not change it
                log.warning(f"sweepit: {type(tracker).__name__} could not record the end of the run: "
                            f"{type(e).__name__}: {e}")

    def _open_trial(self) -> Any:
        if self._trial is _NOTHING:
            self._trial = None
            if self.metric is not None:
                from sweepit.search import pruning_callback

                self._trial = pruning_callback(SimpleNamespace(metric=self.metric, epochs=self.value("epochs")))
        return self._trial

    def should_stop(self, also: bool = False) -> bool:
        """Rank 0's pruner verdict after the latest report, or `also` (the loop's own reason) on any rank."""
        stop = (self._stop and self.is_main) or also
        if self.the_rank.world_size > 1:
            import torch
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():  # every rank stops, or none
                flag = torch.tensor([float(stop)], device=_collective_device())
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                stop = bool(flag.item() > 0)
        self.told_to_stop = self.told_to_stop or stop
        return stop

    @property
    def stop_epoch(self) -> int | None:
        """The epoch at which the halving sweeper pauses this job (set in its environment), else None."""
        value = os.environ.get(STOP_EPOCH_ENV)
        return int(value) if value else None

    def at_rung(self) -> bool:
        """Whether the last reported epoch is the one the halving sweeper pauses this job at."""
        stop = self.stop_epoch
        return stop is not None and bool(self.rows) and int(self.rows[-1].get("epoch", 0)) >= stop

    @property
    def checkpoint_path(self) -> Path | None:
        return None if self.job_dir is None else JobPaths(self.job_dir).checkpoint

    def restore(self, rows: list[dict[str, Any]]) -> None:
        """`rows` as the metrics so far (after a report, or those of a checkpoint); rank 0 rewrites metrics.jsonl."""
        self.rows = rows
        if self.is_main and self.job_dir is not None:
            write_metrics(self.job_dir, self.rows)

    def outcome(self, status: JobState, returned: Any = None, error: BaseException | None = None,
                recorded_by: Recorder | None = Recorder.SESSION) -> JobRecord:
        """The job's record: status, objective, final metrics, best epoch, times; recorded by the session for a
        task that wrote none, by nobody else for sweepit's own job (its own record)."""
        metric, direction = self.metric, self.direction
        rows = self.rows or (read_metrics(self.job_dir)[0] if self.job_dir is not None else [])
        record = record_end(
            None, status, recorded_by, started_at=self.started_at, ended_at=now_iso(),
            wall_time_s=time.perf_counter() - self.t0, hostname=socket.gethostname(), pid=os.getpid(),
            world_size=self.the_rank.world_size, n_gpus=gpus_given(), **epoch_facts(rows, metric, direction))
        result = record.result
        if not rows and recorded_by is not None:  # a task of the user's that reports no epoch: how many it ran is
            result["epochs_completed"] = None    # not known (sweepit's own loop reports each one)
        # What the config says about the objective, and nothing it does not: readers apply one default.
        result.update({k: str(v) for k, v in (("metric", metric), ("direction", self.value("direction"))) if v})
        if status == JobState.COMPLETED:
            result.update(returned_fields(returned))
            if result["objective"] is None and metric:  # the last reported value
                result["objective"] = next((v for r in reversed(rows) if (v := as_number(r.get(metric))) is not None),
                                           None)
        elif status in (JobState.PRUNED, JobState.PAUSED):  # stopped early: no objective (docs/results.md); `final`
            result.update(returned_fields(returned), objective=None)
        elif status == JobState.DIVERGED:
            result["error"] = str(error) if error is not None else "the loss stopped being finite"
        if error is not None and JobState.is_failure(status):
            result["error"] = f"{type(error).__name__}: {error}"
            result["traceback"] = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return record

    def finish(self, status: JobState, returned: Any = None, error: BaseException | None = None) -> None:
        """Rank 0 writes `result.json` unless the task wrote its own (sweepit's train.py does; a corrupt one,
        half-written by the task, is replaced by this record)."""
        if self.job_dir is None or not self.is_main:
            return
        if status == JobState.COMPLETED and self.told_to_stop:
            status = JobState.PRUNED  # the task returned because should_stop() said so
        write_result(self.job_dir, self.outcome(status, returned, error), replace=False)

    def write_own(self, record: JobRecord) -> None:
        """Sweepit's own loop's record (`outcome` with its training's facts added): the job's whole story, written
        over whatever an earlier attempt left."""
        if self.job_dir is not None:
            write_result(self.job_dir, record)


_active: Session | None = None
_tracked: set[Path] = set()  # job directories whose trackers a session of this process has opened


def begin(job_dir: Path | str | None, config: Any = None, rank: Rank | None = None) -> Session:
    global _active
    _active = Session(job_dir=None if job_dir is None else Path(job_dir), config=config, rank=rank)
    return _active


def join(job_dir: Path, config: Any = None, rank: Rank | None = None) -> tuple[Session, bool]:
    """The session a launcher began for the job in `job_dir` in this process (not one the API began on its own), else
    a new one; and whether the caller began it (and so ends it). One job, one session, whichever part of sweepit
    asked first."""
    running = current()
    if (running is not None and not running.implicit and running.job_dir is not None
            and running.job_dir.resolve() == Path(job_dir).resolve()):
        if running.rank is None and rank is not None:
            running.rank = rank
        return running, False
    return begin(job_dir, config, rank), True


def end(session: Session | None = None, status: str | None = None) -> None:
    """Close `session` (or whichever is active): its trackers end their runs with the job's status (its
    result.json's, else `status`), and later calls begin a new session."""
    global _active
    closing = session or _active
    if closing is not None:
        closing.close_trackers(status)
    if session is None or _active is session:
        _active = None


def current() -> Session | None:
    return _active


def active() -> Session:
    """The session of the job running in this process; the first call outside sweepit's launchers begins one
    in `$SWEEPIT_JOB_DIR`, else Hydra's output directory, else none (metrics kept in memory only). Such an implicit
    session belongs to one job directory: when Hydra's `basic` launcher moves its output directory on to the next
    job, the next call ends the old session, so that no job sees another's metrics, checkpoint or trial."""
    global _active
    if _active is not None and not _active.implicit:
        return _active
    here = job_dir_from_environment()
    if _active is not None and _active.job_dir == here:
        return _active
    if _active is not None:
        end(_active, JobState.ENDED)  # the last job of this process has ended: its trackers with it
    _active = Session(job_dir=here, implicit=True)
    atexit.unregister(_end_implicit)  # registered once: no launcher ends the last one (a user's own loop run alone)
    atexit.register(_end_implicit)
    return _active


def _end_implicit() -> None:
    if _active is not None and _active.implicit:
        end(_active, JobState.ENDED)


def job_dir_from_environment() -> Path | None:
    if os.environ.get(ENV_JOB_DIR):
        return Path(os.environ[ENV_JOB_DIR])
    hydra_config = sys.modules.get("hydra.core.hydra_config")  # Hydra runs this job: ask it, never import it
    if hydra_config is None or not hydra_config.HydraConfig.initialized():
        return None
    # A multirun's driver holds the sweep's config, whose output_dir only a job sets: no job runs in this process.
    from omegaconf import OmegaConf
    output_dir = OmegaConf.select(hydra_config.HydraConfig.get(), "runtime.output_dir", default=None)
    return Path(output_dir) if output_dir is not None else None


def leave_process_group() -> None:
    """A job that failed leaves its process group as it is (sweepit.train._distributed.abandon_process_group);
    nothing when the job made no group through sweepit (torch is not imported for this)."""
    distributed = sys.modules.get("sweepit.train._distributed")
    if distributed is not None:
        distributed.abandon_process_group()


def status_of(error: BaseException) -> JobState:
    """The status a job that raised `error` ends with (optuna.TrialPruned: Optuna's own way to prune a trial)."""
    if isinstance(error, DivergedError):
        return JobState.DIVERGED
    if isinstance(error, PausedAtRung):
        return JobState.PAUSED
    if isinstance(error, KeyboardInterrupt):
        return JobState.INTERRUPTED
    optuna_exceptions = sys.modules.get("optuna.exceptions")
    if optuna_exceptions is not None and isinstance(error, optuna_exceptions.TrialPruned):
        return JobState.PRUNED
    return JobState.FAILED


def epoch_facts(rows: list[dict[str, Any]], metric: str | None, direction: str) -> dict[str, Any]:
    """What a job's record says of its epochs: how many, the last one's metrics, their times, the best epoch."""
    facts: dict[str, Any] = {"epochs_completed": len(rows)}
    if rows:
        facts["final"] = rows[-1]
    timed = rows[1:] if len(rows) > 1 else rows  # as the courses time it: the first (warm-up) epoch left out
    for key in ("epoch_time_s", "samples_per_s", "step_time_s"):  # those the rows have (a user's loop: maybe none)
        values = [v for r in timed if (v := as_number(r.get(key))) is not None]
        if values:
            facts.update({f"{key}_mean": sum(values) / len(values), "timed_epochs": len(timed)})
    scored = [r for r in rows if finite_number(r.get(metric)) is not None] if metric else []
    if metric and scored:
        best = (max if direction == "maximize" else min)(scored, key=lambda r: float(r[metric]))
        facts.update(best_epoch=best.get("epoch"), best_value=best[metric])
    return facts


def _plain(value: Any) -> Any:
    """Tensors and NumPy scalars as Python numbers, for JSON."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", 0) == 0:
        value = item()
    return value


def _collective_device() -> Any:
    import torch
    import torch.distributed as dist

    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
