"""Hydra entry point: `python train.py` trains once; `python train.py -m optimizer=adam,sgd lr=0.01,0.1` sweeps."""

from __future__ import annotations

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from sweepit.train import run_job


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """Train one configuration in its Hydra output directory and return the objective to the sweeper
    (under the Optuna sweeper, each epoch's metric also goes to the job's trial, which may prune it)."""
    return run_job(cfg, Path(HydraConfig.get().runtime.output_dir))


if __name__ == "__main__":
    main()
