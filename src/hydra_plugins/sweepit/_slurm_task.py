"""What each task of a Slurm job runs (pickled by submitit): the Hydra job, in the directory the driver chose.

Every task (one per GPU) runs the same callable; the training code finds its rank in SLURM_PROCID and
friends, and only rank 0 writes the job's files. Each task also leaves `.slurm/task-<rank>.json` in the
job directory: where it ran and which GPUs it saw, for debugging a placement.

Time limits and preemption: Slurm sends USR2 `signal_delay_s` before the limit (or on preemption);
submitit then calls `checkpoint()` on rank 0, requeues the job and exits. The requeued job runs this same
callable in the same directory, and training resumes from the last epoch in `checkpoint.pt`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import traceback
from pathlib import Path
from typing import Any

from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict, read_write

from sweepit.local._worker import picklable
from sweepit.results._job_files import RESULT_FILE, atomic_write_text, read_result, write_result
from sweepit.results._manifest import now_iso

TASK_DIR = ".slurm"  # inside the job directory
_TASK_ENV = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID", "SLURM_LOCALID",
             "SLURM_NODEID", "SLURM_NTASKS", "SLURM_STEP_ID", "SLURM_RESTART_COUNT", "CUDA_VISIBLE_DEVICES",
             "SLURM_STEP_GPUS", "SLURM_JOB_NODELIST", "SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS")


class SlurmTask:
    def __init__(self, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig,
                 singleton_state: dict[Any, Any], job_dir: str) -> None:
        self.hydra_context = hydra_context
        self.task_function = task_function
        self.config = config
        self.singleton_state = singleton_state
        self.job_dir = job_dir
        self._requeueing = False
        self._finished = False

    def __call__(self) -> Any:
        from hydra.core.singleton import Singleton
        from hydra.core.utils import JobStatus, run_job, setup_globals

        self._requeueing = self._finished = False  # this object comes back from the checkpoint pickle
        job_dir = Path(self.job_dir)
        rank = int(os.environ.get("SLURM_PROCID", "0"))
        # A copy: set_state adds the Plugins singleton to the dict it is given, and this object is pickled again
        # on requeue, where plugin classes must not travel.
        Singleton.set_state({**self.singleton_state, "instances": dict(self.singleton_state["instances"])})
        setup_globals()
        record_task(job_dir, rank)
        config = self.config
        if rank != 0:  # one copy of .hydra/ and of the job's log file, written by rank 0
            with read_write(config.hydra), open_dict(config.hydra):
                config.hydra.output_subdir = None
        try:
            ret = run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=config,
                          job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir",
                          configure_logging=rank == 0)
        except BaseException:
            if self._requeueing and rank == 0:
                # The result says `failed` with the SystemExit that submitit raises to stop this run; the job is
                # requeued and carries on, so that result is not the job's.
                (job_dir / RESULT_FILE).unlink(missing_ok=True)
            raise
        self._finished = True
        if ret.status == JobStatus.FAILED:
            error = ret._return_value
            if rank == 0:
                _write_own_result(job_dir, "failed", None, error)
            raise error if isinstance(error, BaseException) else RuntimeError(repr(error))
        if rank == 0:
            _write_own_result(job_dir, "completed", ret.return_value, None)
        return picklable(ret.return_value)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Called by submitit on rank 0 when USR2 arrives: the same job again, unless it has just finished."""
        import submitit

        if self._finished:
            return None  # its result is written; submitit then ends it instead of requeuing
        self._requeueing = True
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def record_task(job_dir: Path, rank: int) -> None:
    """`.slurm/task-<rank>.json`: this task's Slurm environment (overwritten by a requeued run)."""
    info: dict[str, Any] = {k.lower(): os.environ.get(k) for k in _TASK_ENV}
    info.update(hostname=socket.gethostname(), pid=os.getpid(), started_at=now_iso())
    with contextlib.suppress(OSError):
        atomic_write_text(job_dir / TASK_DIR / f"task-{rank}.json", json.dumps(info, indent=1) + "\n")


def _write_own_result(job_dir: Path, status: str, value: Any, error: Any) -> None:
    """For apps that do not write result.json themselves (sweepit's train.py does): record the outcome."""
    try:
        if read_result(job_dir) is not None:
            return
    except ValueError:
        pass
    result: dict[str, Any] = {"status": status, "objective": value if isinstance(value, int | float) else None,
                              "ended_at": now_iso(), "recorded_by": "sweepit slurm task"}
    if isinstance(error, BaseException):
        result["error"] = f"{type(error).__name__}: {error}"
        result["traceback"] = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    write_result(job_dir, result)
