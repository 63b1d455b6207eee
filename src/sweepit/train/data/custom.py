"""A user's own data, from `data._target_`, checked against the data contract (docs/own-code.md): `(x, y)` tensors
are held on the training device like the built-in sets, Datasets are streamed through a DataLoader."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset, Subset, TensorDataset

from sweepit.errors import ConfigError
from sweepit.train.data import Splits
from sweepit.train.data.batches import stratified_split

CONTRACT = ("(train, val) or {'train': ..., 'val': ...}, each an (x, y) pair of tensors or a torch Dataset of "
            "(x, y) items (val may be None)")


@dataclass
class Streamed:
    """Training and validation Datasets, streamed through DataLoaders (data that does not fit in memory)."""

    train: Dataset[Any]
    val: Dataset[Any]
    n_classes: int                   # 0 for regression
    input_shape: tuple[int, ...]
    source: str

    @property
    def n_train(self) -> int:
        return len(self.train)  # type: ignore[arg-type]

    @property
    def n_val(self) -> int:
        return len(self.val)  # type: ignore[arg-type]


def from_user(result: Any, target: str, val_fraction: float, seed: int) -> Splits | Streamed:
    """What `data._target_` returned, checked against the contract and put in sweepit's two shapes."""
    if isinstance(result, Splits):
        return result
    if isinstance(result, Mapping):
        if "train" not in result:
            raise _refused(target, f"a mapping without a 'train' key (keys: {', '.join(map(str, result))})")
        train, val = result["train"], result.get("val")
    elif isinstance(result, Sequence) and not isinstance(result, str | bytes) and len(result) == 2:
        train, val = result
    else:
        what = f"a {type(result).__name__}" + (f" of {len(result)} items" if isinstance(result, Sequence) else "")
        raise _refused(target, what)
    train = _split(train, target, "train")
    val = None if val is None else _split(val, target, "val")
    source = f"{target}()"
    if isinstance(train, tuple) and (val is None or isinstance(val, tuple)):
        return _in_memory(train, val, val_fraction, seed, source)
    return _streamed(train, val, val_fraction, seed, source)


def _refused(target: str, what: str) -> ConfigError:
    return ConfigError(f"data._target_={target} must return {CONTRACT}, but it returned {what}. "
                       "See the data contract in docs/own-code.md.")


def _split(value: Any, target: str, name: str) -> tuple[torch.Tensor, torch.Tensor] | Dataset[Any]:
    if isinstance(value, Dataset):
        if not hasattr(value, "__len__"):
            raise ConfigError(f"data._target_={target} returned a {name} Dataset without a length (an "
                              "IterableDataset); it must be a map-style Dataset (with __len__ and __getitem__), so "
                              "that every rank can take its share of each epoch.")
        return value
    if isinstance(value, Sequence) and not isinstance(value, str | bytes) and len(value) == 2:
        x, y = (_tensor(v, target, f"{name} {part}") for v, part in zip(value, ("inputs", "labels"), strict=True))
        if len(x) != len(y):
            raise ConfigError(f"data._target_={target} must return as many {name} labels as inputs, but returned "
                              f"{len(x)} inputs and {len(y)} labels.")
        if len(x) == 0:
            raise ConfigError(f"data._target_={target} returned an empty {name} split; it needs at least one sample.")
        return x, y
    raise ConfigError(f"data._target_={target} must return its {name} split as an (x, y) pair of tensors or a "
                      f"torch Dataset, but it is a {type(value).__name__}. The contract: {CONTRACT}.")


def _tensor(value: Any, target: str, what: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise ConfigError(f"data._target_={target} must return its {what} as a tensor or an array, but they are a "
                          f"{type(value).__name__}.") from None


def _labels(y: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Integer labels: a classification task with max + 1 classes; anything else: float regression targets."""
    if not torch.is_floating_point(y) and y.dtype != torch.bool:
        return y.long(), int(y.max()) + 1 if len(y) else 0
    return y.float(), 0


def _in_memory(train: tuple[torch.Tensor, torch.Tensor], val: tuple[torch.Tensor, torch.Tensor] | None,
               val_fraction: float, seed: int, source: str) -> Splits:
    x, (y, n_classes) = train[0].float(), _labels(train[1])
    if val is None:
        tr, va = _hold_out(y if n_classes else None, len(y), val_fraction, seed)
        x_val, y_val = x[va], y[va]
        x, y = x[tr], y[tr]
    else:
        x_val, (y_val, n_val_classes) = val[0].float(), _labels(val[1])
        n_classes = max(n_classes, n_val_classes) if n_classes else 0
    return Splits(x, y, x_val, y_val, n_classes=n_classes, source=source)


def _hold_out(y: torch.Tensor | None, n: int, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Train and validation indices: stratified by class when the labels are classes in memory, else at random."""
    frac = val_fraction or 0.2
    if y is not None:
        return stratified_split(y, frac, seed)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_val = max(1, int(n * frac))
    return order[n_val:], order[:n_val]


def _streamed(train: Any, val: Any, val_fraction: float, seed: int, source: str) -> Streamed:
    if isinstance(train, tuple):
        train = TensorDataset(*train)
    if isinstance(val, tuple):
        val = TensorDataset(*val)
    x0, y0 = _item(train, 0)
    n_classes = _n_classes(train, y0)
    if val is None:
        tr, va = _hold_out(None, len(train), val_fraction, seed)
        train, val = Subset(train, tr.tolist()), Subset(train, va.tolist())
    return Streamed(train, val, n_classes, tuple(torch.as_tensor(x0).shape), source)


def _item(dataset: Any, i: int) -> tuple[Any, Any]:
    item = dataset[i]
    if not (isinstance(item, Sequence) and len(item) == 2):
        raise ConfigError(f"a Dataset of data._target_ must give (x, y) pairs, but item {i} is a "
                          f"{type(item).__name__}; return (input, label) from its __getitem__.")
    return item[0], item[1]


def _n_classes(dataset: Any, y0: Any) -> int:
    y0 = torch.as_tensor(y0)
    if torch.is_floating_point(y0):
        return 0
    classes = getattr(dataset, "classes", None)
    if classes is not None:
        return len(classes)
    targets = getattr(dataset, "targets", None)
    if targets is not None:
        return int(torch.as_tensor(targets).max()) + 1
    return int(max(int(torch.as_tensor(_item(dataset, i)[1])) for i in range(len(dataset)))) + 1
