"""The data: 12x12 images of stripes in one of four directions, under noise. Two ways to hand them over:
`make` returns tensors (they fit in memory; sweepit keeps them on the device), `on_disk` returns Datasets that
read NumPy files memory-mapped, item by item (as data too large for memory would be; sweepit streams them)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

SIDE = 12
CLASSES = ["horizontal", "vertical", "diagonal", "anti-diagonal"]


def _images(n: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(CLASSES), n)
    rows, cols = np.mgrid[0:SIDE, 0:SIDE]
    coordinate = np.stack([rows, cols, rows + cols, rows - cols])[y]          # what the stripes run across
    period = rng.integers(3, 6, n)[:, None, None]
    phase = rng.uniform(0, 2 * np.pi, n)[:, None, None]
    x = np.sin(2 * np.pi * coordinate / period + phase) + noise * rng.standard_normal((n, SIDE, SIDE))
    return x[:, None].astype(np.float32), y.astype(np.int64)


def make(n_samples: int = 2000, noise: float = 2.0, seed: int = 0) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Tensors that fit in memory: 80% for training, 20% for validation."""
    x, y = _images(n_samples, noise, seed)
    cut = n_samples * 4 // 5
    return {"train": (torch.from_numpy(x[:cut]), torch.from_numpy(y[:cut])),
            "val": (torch.from_numpy(x[cut:]), torch.from_numpy(y[cut:]))}


class NpyImages(Dataset[tuple[torch.Tensor, int]]):
    """Images and labels in two .npy files, memory-mapped: each item is read from disk when asked for."""

    classes = CLASSES

    def __init__(self, images: Path, labels: Path) -> None:
        self.x = np.load(images, mmap_mode="r")
        self.y = np.load(labels, mmap_mode="r")

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(np.array(self.x[i])), int(self.y[i])


def on_disk(root: str, n_samples: int = 2000, noise: float = 2.0, seed: int = 0) -> tuple[NpyImages, NpyImages]:
    """Datasets over .npy files under `root` (written once, on first use)."""
    folder = Path(root) / f"stripes-{n_samples}-{noise}-{seed}"
    if not (folder / "val_y.npy").exists():  # written last: when it is there, all four are
        folder.mkdir(parents=True, exist_ok=True)
        x, y = _images(n_samples, noise, seed)
        cut = n_samples * 4 // 5
        for name, array in (("train_x", x[:cut]), ("train_y", y[:cut]), ("val_x", x[cut:]), ("val_y", y[cut:])):
            # Jobs of one sweep may get here at once: each writes its own temporary file and renames it, so
            # that no job ever reads a file another is still writing.
            tmp = folder / f".{name}.{os.getpid()}.npy"
            np.save(tmp, array)
            os.replace(tmp, folder / f"{name}.npy")
    return (NpyImages(folder / "train_x.npy", folder / "train_y.npy"),
            NpyImages(folder / "val_x.npy", folder / "val_y.npy"))
