"""Data sets held as tensors on the training device, batches sliced there; `load_splits` reads (or generates) a
built-in set, splits off validation data and moves it to the device once."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
import torch

from sweepit.train.data.batches import iterate_batches, stratified_split

__all__ = ["Splits", "iterate_batches", "load_splits", "stratified_split", "to_device"]


@dataclass
class Splits:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    n_classes: int          # 0 for regression
    source: str             # where the data came from, for the start-up line

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def n_train(self) -> int:
        return len(self.x_train)

    @property
    def n_val(self) -> int:
        return len(self.x_val)


def load_splits(cfg: Any, device: torch.device) -> Splits:
    """Train and validation tensors on `device` for the data set named by `cfg.data.name`."""
    from sweepit.train.data import cifar, linreg, mnist, synthetic

    data_cfg, seed = cfg.data, int(cfg.seed)
    name = data_cfg.name
    if name == "linreg":
        t = cfg.task
        return to_device(linreg.generate(data_cfg, seed, t.true_w, t.true_b, t.noise_std), device)
    if data_cfg.synthetic:
        return to_device(synthetic.generate(name, int(data_cfg.n_synthetic), seed), device)
    readers = {"digits": _digits, "mnist": mnist.load, "cifar10": cifar.load}
    x_train, y_train, x_test, y_test, source = readers[name](data_cfg)
    frac = float(data_cfg.val_fraction)
    if x_test is None or y_test is None or frac > 0:
        # No official test split (digits), or a hold-out asked for: split the training data by class.
        tr, va = stratified_split(y_train, frac or 0.2, seed)
        x_train, y_train, x_test, y_test = x_train[tr], y_train[tr], x_train[va], y_train[va]
    return to_device(Splits(x_train, y_train, x_test, y_test, n_classes=10, source=source), device)


def _digits(data_cfg: Any) -> tuple[torch.Tensor, torch.Tensor, None, None, str]:
    """The UCI 8x8 digits shipped in the package (DIGITS_PROVENANCE.md): 1,797 images (N, 1, 8, 8) in [0, 1], with
    no official test split."""
    raw = resources.files(__name__).joinpath("digits.csv.gz").read_bytes()
    table = np.loadtxt(gzip.decompress(raw).decode().splitlines(), delimiter=",", dtype=np.float32)
    x = torch.from_numpy(table[:, :64] / 16.0).reshape(-1, 1, 8, 8)
    y = torch.from_numpy(table[:, 64].astype(np.int64))
    return x, y, None, None, "UCI digits (shipped with sweepit)"


def to_device(s: Splits, device: torch.device) -> Splits:
    return Splits(
        s.x_train.to(device), s.y_train.to(device), s.x_val.to(device), s.y_val.to(device), s.n_classes, s.source
    )
