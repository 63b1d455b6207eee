"""The pool's hooks: what the driver records around each local job (its directory and manifest state, the
progress line, and `result.json` for a job that died without writing one)."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sweepit._files import remove_temporaries
from sweepit._host import now_iso
from sweepit.errors import ConfigError
from sweepit.local._capture import STDERR_LOG, tail_lines
from sweepit.local._pool import Job
from sweepit.results import (
    JobRecord,
    LiveReader,
    Manifest,
    Progress,
    Recorder,
    State,
    Status,
    as_number,
    failure_report,
    is_finished,
    read_record,
    record_failure,
    start_clean,
    sweep_eta_s,
    write_manifest,
    write_result,
)

_LOOK_S = 1.0  # how often the running jobs' metrics are read for the ETA


def describe_exit(exit_code: int | None, stopped: bool) -> str:
    """How a job process ended, for a job that did not report a result."""
    if exit_code is None:
        return "ended without an exit status"
    if exit_code < 0:
        name = signal.Signals(-exit_code).name
        hint = ""
        if name == "SIGKILL" and not stopped:
            hint = " (the kernel's out-of-memory killer sends SIGKILL: check the job's memory)"
        return f"died from signal {name}{hint}"
    return f"exited with code {exit_code} before reporting a result (os._exit, or a crash in native code)"


class SweepRun:
    """Implements the pool's hooks for one `launch()`; `statuses` holds the outcome of each job it ran."""

    def __init__(self, manifest: Manifest, progress: Progress, compose: Callable[[Job], None], resume: bool,
                 check: Callable[[Job], None], stderr_tail_lines: int,
                 heartbeat: Callable[[], None] = lambda: None,
                 release: Callable[[Job], None] = lambda job: None) -> None:
        self.manifest = manifest
        self.progress = progress
        self.compose = compose            # fills in the job's config, job_dir and n_gpus
        self.release = release            # drops what the driver no longer needs of an ended job
        self.resume = resume
        self.check = check                # raises ConfigError for a job that cannot run here
        self.stderr_tail_lines = stderr_tail_lines
        self.heartbeat = heartbeat          # keeps the sweep lock fresh (called at every wake-up)
        self.statuses: dict[int, str] = {}
        self.skipped: set[int] = set()
        self._started_at: dict[int, str] = {}
        self._live = LiveReader()           # running jobs' epochs, for an ETA before the first job ends
        self._looked = 0.0

    def prepare(self, job: Job) -> bool:
        self.compose(job)
        entry = self.manifest.jobs[job.num]
        entry.job_dir = str(job.job_dir)
        if self.resume and is_finished(job.job_dir):
            entry.state = read_record(job.job_dir).status or Status.COMPLETED
            write_manifest(self.manifest, [job.num])
            self.skipped.add(job.num)
            self.progress.skip()
            return False
        try:
            self.check(job)
        except ConfigError as e:
            self.statuses[job.num] = entry.state = record_failure(job.job_dir, str(e), Recorder.LOCAL)
            write_manifest(self.manifest, [job.num])
            self.progress.start()
            self.progress.finish(job.num, Status.FAILED, None)
            return False
        return True

    def before_fork(self, job: Job) -> None:
        # A rerun (resume) starts clean: a stale failed result must not stand for this attempt.
        start_clean(job.job_dir)

    def started(self, job: Job) -> None:
        entry = self.manifest.jobs[job.num]
        entry.state, entry.pid = State.RUNNING, job.pid
        entry.started_at = self._started_at[job.num] = now_iso()
        entry.ended_at = None
        entry.extra = {"gpus": job.gpus} if job.gpus else {}
        write_manifest(self.manifest, [job.num])
        self.progress.start()

    def ended(self, job: Job) -> None:
        remove_temporaries(job.job_dir)  # of writes the job's death cut short (its processes are gone)
        # The job's own result.json is kept; one is written for a job that left none.
        status = record_end(job, self._started_at.get(job.num), self.stderr_tail_lines, Recorder.LOCAL)
        self.release(job)
        self.statuses[job.num] = status
        entry = self.manifest.jobs[job.num]
        entry.state, entry.ended_at = status, now_iso()
        entry.extra["exit_code"] = job.exit_code
        write_manifest(self.manifest, [job.num])
        self.progress.finish(job.num, status, job.wall_time_s)

    def tick(self) -> None:
        if self.progress.done == 0 and time.monotonic() - self._looked >= _LOOK_S:
            self._looked = time.monotonic()
            running = [self._live.look(Path(e.job_dir)) for e in self.manifest.jobs.values()
                       if e.state == State.RUNNING and e.job_dir]
            self.progress.early_eta(sweep_eta_s(running, self.progress.queued, max(1, self.progress.running)))
        self.progress.draw()
        self.heartbeat()

    def before_echo(self) -> None:
        self.progress.clear()

    def failure_report(self, jobs: list[Job], stop_signal: int | None, fail_on_error: bool) -> str | None:
        """The message of the error that ends a sweep with failures, or None when it ends cleanly."""
        return failure_report(self.manifest, jobs, self.statuses, self.skipped, stop_signal, fail_on_error)


def record_end(job: Job, started_at: str | None, stderr_tail_lines: int, recorded_by: Recorder) -> str:
    """How a forked job ended, as its status; writes `result.json` when the job left none (its own one is kept as
    it is, with the tail of its stderr added to a failure its session recorded). The local launcher's driver and a
    packed Slurm worker (sweepit.slurm._pack_worker) both record their jobs with it."""
    reply = job.reply
    facts: dict[str, Any] = {key: str(value) for key in ("metric", "direction")
                             if (value := OmegaConf.select(job.config, key, default=None)) is not None}
    if reply is not None and reply.status == Status.COMPLETED:
        # An app that does not write result.json itself (not sweepit's train.py): record its return value.
        status, facts["objective"] = Status.COMPLETED, as_number(reply.value)
    elif job.stopped or (reply is not None and reply.status == Status.INTERRUPTED):
        status, facts["error"] = Status.INTERRUPTED, reply.error if reply else "stopped by the sweep driver"
    elif reply is not None:
        status = Status.FAILED
        facts.update(error=reply.error, traceback=reply.traceback)
    else:
        status, facts["error"] = Status.FAILED, describe_exit(job.exit_code, job.stopped)
    if reply is None and job.exit_code is not None and job.exit_code < 0:
        facts["exit_signal"] = signal.Signals(-job.exit_code).name
    elif reply is None:
        facts["exit_code"] = job.exit_code
    record = JobRecord.of(status, recorded_by, hostname=socket.gethostname(), pid=job.pid,
                          wall_time_s=job.wall_time_s, started_at=started_at, ended_at=now_iso(), **facts)
    return write_result(job.job_dir, record, replace=False,
                        stderr_tail=lambda: tail_lines(job.job_dir / STDERR_LOG, stderr_tail_lines))
