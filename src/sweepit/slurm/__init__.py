"""Slurm sweeps: each job's request, job arrays through submitit, following squeue/sacct (the engine of
hydra/launcher=slurm).

    sweep = SlurmSweep(SlurmOptions.from_params(params), sweep_dir, compose=fill_in_config_and_dir, make_task=task)
    outcomes = sweep.run([PlannedJob(num=0, overrides=["lr=0.1"]), ...])

`sweepit status DIR` reads a sweep's state through `status_report`.
"""

from __future__ import annotations

from sweepit.errors import SlurmError
from sweepit.slurm._engine import Engine, worker_id
from sweepit.slurm._optuna_workers import WorkerSweep
from sweepit.slurm._pack_worker import PackedWorker, PackSpec
from sweepit.slurm._request import ClusterFacts, Request, SlurmOptions
from sweepit.slurm._slurm_sweep import Outcome, SlurmSweep, check_one_by_one
from sweepit.slurm._status import report_is_current, status_report, sweep_status
from sweepit.slurm._submit import PlannedJob
from sweepit.slurm._task_files import failed_task, rank_failure, record_task, record_task_error

__all__ = [
    "ClusterFacts", "Engine", "Outcome", "PackSpec", "PackedWorker", "PlannedJob", "Request", "SlurmError",
    "SlurmOptions", "SlurmSweep", "WorkerSweep", "check_one_by_one", "failed_task", "rank_failure", "record_task",
    "record_task_error", "report_is_current", "status_report", "sweep_status", "worker_id"
]
