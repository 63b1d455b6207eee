"""Submission: one sbatch call per job array (the jobs of one shape, at most MaxArraySize of them), each array
in a fresh submitit folder `<sweep dir>/.submitit/NNNN/`, never reused: job ids restart at 1 after a
cluster's cold start, and submitit names its files by job id.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from sweepit.local._capture import STDERR_LOG, STDOUT_LOG
from sweepit.slurm._cluster import SlurmError
from sweepit.slurm._shape import Shape, submitit_command

SUBMITIT_DIR = ".submitit"


@dataclass
class PlannedJob:
    num: int
    overrides: list[str]
    config: DictConfig               # the composed job config (hydra node included)
    job_dir: Path
    shape: Shape


def arrays(jobs: list[PlannedJob], max_array_size: int) -> list[list[PlannedJob]]:
    """Jobs of the same shape together, in job order, cut at `max_array_size`."""
    groups: dict[Shape, list[PlannedJob]] = {}
    for job in jobs:
        groups.setdefault(job.shape, []).append(job)
    return [group[i:i + max_array_size] for group in groups.values() for i in range(0, len(group), max_array_size)]


def next_folder(sweep_dir: Path, offset: int = 0) -> Path:
    root = sweep_dir / SUBMITIT_DIR
    used = [int(p.name) for p in root.iterdir() if p.name.isdigit()] if root.is_dir() else []
    return root / f"{max(used, default=0) + 1 + offset:04d}"


def fresh_folder(sweep_dir: Path) -> Path:
    """A submitit folder no submission has used."""
    while True:
        folder = next_folder(sweep_dir)
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue  # another driver took it a moment ago


def sbatch_script(params: dict[str, Any], folder: Path, n_jobs: int, python: str | None) -> str:
    """The sbatch script submitit writes for these parameters (an array when n_jobs > 1)."""
    from submitit.slurm.slurm import _make_sbatch_string

    return str(_make_sbatch_string(command=submitit_command(python, str(folder)), folder=folder,
                                   map_count=n_jobs if n_jobs > 1 else None, **params))


def submit(tasks: Sequence[Callable[[], Any]], params: dict[str, Any], folder: Path, max_num_timeout: int,
           python: str | None) -> list[str]:
    """Submit `tasks` with one sbatch call (an array of them, or one job); their Slurm job ids in order."""
    import submitit

    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=max_num_timeout, python=python)
    executor.update_parameters(**params)
    try:
        jobs = executor.submit_array(tasks)
    except Exception as e:  # submitit's FailedJobError carries sbatch's own message
        said = str(e).strip().replace("\n", " ")[-800:]
        raise SlurmError(f"sbatch must accept the jobs, but refused them: {said}. Check the hydra.launcher values it "
                         f"names (partition, account, qos, ...); the script is in {folder}.") from e
    return [str(j.job_id) for j in jobs]


def log_paths(folder: Path, job_id: str) -> tuple[Path, Path]:
    """stdout and stderr of the job's first task (rank 0), as submitit names them."""
    from submitit.core.utils import JobPaths

    paths = JobPaths(folder, job_id=job_id, task_id=0)
    return paths.stdout, paths.stderr


def link_logs(job_dir: Path, stdout: Path, stderr: Path) -> None:
    """`stdout.log` and `stderr.log` in the job directory point at the Slurm logs, as the local launcher's
    files are there (relative links, so that the sweep directory can move)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    for name, target in ((STDOUT_LOG, stdout), (STDERR_LOG, stderr)):
        link = job_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(target, job_dir))
