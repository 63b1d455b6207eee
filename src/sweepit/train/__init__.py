"""The training loop and the API a training function calls: report metrics, stop when pruned, checkpoint.
`run_job` imports torch, so it loads on first use: `import sweepit` stays light."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sweepit.train._api import JobContext, context, load_checkpoint, report, save_checkpoint, should_stop
from sweepit.train._checkpoint import read_state
from sweepit.train._devices import FORKED_AFTER_CUDA, forget_device_count, forked_after_cuda
from sweepit.train._session import Session, leave_process_group, status_of
from sweepit.train._session import begin as begin_session
from sweepit.train._session import end as end_session
from sweepit.train._session import join as join_session

if TYPE_CHECKING:
    from sweepit.train._build import load_data
    from sweepit.train._checks import check_config
    from sweepit.train._entry import run_job
    from sweepit.train._loop import load_model

__all__ = [
    "FORKED_AFTER_CUDA", "JobContext", "Session", "begin_session", "check_config", "context", "end_session",
    "forget_device_count",
    "forked_after_cuda", "join_session", "leave_process_group", "load_checkpoint", "load_data", "load_model",
    "read_state", "report", "run_job", "save_checkpoint", "should_stop", "status_of"
]


def __getattr__(name: str) -> Any:
    if name == "run_job":
        from sweepit.train._entry import run_job

        return run_job
    if name == "load_model":  # a trained job's model and data, for `sweepit.load`
        from sweepit.train._loop import load_model

        return load_model
    if name == "check_config":  # what sweepit's own loop checks before it trains; a sweep checks its jobs' values
        from sweepit.train._checks import check_config

        return check_config
    if name == "load_data":
        from sweepit.train._build import load_data

        return load_data
    raise AttributeError(f"module 'sweepit.train' has no attribute {name!r}")
