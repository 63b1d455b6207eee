"""`sweepit.train.run_job` as an app imports it: sweepit's own training job, which imports torch only when it runs.

An app built on it (train.py) then starts without torch wherever it does not train: `--help`, `--cfg`, a refused
override, the driver of a Slurm sweep. That an app imported it tells the local launcher to warm
torch before it forks jobs all the same (sweepit.local._local_sweep.preload).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sweepit.train._loop import EpochCallback


def run_job(cfg: Any, job_dir: Path, on_epoch: EpochCallback | None = None) -> float:
    """Train one configuration in `job_dir` with sweepit's own loop (sweepit.train._job.run_job), return the
    objective."""
    from sweepit.train._job import run_job as run

    return run(cfg, job_dir, on_epoch)
