"""A plain Hydra app in Optuna's own habit: it raises optuna.TrialPruned for x < 0 (no sweepit import)."""

from __future__ import annotations

import hydra
import optuna
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    if cfg.x < 0:
        raise optuna.TrialPruned(f"x={cfg.x} is not worth training")
    return float(cfg.x) + 0.1 * float(cfg.y)


if __name__ == "__main__":
    main()
