"""Points from a known line y = W x + b with Gaussian noise: the courses' first exercise."""

from __future__ import annotations

from typing import Any

import torch

from sweepit.train.data import Splits


def generate(data_cfg: Any, seed: int, true_w: float = 2.0, true_b: float = 1.0, noise_std: float = 0.1) -> Splits:
    g = torch.Generator().manual_seed(seed)
    n = int(data_cfg.n_synthetic)
    x = torch.rand(n, 1, generator=g) * 2 - 1
    y = true_w * x + true_b + noise_std * torch.randn(n, 1, generator=g)
    n_val = max(1, int(n * float(data_cfg.val_fraction or 0.2)))
    return Splits(x[n_val:], y[n_val:], x[:n_val], y[:n_val], n_classes=0,
                  source=f"{n} points from y = {true_w} x + {true_b} + N(0, {noise_std}^2)")
