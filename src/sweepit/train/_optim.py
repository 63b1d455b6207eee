"""Builds a torch optimizer from the `optimizer` config group and the top-level `lr`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from sweepit.errors import ConfigError

ALGORITHMS = ("SGD", "Adagrad", "RMSprop", "Adam", "AdamW", "Adamax", "Adadelta", "NAdam")


def build_optimizer(
    params: Iterable[torch.nn.Parameter], optimizer_cfg: Any, lr: float
) -> torch.optim.Optimizer:
    algorithm = optimizer_cfg["algorithm"]
    if algorithm not in ALGORITHMS:
        raise ConfigError(
            f"optimizer.algorithm must be one of {', '.join(ALGORITHMS)}, but got {algorithm!r}."
        )
    kwargs = dict(optimizer_cfg.get("kwargs") or {})
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    cls = getattr(torch.optim, algorithm)
    try:
        return cls(params, lr=lr, **kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"optimizer {optimizer_cfg['name']} rejects its settings {kwargs}: {e}") from e
