"""A Hydra app whose every job does a fixed amount of work and nothing else: `work_s` seconds of sleep (the
benchmark measures what a launcher adds around a job, so the job itself must not compete for the cores). No torch,
no sweepit import: any Hydra app a user brings."""

from __future__ import annotations

import time

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path=None, config_name=None)
def main(cfg: DictConfig) -> float:
    time.sleep(float(cfg.get("work_s", 0.1)))
    return float(cfg.get("x", 0))


if __name__ == "__main__":
    main()
