"""The UCI 8x8 handwritten digits, shipped inside the package (see DIGITS_PROVENANCE.md)."""

from __future__ import annotations

import gzip
from importlib import resources
from typing import Any

import numpy as np
import torch


def load(data_cfg: Any) -> tuple[torch.Tensor, torch.Tensor, None, None, str]:
    """1,797 images as float tensors (N, 1, 8, 8) scaled to [0, 1]; no official test split."""
    raw = resources.files("sweepit.train.data").joinpath("digits.csv.gz").read_bytes()
    table = np.loadtxt(gzip.decompress(raw).decode().splitlines(), delimiter=",", dtype=np.float32)
    x = torch.from_numpy(table[:, :64] / 16.0).reshape(-1, 1, 8, 8)
    y = torch.from_numpy(table[:, 64].astype(np.int64))
    return x, y, None, None, "UCI digits (shipped with sweepit)"
