"""A plain Hydra app that has never heard of sweepit: no sweepit import, no `metric` or `direction` key, and
no result.json; it returns a float, which the launcher records as the objective."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    return float(cfg.x) + 0.1 * float(cfg.y)


if __name__ == "__main__":
    main()
