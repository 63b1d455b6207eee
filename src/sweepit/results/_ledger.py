"""A sweep's ledger: the one owner of its jobs' lives. It holds the sweep's lock and `sweep.json`, and makes every
change of a job's state: plan, queue, start, end, requeue, give up, and the record of a job that ended without its own
(`record_end`, the one builder of a record besides the job's session). An ended job is not changed again, except by a
new attempt (`again`); concurrent writers (a driver, a worker, `sweepit status`) rely on that, and on `write_result`'s
rule that the job's own record wins. Engines (local, per-job Slurm, packed, Optuna workers) decide only when to call it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sweepit._files import remove_temporaries
from sweepit._host import now_iso, process_alive
from sweepit.errors import ManifestError
from sweepit.results._job_files import JobRecord, read_record, write_result
from sweepit.results._lock import SweepLock
from sweepit.results._manifest import JobEntry, Manifest, driver_argv, read_manifest, write_manifest
from sweepit.results._overrides import driver_env
from sweepit.results._paths import RESULT_FILE
from sweepit.results._status import JobState, Recorder

log = logging.getLogger(__name__)
_TIMES = ("pid", "started_at", "ended_at")


def record_end(job_dir: Path | str | None, status: JobState, recorded_by: Recorder | None, *, replace: bool = False,
               stderr_tail: Callable[[], str] | None = None, retell: Callable[[JobRecord], bool] | None = None,
               **facts: Any) -> JobRecord:
    """A record of how a job ended (`recorded_by`: who wrote it, when not the job itself) and the record that stands.
    `replace=False` (a watcher saw it end): the job's own record wins, however late it came (`write_result`'s rules).
    `replace=True`: the job's whole story (sweepit's own loop's, or of a job that never ran: its config refused, no
    worker started it). No `job_dir`: nothing is written."""
    result: dict[str, Any] = {"status": status, "objective": None, **facts}
    if recorded_by is not None:
        result["recorded_by"] = recorded_by
    record = JobRecord(status, result)
    if job_dir is None:
        return record
    standing = write_result(job_dir, record, replace=replace, stderr_tail=stderr_tail, retell=retell)
    return record if standing == status else read_record(job_dir)


def is_finished(job_dir: Path | str) -> bool:
    """True when a resume must skip the job: its result says completed (or pruned, or diverged), or paused."""
    return JobState.is_settled(read_record(job_dir).status)


@dataclass
class Ledger(Manifest):
    """`sweep.json` in the hands of its one writer: the jobs' states and every change to them. `lock`: the sweep's,
    held by a driver (`open`); None for `sweepit status`, which records only when no driver holds it."""

    lock: SweepLock | None = field(default=None, repr=False, compare=False)

    @classmethod
    def open(cls, sweep_dir: Path, launcher: str, lock: SweepLock) -> Ledger:
        """Hold the sweep's lock (released by the caller's `lock.release()`) and take its ledger for this run: the
        existing one, its jobs kept, or a new one."""
        sweep_dir.mkdir(parents=True, exist_ok=True)
        lock.acquire()
        run: dict[str, Any] = {"sweep_dir": str(sweep_dir.absolute()), "argv": driver_argv(), "cwd": str(Path.cwd()),
                               "launcher": launcher, "env": driver_env()}
        try:
            # (a copy made by `replace` has no `_disk`: the new command goes into the snapshot, written whole first)
            ledger = replace(cls.read(sweep_dir), **run)
        except ManifestError:
            ledger = cls(**run)
        ledger.lock = lock
        return ledger

    @classmethod
    def read(cls, sweep_dir: Path) -> Ledger:
        """The ledger on disk, for a reader that may record what it finds (`sweepit status`)."""
        ledger = read_manifest(sweep_dir, cls)
        assert isinstance(ledger, cls)
        return ledger

    def write(self, changed: Iterable[int] | None = None) -> Path:
        """Record the jobs `changed` (None: the whole ledger, its journal folded in)."""
        return write_manifest(self, changed)

    # -- transitions ---------------------------------------------------------------------------------------------
    def plan(self, num: int, overrides: list[str], job_dir: str = "", state: JobState = JobState.QUEUED,
             extra: dict[str, Any] | None = None) -> JobEntry:
        """Job `num` planned afresh (a new sweep's, a resume's to run again): its entry replaced."""
        entry = self.jobs[num] = JobEntry(num=num, overrides=overrides, job_dir=job_dir, state=state,
                                          extra=extra or {})
        return entry

    def move(self, num: int, state: str, *, again: bool = False, extra: dict[str, Any] | None = None,
             **times: Any) -> bool:
        """Job `num` to a state that needs no record (queued, running, not started, interrupted by its driver), with
        its `pid`/`started_at`/`ended_at` and `extra` (replaced) when given. An ended job is refused (False) unless
        this is a new attempt (`again`: a requeue, a retry, a resume's run): its end stands."""
        entry = self.jobs[num]
        if JobState.is_ended(entry.state) and state != entry.state and not again:
            log.debug(f"job {num} ended {entry.state}: not moved to {state}")
            return False
        entry.state = state
        for key, value in times.items():
            assert key in _TIMES, key
            setattr(entry, key, value)
        if extra is not None:
            entry.extra = extra
        return True

    def end(self, num: int, status: JobState, recorded_by: Recorder, *, stderr_tail: Callable[[], str] | None = None,
            retell: Callable[[JobRecord], bool] | None = None, **facts: Any) -> str:
        """Job `num` seen ended: sweepit's record of it is written where the job left none (`record_end`), and the
        entry takes the status that stands (the job's own record's, when it has one). Returns it."""
        entry = self.jobs[num]
        # Its processes are gone: what their writes left half-done goes, but a record another watcher may be writing.
        remove_temporaries(Path(entry.job_dir), keep=RESULT_FILE)
        facts.setdefault("ended_at", now_iso())
        standing = entry.state = record_end(entry.job_dir, status, recorded_by, stderr_tail=stderr_tail, retell=retell,
                                            **facts).status or status
        entry.ended_at = facts["ended_at"]
        return standing

    def requeue(self, num: int) -> bool:
        """Job `num` back to the queue for another attempt (its worker died or gave it back), unless a record of its
        end came meanwhile (one of its stop, `interrupted`, is no end): that end stands, and False."""
        entry = self.jobs[num]
        if JobState.is_ended(status := read_record(entry.job_dir).status) and status != JobState.INTERRUPTED:
            return False
        return self.move(num, JobState.QUEUED, again=True, started_at=None, ended_at=None)

    def fail(self, num: int, error: str, recorded_by: Recorder) -> str:
        """Job `num` did not run (refused, or no worker started it): recorded failed, with `error`."""
        entry = self.jobs[num]
        entry.ended_at = now_iso()
        record_end(entry.job_dir, JobState.FAILED, recorded_by, replace=True, error=error, ended_at=entry.ended_at)
        entry.state = JobState.FAILED
        return entry.state

    def mirror(self, num: int) -> bool:
        """Job `num`'s state from its record on disk, the truth of how it ended (one written since: a worker's, an
        earlier run's); True when it changed."""
        entry = self.jobs[num]
        status = read_record(entry.job_dir or None).status
        if status is None or status == entry.state:
            return False
        entry.state = status
        return True

    def skip_finished(self, num: int, overrides: list[str], job_dir: Path | str) -> bool:
        """A resume's job that finished before (in `job_dir`), or was paused: its entry (planned, where it has none)
        takes its record's status, and it is not run again."""
        status = read_record(job_dir).status
        if status is None or not JobState.is_settled(status):
            return False
        if num not in self.jobs:
            self.plan(num, overrides, str(job_dir))
        self.jobs[num].state = status
        return True

    def stop_queued(self) -> list[int]:
        """The sweep ends with jobs still queued (stopped first, or not waited for): they are `not started`, for a
        resume to run."""
        stopped = [n for n, e in self.jobs.items() if e.state == JobState.QUEUED]
        for n in stopped:
            self.jobs[n].state = JobState.NOT_STARTED
        return stopped

    def settle_orphans(self) -> list[int]:
        """A local sweep whose driver is gone (killed, the machine rebooted): its queued jobs are `not started` and a
        job whose process is gone without a result `interrupted`, not `queued` and `running` for ever; returns the
        numbers of the jobs that changed."""
        if self.launcher != "local":
            return []  # a Slurm job stays in Slurm's hands and runs without its driver
        changed = self.stop_queued()
        for n, e in self.jobs.items():
            if e.state == JobState.RUNNING and read_record(Path(e.job_dir)).status is None and not (
                    e.pid and process_alive(e.pid)):
                e.state = JobState.INTERRUPTED
                changed.append(n)
        return changed
