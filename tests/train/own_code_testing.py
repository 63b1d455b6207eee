"""A user's own code as the tests bring it: models and data functions named by `_target_` in a config."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset


class TwoLayerMLP(nn.Module):
    """Takes what sweepit fills in (input_shape, n_outputs) and its own knob (width)."""

    def __init__(self, input_shape: Sequence[int], n_outputs: int, width: int = 32) -> None:
        super().__init__()
        n_in = 1
        for d in input_shape:
            n_in *= int(d)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(n_in, width), nn.ReLU(), nn.Linear(width, n_outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def five_outputs(input_shape: Sequence[int], n_outputs: int) -> nn.Module:
    """A model with the wrong output size, whatever the data."""
    return nn.Sequential(nn.Flatten(), nn.Linear(int(torch.tensor(input_shape).prod()), 5))


def _blobs(n: int, n_classes: int, n_features: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(n_classes, n_features, generator=g) * 3
    y = torch.arange(n) % n_classes
    return centres[y] + torch.randn(n, n_features, generator=g), y


def blobs(n: int = 600, n_classes: int = 3, n_features: int = 5, seed: int = 0
          ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """Gaussian blobs as in-memory tensors: (train, val)."""
    x, y = _blobs(n, n_classes, n_features, seed)
    cut = n * 4 // 5
    return (x[:cut], y[:cut]), (x[cut:], y[cut:])


def regression(n: int = 400, seed: int = 0) -> dict[str, object]:
    """Float targets of shape (N,), no validation split: sweepit holds out data.val_fraction."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    return {"train": (x, x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(n, generator=g)), "val": None}


class BlobDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """A map-style Dataset, as data too large for memory comes: items are read one by one."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y
        self.classes = sorted({int(v) for v in y})

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def blob_datasets(n: int = 600, seed: int = 0) -> tuple[BlobDataset, BlobDataset]:
    (x, y), (xv, yv) = blobs(n, seed=seed)
    return BlobDataset(x, y), BlobDataset(xv, yv)


class NoisyBlobDataset(BlobDataset):
    """A Dataset that draws as it reads (as random transforms do), and leaves a file named by its process's pid in
    `seen_dir` (the loader's workers)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, seen_dir: str) -> None:
        super().__init__(x, y)
        self.seen_dir = seen_dir

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        (Path(self.seen_dir) / str(os.getpid())).touch()
        return self.x[i] + 0.1 * torch.randn(self.x[i].shape), self.y[i]


def noisy_blob_datasets(seen_dir: str, n: int = 600) -> tuple[BlobDataset, BlobDataset]:
    (x, y), (xv, yv) = blobs(n)
    return NoisyBlobDataset(x, y, seen_dir), NoisyBlobDataset(xv, yv, seen_dir)


def three_things() -> list[int]:
    return [1, 2, 3]
