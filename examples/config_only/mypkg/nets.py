"""The model: any nn.Module. sweepit passes `input_shape` and `n_outputs` because the constructor takes them."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class StripeNet(nn.Module):
    def __init__(self, input_shape: Sequence[int], n_outputs: int, width: int = 16, dropout: float = 0.0) -> None:
        super().__init__()
        channels = int(input_shape[0])
        self.body = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Dropout(dropout), nn.Linear(width, n_outputs),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)
