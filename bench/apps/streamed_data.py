"""A data set that streams (`data._target_=streamed_data.make`): map-style torch Datasets read item by item by the
loader's worker processes, as data too large for memory is. bench/gpu_check.py's `streamed` probe trains on it."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class Blobs(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Gaussian blobs of 4 classes and 16 features, made from `seed`."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.x = torch.randn(n, 16, generator=g) + 2.0 * torch.nn.functional.one_hot(self.y, 16).float()

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def make(n: int = 2048) -> tuple[Blobs, Blobs]:
    return Blobs(n, 0), Blobs(n // 4, 1)
