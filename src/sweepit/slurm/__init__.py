"""Slurm sweeps (the engine of hydra/launcher=slurm): each job's request, job arrays through submitit, the drivers
that follow them in squeue/sacct, and the worker engine of packed grids and Optuna workers.

    sweep = SlurmSweep(SlurmOptions.from_params(params), sweep_dir, plan_job=dir_and_values, make_task=task)
    outcomes = sweep.run([PlannedJob(num=0, overrides=["lr=0.1"]), ...])
"""

from __future__ import annotations

from sweepit.slurm._budget import END_SETTLE_S, budget_line
from sweepit.slurm._engine import Engine, worker_id
from sweepit.slurm._job_states import PACKED, refresh, settle_unclaimed, slurm_id, workers_alive
from sweepit.slurm._optuna_workers import WorkerSweep, adopt_trials
from sweepit.slurm._pack_worker import PackedWorker, PackSpec
from sweepit.slurm._place import ClusterFacts
from sweepit.slurm._plan import PlannedJob
from sweepit.slurm._request import SlurmOptions
from sweepit.slurm._slurm_sweep import SlurmSweep, check_one_by_one
from sweepit.slurm._task_files import failed_task, rank_failure, record_task, record_task_error

__all__ = [
    "END_SETTLE_S", "PACKED", "ClusterFacts", "Engine", "PackSpec", "PackedWorker", "PlannedJob", "SlurmOptions",
    "SlurmSweep", "WorkerSweep", "adopt_trials", "budget_line", "check_one_by_one", "failed_task", "rank_failure",
    "record_task", "record_task_error", "refresh", "settle_unclaimed", "slurm_id", "worker_id", "workers_alive"
]
