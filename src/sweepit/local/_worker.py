"""The job side of a fork: detach from the terminal's signals, take the output pipes, run the Hydra job, reply.

Everything here runs in the forked child. The driver has Hydra, the app and the preloaded modules in
memory already, so a job starts in milliseconds instead of paying the imports again.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import pickle
import signal
import sys
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any

from hydra.core.utils import JobStatus, run_job
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

_PR_SET_PDEATHSIG = 1


@dataclass
class Reply:
    """What a job sends back before it exits. A job that dies first sends nothing: the driver looks at how."""

    status: str                      # completed | failed | interrupted
    value: Any = None                # the task function's return value (the objective), when picklable
    error: str = ""                  # `Type: message` of what the job raised
    traceback: str = ""
    working_dir: str | None = None
    task_name: str | None = None


@dataclass
class ChildSpec:
    config: DictConfig               # the job's sweep config (hydra.job.num set)
    stdout_fd: int
    stderr_fd: int
    env: dict[str, str]              # CUDA_VISIBLE_DEVICES, thread counts
    threads: int                     # torch CPU threads
    close_fds: list[int]             # the driver's descriptors the job must not keep open
    parent_pid: int


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # sweepit.train._job records a KeyboardInterrupt as `interrupted`, with the epochs done so far.
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def _die_with(parent_pid: int) -> None:
    """Ask Linux to SIGTERM this job if the driver dies (even by SIGKILL), so no job outlives its sweep."""
    if sys.platform != "linux":
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the driver died before the request was in place
        os._exit(1)


def _detach(spec: ChildSpec) -> None:
    # Own process group: the terminal's Ctrl-C reaches only the driver, which stops jobs in order, and the
    # driver can signal a job together with any process it started.
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    _die_with(spec.parent_pid)
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
    _reseed()
    if spec.threads > 0 and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(spec.threads)


def _reseed() -> None:
    """Fresh random state: every fork starts from the driver's, so jobs that do not seed would draw the same
    numbers. (Python's `random` reseeds itself after a fork; a job that seeds itself is not affected.)"""
    if "torch" in sys.modules:
        sys.modules["torch"].default_generator.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


def picklable(value: Any) -> Any:
    """`value` when it pickles (to go back to the driver), else its repr."""
    try:
        pickle.dumps(value)
    except Exception:
        return repr(value)
    return value


def _failure(status: str, e: BaseException) -> Reply:
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    sys.stderr.write(f"Error executing job: {tb}")
    return Reply(status=status, error=f"{type(e).__name__}: {e}", traceback=tb)


def child_main(spec: ChildSpec, conn: Connection, hydra_context: HydraContext, task: TaskFunction) -> None:
    """Target of the forked process."""
    _detach(spec)
    try:
        ret = run_job(hydra_context=hydra_context, task_function=task, config=spec.config,
                      job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
        if ret.status == JobStatus.COMPLETED:
            reply = Reply(status="completed", value=picklable(ret.return_value))
        else:
            exc = ret._return_value
            reply = _failure("failed", exc if isinstance(exc, BaseException) else RuntimeError(repr(exc)))
        reply.working_dir, reply.task_name = ret.working_dir, ret.task_name
    except KeyboardInterrupt as e:
        reply = _failure("interrupted", e)
    except BaseException as e:  # SystemExit and errors in Hydra's own job set-up
        reply = _failure("failed", e)
    sys.stdout.flush()
    sys.stderr.flush()
    # If the driver is gone or the reply cannot travel, the driver reads the exit status instead.
    with contextlib.suppress(OSError, pickle.PicklingError):
        conn.send(reply)
