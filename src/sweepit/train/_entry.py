"""`sweepit.train.run_job` as an app imports it, without torch until it runs (`--help`, a Slurm sweep's driver); that
an app imported this module tells the local launcher to warm torch before it forks jobs (TORCH_APP)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sweepit.train._loop import EpochCallback


def run_job(cfg: Any, job_dir: Path, on_epoch: EpochCallback | None = None) -> float:
    """sweepit.train._job.run_job: train one configuration in `job_dir`, return the objective."""
    from sweepit.train._job import run_job as run

    return run(cfg, job_dir, on_epoch)
