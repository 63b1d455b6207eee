"""synthetic.generate: the shapes of the real data sets, seeded, balanced, and learnable."""

from __future__ import annotations

import pytest
import torch

from sweepit.errors import ConfigError
from sweepit.train.data import synthetic


@pytest.mark.parametrize(("name", "shape"), [("digits", (1, 8, 8)), ("mnist", (1, 28, 28)),
                                             ("cifar10", (3, 32, 32))])
def test_shapes_split_and_labels(name: str, shape: tuple[int, ...]) -> None:
    s = synthetic.generate(name, 500, seed=0)
    assert s.input_shape == shape and s.x_val.shape[1:] == shape
    assert len(s.x_train) == len(s.y_train) == 400 and len(s.x_val) == len(s.y_val) == 100
    assert s.n_classes == 10 and s.x_train.dtype == torch.float32 and s.y_train.dtype == torch.int64
    assert torch.bincount(s.y_train, minlength=10).tolist() == [40] * 10
    assert torch.bincount(s.y_val, minlength=10).tolist() == [10] * 10
    assert s.source.startswith("synthetic") and name in s.source


def test_pixels_look_normalised() -> None:
    x = synthetic.generate("cifar10", 500, seed=0).x_train
    assert abs(x.mean().item()) < 0.05 and 0.9 < x.std().item() < 1.2


def test_same_seed_same_data_other_seed_other_data() -> None:
    a, b, c = (synthetic.generate("digits", 200, seed) for seed in (5, 5, 6))
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_val, b.y_val)
    assert not torch.equal(a.x_train, c.x_train)


@pytest.mark.parametrize("name", ["digits", "mnist", "cifar10"])
def test_classes_are_learnable_but_not_trivial(name: str) -> None:
    s = synthetic.generate(name, 2000, seed=0)
    x_train, x_val = s.x_train.flatten(1), s.x_val.flatten(1)
    centroids = torch.stack([x_train[s.y_train == c].mean(dim=0) for c in range(10)])
    accuracy = (torch.cdist(x_val, centroids).argmin(dim=1) == s.y_val).double().mean().item()
    nearest = s.y_train[torch.cdist(x_val, x_train).argmin(dim=1)]
    accuracy_1nn = (nearest == s.y_val).double().mean().item()
    # Averaging over many images (what training does) finds the classes; a single image is mostly
    # noise, so memorising the training set is not enough.
    assert accuracy > 0.8
    assert accuracy_1nn < accuracy - 0.1


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"\['cifar10', 'digits', 'mnist'\].*'imagenet'"):
        synthetic.generate("imagenet", 100, 0)


def test_too_few_samples_is_refused() -> None:
    with pytest.raises(ConfigError, match="n_synthetic must be at least 20"):
        synthetic.generate("digits", 10, 0)
