"""Noisy 8x8 renderings of the ten digits: a data set generated on the fly, so the example needs no files."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

# Each digit drawn on a 5x3 grid (1 = ink), as on a seven-segment-like display.
GLYPHS = [
    "111101101101111", "010110010010111", "111001111100111", "111001111001111", "101101111001001",
    "111100111001111", "111100111101111", "111001001001001", "111101111101111", "111101111001111",
]


def _glyphs() -> torch.Tensor:
    out = torch.zeros(10, 1, 8, 8)
    for digit, bits in enumerate(GLYPHS):
        out[digit, 0, 1:6, 2:5] = torch.tensor([float(b) for b in bits]).reshape(5, 3)
    return out


def make(n: int, noise: float, seed: int) -> TensorDataset:
    """`n` images of random digits: the glyph shifted by up to one pixel, plus Gaussian noise."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    x = _glyphs()[y]
    shifts = torch.randint(-1, 2, (n, 2), generator=g)
    for i, (dy, dx) in enumerate(shifts.tolist()):
        x[i] = torch.roll(x[i], shifts=(dy, dx), dims=(1, 2))
    return TensorDataset(x + noise * torch.randn(x.shape, generator=g), y)
