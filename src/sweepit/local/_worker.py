"""A forked job's end, on both sides: in the child (forked by the fork server, which has the app and preloaded modules
in memory already), detach from the terminal's signals, take the output pipes, run the job and reply; in the driver,
tell how it ended (`end_facts`: for the `result.json` of a job that died without writing one)."""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import pickle
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from sweepit._host import now_iso
from sweepit._signals import interrupt_on_stop_signals, release_stop_signals
from sweepit.local._resources import visible_gpus
from sweepit.results import JobOutcome, JobPaths, JobState, as_number, tail_lines
from sweepit.train import FORKED_AFTER_CUDA, forget_device_count, forked_after_cuda

if TYPE_CHECKING:
    from sweepit.local._forkserver import Job

_PR_SET_PDEATHSIG = 1
RECORDED_KEYS = ("metric", "direction")  # of a job's config, in the record of a job that died without one


@dataclass
class ChildSpec:
    stdout_fd: int
    stderr_fd: int
    env: dict[str, str]              # CUDA_VISIBLE_DEVICES, thread counts
    threads: int                     # torch CPU threads
    close_fds: list[int]             # the fork server's descriptors the job must not keep open
    parent_pid: int                  # the fork server's


def die_with(parent_pid: int, sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send `sig` to this process if its parent dies (even by SIGKILL), so no job outlives its sweep:
    a job gets SIGTERM when its fork server dies, the server SIGKILL when the driver does."""
    if sys.platform != "linux":
        return
    try:  # ctypes is imported with this module, in the driver: no job pays its import
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the request was in place
        os._exit(1)


def _detach(spec: ChildSpec) -> None:
    # Own process group: the terminal's Ctrl-C reaches only the driver, which stops jobs in order, and the
    # driver can signal a job together with any process it started.
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    signal.set_wakeup_fd(-1)
    interrupt_on_stop_signals()  # a KeyboardInterrupt, which a job records as `interrupted`
    die_with(spec.parent_pid)
    for fd in spec.close_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    os.dup2(spec.stdout_fd, 1)
    os.dup2(spec.stderr_fd, 2)
    os.close(spec.stdout_fd)
    os.close(spec.stderr_fd)
    faulthandler.enable()  # a crash in native code leaves the Python stack in stderr.log
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(line_buffering=True)  # a pipe would otherwise hold lines back until 8 KB
    os.environ.update(spec.env)
    if "CUDA_VISIBLE_DEVICES" in spec.env:
        forget_device_count()  # the server's count, cached by torch 2.2-2.3, is not this job's
    # Fresh random state: every fork starts from the server's, so jobs that do not seed would draw the same numbers
    # (Python's `random` reseeds itself after a fork).
    if "torch" in sys.modules:
        sys.modules["torch"].default_generator.seed()
        if spec.threads > 0:
            sys.modules["torch"].set_num_threads(spec.threads)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


def picklable(value: Any) -> Any:
    """`value` when it pickles (to go back to the driver), else its repr."""
    try:
        pickle.dumps(value)
    except Exception:
        return repr(value)
    return value


def failure(status: JobState, e: BaseException) -> JobOutcome:
    """What a job that raised `e` sends back; its traceback also goes to the job's stderr."""
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    sys.stderr.write(f"Error executing job: {tb}")
    return JobOutcome(status, error=f"{type(e).__name__}: {e}", traceback=tb)


def child_main(spec: ChildSpec, conn: Connection, body: Callable[[], JobOutcome]) -> None:
    """Target of the forked process: `body` runs the job and says how it went."""
    _detach(spec)
    try:
        # The fork server forked with the stop signals held: one sent since (a Ctrl-C just as the job started)
        # arrives here, now that it raises KeyboardInterrupt, instead of being lost.
        release_stop_signals()
        if forked_after_cuda() and visible_gpus():  # it would die at its first CUDA call: recorded, not run
            sys.stderr.write(f"sweepit: {FORKED_AFTER_CUDA}\n")
            reply = JobOutcome(JobState.FAILED, error=FORKED_AFTER_CUDA)
        else:
            reply = body()
    except KeyboardInterrupt as e:
        reply = failure(JobState.INTERRUPTED, e)
    except BaseException as e:  # SystemExit, and errors in the body's own set-up
        reply = failure(JobState.FAILED, e)
    sys.stdout.flush()
    sys.stderr.flush()
    # If the driver is gone or the reply cannot travel, the driver reads the exit status instead.
    with contextlib.suppress(OSError, pickle.PicklingError):
        conn.send(reply)


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


def end_facts(job: Job, started_at: str | None, stderr_tail_lines: int
              ) -> tuple[JobState, Callable[[], str], dict[str, Any]]:
    """How a forked job ended, as its status, the tail of its stderr for a failure, and the facts of sweepit's record
    of it (`sweepit.results.record_end`, written when the job left none). The local driver and sweepit.slurm's worker
    engine both use it."""
    reply = job.reply
    facts: dict[str, Any] = dict(job.facts)
    if reply is not None and reply.status == JobState.COMPLETED:
        # An app that does not write result.json itself (not sweepit's train.py): record its return value.
        status, facts["objective"] = JobState.COMPLETED, as_number(reply.returned)
    elif job.stopped or (reply is not None and reply.status == JobState.INTERRUPTED):
        status, facts["error"] = JobState.INTERRUPTED, reply.error if reply else "stopped by the sweep driver"
    elif reply is not None:
        status = JobState.FAILED
        facts.update(error=reply.error, traceback=reply.traceback)
    else:
        status, facts["error"] = JobState.FAILED, describe_exit(job.exit_code, job.stopped)
    if reply is None and job.exit_code is not None and job.exit_code < 0:
        facts["exit_signal"] = signal.Signals(-job.exit_code).name
    elif reply is None:
        facts["exit_code"] = job.exit_code
    facts.update(hostname=socket.gethostname(), pid=job.pid, wall_time_s=job.wall_time_s, started_at=started_at,
                 ended_at=now_iso())
    return status, partial(tail_lines, JobPaths(job.job_dir).stderr, stderr_tail_lines), facts
