"""iterate_batches and stratified_split: every sample exactly once, class shares kept."""

from __future__ import annotations

import pytest
import torch

from sweepit.train.data.batches import iterate_batches, stratified_split


def imbalanced_labels(n: int = 1000, seed: int = 0) -> torch.Tensor:
    """60% class 0, 30% class 1, 10% class 2, shuffled."""
    y = torch.cat([torch.zeros(6 * n // 10), torch.ones(3 * n // 10), torch.full((n // 10,), 2)]).long()
    return y[torch.randperm(n, generator=torch.Generator().manual_seed(seed))]


@pytest.mark.parametrize("mode", ["in-order", "shuffled", "stratified"])
@pytest.mark.parametrize("n", [1, 63, 64, 1000])
def test_every_index_exactly_once(mode: str, n: int) -> None:
    labels = imbalanced_labels(1000)[:n] if mode == "stratified" else None
    batches = list(iterate_batches(n, 64, torch.Generator().manual_seed(0), shuffle=mode != "in-order",
                                   labels=labels))
    assert torch.equal(torch.sort(torch.cat(batches)).values, torch.arange(n))
    assert all(len(b) == 64 for b in batches[:-1]) and 0 < len(batches[-1]) <= 64
    if mode == "in-order":
        assert torch.equal(torch.cat(batches), torch.arange(n))


def test_shuffled_order_depends_on_the_seed_only() -> None:
    def order(seed: int) -> torch.Tensor:
        return torch.cat(list(iterate_batches(100, 10, torch.Generator().manual_seed(seed))))

    assert torch.equal(order(3), order(3))
    assert not torch.equal(order(3), order(4))


@pytest.mark.parametrize("seed", range(5))
def test_stratified_batches_carry_each_class_share(seed: int) -> None:
    y = imbalanced_labels(1000, seed)
    batch_size = 64
    for batch in list(iterate_batches(1000, batch_size, torch.Generator().manual_seed(seed), labels=y))[:-1]:
        counts = torch.bincount(y[batch], minlength=3).double()
        expected = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64) * batch_size
        assert (counts - expected).abs().max() <= 2, (counts, expected)


def test_unstratified_batches_do_vary_more() -> None:
    # Guards the test above against passing trivially: plain shuffling misses the shares by more.
    y = imbalanced_labels(1000)
    worst = max(
        (torch.bincount(y[b], minlength=3).double() - torch.tensor([38.4, 19.2, 6.4], dtype=torch.float64))
        .abs().max().item()
        for b in list(iterate_batches(1000, 64, torch.Generator().manual_seed(0)))[:-1]
    )
    assert worst > 2


@pytest.mark.parametrize("mode", ["in-order", "shuffled", "stratified"])
def test_batches_land_on_the_requested_device(mode: str) -> None:
    """Every batch is on the device asked for, whatever the order's origin (the labels stay where they are): PyTorch's
    `meta` device stands for a GPU here, which a CPU-only machine can show."""
    labels = imbalanced_labels(100) if mode == "stratified" else None
    meta = torch.device("meta")
    batches = list(iterate_batches(100, 16, torch.Generator().manual_seed(0), shuffle=mode != "in-order",
                                   labels=labels, device=meta))
    assert len(batches) == 7 and all(b.device == meta and b.dtype == torch.int64 for b in batches)
    assert all(b.device.type == "cpu" for b in iterate_batches(100, 16, torch.Generator(), labels=labels))


@pytest.mark.parametrize("val_fraction", [0.1, 0.2, 0.5])
def test_stratified_split_keeps_proportions(val_fraction: float) -> None:
    y = imbalanced_labels(1000)
    train, val = stratified_split(y, val_fraction, seed=0)
    assert torch.equal(torch.sort(torch.cat([train, val])).values, torch.arange(1000))
    assert len(val) == pytest.approx(1000 * val_fraction, abs=3)
    for c, n_c in enumerate((600, 300, 100)):
        assert int((y[val] == c).sum()) == max(1, round(n_c * val_fraction))


def test_stratified_split_is_seeded_and_keeps_every_class_in_val() -> None:
    y = torch.tensor([0] * 50 + [1] * 3)
    a, b = stratified_split(y, 0.1, seed=1), stratified_split(y, 0.1, seed=1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert set(y[a[1]].tolist()) == {0, 1}  # a rare class still gets one validation sample
    assert not torch.equal(stratified_split(y, 0.1, seed=2)[1], a[1])
