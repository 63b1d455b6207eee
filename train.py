"""Hydra entry point: `python train.py` trains once; `python train.py -m optimizer=adam,sgd lr=0.01,0.1` sweeps."""

from __future__ import annotations

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from omegaconf import DictConfig

from sweepit import SweepitError
from sweepit.train import run_job


class JobError(SweepitError, CompactHydraException):
    """A mistake of the user's (a bad value, missing data): Hydra prints the message alone, without a traceback
    (set HYDRA_FULL_ERROR=1 for it). The job's result.json holds the error either way."""


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """Train one configuration in its Hydra output directory and return the objective to the sweeper
    (under the Optuna sweeper, each epoch's metric also goes to the job's trial, which may prune it)."""
    try:
        return run_job(cfg, Path(HydraConfig.get().runtime.output_dir))
    except SweepitError as e:
        raise JobError(f"sweepit: {e}") from None


if __name__ == "__main__":
    main()
