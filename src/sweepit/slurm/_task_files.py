"""Each Slurm task's files in its job's directory, under `.slurm/`: `task-<rank>.json` (where it ran, which GPUs it
saw, the error it failed with) and links to every task's own logs. A job of N tasks that fails in task k ends at once
(srun's `--kill-on-bad-exit`), rank 0 stopped with it: k writes its error here first, so that whoever records the job
(rank 0, or the driver) names k's error rather than rank 0's stop.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import traceback
from pathlib import Path
from typing import Any

from sweepit._files import atomic_write
from sweepit._host import now_iso
from sweepit.results import JobPaths, error_line, start_clean

_TASK_ENV = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID", "SLURM_LOCALID",
             "SLURM_NODEID", "SLURM_NTASKS", "SLURM_STEP_ID", "SLURM_RESTART_COUNT", "CUDA_VISIBLE_DEVICES",
             "SLURM_STEP_GPUS", "SLURM_JOB_NODELIST", "SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS")


def _read(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def record_task(job_dir: Path, rank: int, gpus: list[str] | None = None) -> None:
    """`task-<rank>.json`: this task's Slurm environment (replaced by a requeued run's); `gpus`: those of the
    worker's GPUs a packed job was given."""
    info: dict[str, Any] = {k.lower(): os.environ.get(k) for k in _TASK_ENV}
    if gpus is not None:
        info["cuda_visible_devices"] = ",".join(gpus)
    info.update(hostname=socket.gethostname(), pid=os.getpid(), started_at=now_iso())
    with contextlib.suppress(OSError):
        atomic_write(JobPaths(job_dir).task_file(rank), json.dumps(info, indent=1) + "\n")


def record_task_error(job_dir: Path, rank: int, error: BaseException) -> None:
    """Add the error this task fails with to its record (before it exits, so that it is there for the others)."""
    info = _read(JobPaths(job_dir).task_file(rank))
    info.update(error=f"{type(error).__name__}: {error}", failed_at=now_iso(),
                traceback="".join(traceback.format_exception(type(error), error, error.__traceback__))[-4000:])
    with contextlib.suppress(OSError):
        atomic_write(JobPaths(job_dir).task_file(rank), json.dumps(info, indent=1) + "\n")


def failed_task(job_dir: Path, but: int | None = None) -> tuple[int, str, int] | None:
    """(rank, its error, the job's task count) of the task that failed first (task `but` left out), or None."""
    failed = []
    for path in JobPaths(job_dir).task_files():
        name = path.stem.removeprefix("task-")
        if not name.isdigit() or int(name) == but:
            continue
        info = _read(path)
        if info.get("error"):
            failed.append((str(info.get("failed_at", "")), int(name), str(info["error"]),
                           int(info.get("slurm_ntasks") or 0)))
    if not failed:
        return None
    _, rank, error, n_tasks = min(failed)
    return rank, error, n_tasks


def rank_failure(failed: tuple[int, str, int]) -> str:
    """`rank 1 of 2 failed: RuntimeError: ... (its log: .slurm/task-1.stderr.log)`."""
    rank, error, n_tasks = failed
    return (f"rank {rank}{f' of {n_tasks}' if n_tasks else ''} failed: {error_line(error)} (its log: "
            f"{JobPaths(Path()).task_log(rank, 'stderr')})")


def start_job_dir(job_dir: Path) -> None:
    """A job's run starts without an earlier run's result and task files (its task file says when it started;
    checkpoint.pt is kept to resume)."""
    start_clean(job_dir)
    shutil.rmtree(JobPaths(job_dir).tasks, ignore_errors=True)
    JobPaths(job_dir).not_started.unlink(missing_ok=True)


def relink(link: Path, target: Path) -> None:
    """`link` as a relative symlink to `target` (so that the sweep directory can move), replacing what was there."""
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))


def link_task_logs(job_dir: Path, logs: list[tuple[Path, Path]]) -> None:
    """`task-<k>.stdout.log` and `task-<k>.stderr.log` for every task k of a job of several."""
    if len(logs) < 2:
        return
    JobPaths(job_dir).tasks.mkdir(parents=True, exist_ok=True)
    for rank, (stdout, stderr) in enumerate(logs):
        relink(JobPaths(job_dir).task_log(rank, "stdout"), stdout)
        relink(JobPaths(job_dir).task_log(rank, "stderr"), stderr)
