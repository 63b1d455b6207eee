"""How a forked job ended, as its record: `result.json` for a job that died without writing one."""

from __future__ import annotations

import signal
import socket
from typing import Any

from omegaconf import OmegaConf

from sweepit._host import now_iso
from sweepit.local._pool import Job
from sweepit.results import STDERR_LOG, JobRecord, Recorder, Status, as_number, tail_lines, write_result


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
