"""Index batches over in-memory tensors: shuffled, or stratified so every batch carries the class mix."""

from __future__ import annotations

from collections.abc import Iterator

import torch


def stratified_order(y: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A permutation in which every contiguous chunk holds each class in proportion to its frequency: each sample's
    key is (its rank within its class, shuffled, + jitter) / class size, which spreads each class over the epoch."""
    y_cpu = y.detach().cpu()
    keys = torch.empty(len(y_cpu), dtype=torch.float64)
    for c in torch.unique(y_cpu):
        idx = torch.nonzero(y_cpu == c).flatten()
        ranks = torch.randperm(len(idx), generator=generator).double()
        jitter = torch.rand(len(idx), generator=generator, dtype=torch.float64)
        keys[idx] = (ranks + jitter) / len(idx)
    return torch.argsort(keys).to(y.device)


def iterate_batches(
    n: int,
    batch_size: int,
    generator: torch.Generator,
    *,
    shuffle: bool = True,
    labels: torch.Tensor | None = None,
    device: torch.device | None = None,
) -> Iterator[torch.Tensor]:
    """Yield index tensors of `batch_size` (the last may be smaller). `labels` switches on stratification."""
    if labels is not None:
        order = stratified_order(labels, generator)
    elif shuffle:
        order = torch.randperm(n, generator=generator)
    else:
        order = torch.arange(n)
    order = order.to(device) if device is not None else order
    for start in range(0, n, batch_size):
        yield order[start : start + batch_size]


def stratified_split(y: torch.Tensor, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Train and validation indices with the same class proportions in both."""
    g = torch.Generator().manual_seed(seed)
    train: list[torch.Tensor] = []
    val: list[torch.Tensor] = []
    for c in torch.unique(y):
        idx = torch.nonzero(y == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=g)]
        n_val = max(1, round(len(idx) * val_fraction))
        val.append(idx[:n_val])
        train.append(idx[n_val:])
    return torch.sort(torch.cat(train)).values, torch.sort(torch.cat(val)).values
