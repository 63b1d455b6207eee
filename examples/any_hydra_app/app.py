"""Any Hydra app, one that has never heard of sweepit: sweepit's launchers and sweeper run it as Hydra's own do.

    python examples/any_hydra_app/app.py -m x=-1,0,1 y=0,2                                   # local workers
    python examples/any_hydra_app/app.py -m x=-1,0,1 y=0,2 hydra/launcher=slurm              # Slurm jobs
    python examples/any_hydra_app/app.py -m hydra/sweeper=optuna 'x=interval(-2, 2)' 'y=range(0, 4)' \
        hydra.sweeper.n_trials=12 hydra.sweeper.direction=minimize                            # Optuna
"""

from __future__ import annotations

import math

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    """A bowl with its lowest point at x=0.5, y=1: the value a sweeper minimizes."""
    value = (cfg.x - 0.5) ** 2 + (cfg.y - 1) ** 2 + 0.1 * math.sin(5 * cfg.x)
    print(f"x={cfg.x} y={cfg.y} -> {value:.4f}")
    return value


if __name__ == "__main__":
    main()
