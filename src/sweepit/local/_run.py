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
    FAILED_STATUSES,
    LiveReader,
    Manifest,
    Progress,
    failure_report,
    has_result,
    is_finished,
    read_record,
    result_status,
    start_clean,
    sweep_eta_s,
    write_manifest,
    write_result,
    write_result_if_absent,
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


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


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
            entry.state = result_status(job.job_dir) or "completed"
            write_manifest(self.manifest, [job.num])
            self.skipped.add(job.num)
            self.progress.skip()
            return False
        try:
            self.check(job)
        except ConfigError as e:
            write_result(job.job_dir, {"status": "failed", "objective": None, "error": str(e),
                                       "recorded_by": "sweepit local launcher", "ended_at": now_iso()})
            self.statuses[job.num] = entry.state = "failed"
            write_manifest(self.manifest, [job.num])
            self.progress.start()
            self.progress.finish(job.num, "failed", None)
            return False
        return True

    def before_fork(self, job: Job) -> None:
        # A rerun (resume) starts clean: a stale failed result must not stand for this attempt.
        start_clean(job.job_dir)

    def started(self, job: Job) -> None:
        entry = self.manifest.jobs[job.num]
        entry.state, entry.pid = "running", job.pid
        entry.started_at = self._started_at[job.num] = now_iso()
        entry.ended_at = None
        entry.extra = {"gpus": job.gpus} if job.gpus else {}
        write_manifest(self.manifest, [job.num])
        self.progress.start()

    def ended(self, job: Job) -> None:
        remove_temporaries(job.job_dir)  # of writes the job's death cut short (its processes are gone)
        status = self.record(job)
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
                       if e.state == "running" and e.job_dir]
            self.progress.early_eta(sweep_eta_s(running, self.progress.queued, max(1, self.progress.running)))
        self.progress.draw()
        self.heartbeat()

    def before_echo(self) -> None:
        self.progress.clear()

    def record(self, job: Job) -> str:
        """The job's status; writes `result.json` when the job left none (its own one is kept as it is)."""
        return record_end(job, self._started_at.get(job.num), self.stderr_tail_lines, "sweepit local launcher")

    def failure_report(self, jobs: list[Job], stop_signal: int | None, fail_on_error: bool) -> str | None:
        """The message of the error that ends a sweep with failures, or None when it ends cleanly."""
        return failure_report(self.manifest, jobs, self.statuses, self.skipped, stop_signal, fail_on_error)


def record_end(job: Job, started_at: str | None, stderr_tail_lines: int, recorded_by: str) -> str:
    """How a forked job ended, as its status; writes `result.json` when the job left none (its own one is kept as
    it is, with the tail of its stderr added to a failure its session recorded). The local launcher's driver and a
    packed Slurm worker (sweepit.slurm._pack_worker) both record their jobs with it."""
    own = read_record(job.job_dir).result or None  # unreadable: the driver's record of the job's end replaces it
    if own is not None and "status" in own:
        if own["status"] in FAILED_STATUSES and own.get("recorded_by") == "sweepit" and "stderr_tail" not in own:
            # Recorded by the job's own session (error and traceback): the driver adds what it alone knows.
            own["stderr_tail"] = tail_lines(job.job_dir / STDERR_LOG, stderr_tail_lines)
            write_result(job.job_dir, own)
        return str(own["status"])
    reply = job.reply
    result: dict[str, Any] = {
        "objective": None, "hostname": socket.gethostname(), "pid": job.pid, "wall_time_s": job.wall_time_s,
        "started_at": started_at, "ended_at": now_iso(), "recorded_by": recorded_by,
    }
    for key in ("metric", "direction"):
        value = OmegaConf.select(job.config, key, default=None)
        if value is not None:
            result[key] = str(value)
    if reply is not None and reply.status == "completed":
        # An app that does not write result.json itself (not sweepit's train.py): record its return value.
        result.update(status="completed", objective=_number(reply.value))
        return _write(job, result)
    if job.stopped or (reply is not None and reply.status == "interrupted"):
        result.update(status="interrupted", error=reply.error if reply else "stopped by the sweep driver")
    elif reply is not None:
        result.update(status="failed", error=reply.error, traceback=reply.traceback)
    else:
        result.update(status="failed", error=describe_exit(job.exit_code, job.stopped))
    if reply is None and job.exit_code is not None and job.exit_code < 0:
        result["exit_signal"] = signal.Signals(-job.exit_code).name
    elif reply is None:
        result["exit_code"] = job.exit_code
    result["stderr_tail"] = tail_lines(job.job_dir / STDERR_LOG, stderr_tail_lines)
    return _write(job, result)


def _write(job: Job, result: dict[str, Any]) -> str:
    """Record how a job that left no readable result ended; return its status. A result of the job's own
    that appears meanwhile (from a process of the job that outlived it) is kept, and its status returned."""
    if has_result(job.job_dir):
        write_result(job.job_dir, result)  # unreadable: what the driver knows replaces it
    elif not write_result_if_absent(job.job_dir, result):
        return result_status(job.job_dir) or str(result["status"])
    return str(result["status"])
