"""Generated images of a real data set's shape, for benchmarks and tests that must not need the files: each class
a fixed smooth random prototype, a sample its prototype plus pixel noise, the prototypes a fixed number of noise
standard deviations apart at any image size, so that accuracy climbs over the epochs and pixels stay near N(0, 1)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from sweepit.errors import ConfigError
from sweepit.train.data import Splits
from sweepit.train.data.batches import stratified_split

SHAPES: dict[str, tuple[int, int, int]] = {
    "digits": (1, 8, 8),
    "mnist": (1, 28, 28),
    "cifar10": (3, 32, 32),
}
N_CLASSES = 10
VAL_FRACTION = 0.2
# Distance between two class prototypes, in noise standard deviations.
PROTOTYPE_SEPARATION = 6.0


def generate(name: str, n: int, seed: int) -> Splits:
    """`n` labelled images (balanced classes) split 80/20 by class into train and validation."""
    if name not in SHAPES:
        raise ConfigError(
            f"data.name must be one of {sorted(SHAPES)} for synthetic data, but got {name!r}. "
            "Fix: set data.name to one of them, or data.synthetic=false."
        )
    if n < 2 * N_CLASSES:
        raise ConfigError(
            f"data.n_synthetic must be at least {2 * N_CLASSES} (two images per class, one for validation), "
            f"but got {n}. Fix: set data.n_synthetic=1000 or more."
        )
    g = torch.Generator().manual_seed(seed)
    shape = SHAPES[name]
    prototypes = _prototypes(shape, g)
    y = torch.arange(n) % N_CLASSES
    y = y[torch.randperm(n, generator=g)]
    x = prototypes[y] + torch.randn(n, *shape, generator=g)
    train, val = stratified_split(y, VAL_FRACTION, seed)
    c, h, w = shape
    return Splits(
        x[train], y[train], x[val], y[val], n_classes=N_CLASSES,
        source=f"synthetic {name}-shaped data: {n} images {c}x{h}x{w}, {N_CLASSES} classes, seed {seed}",
    )


def _prototypes(shape: tuple[int, int, int], g: torch.Generator) -> torch.Tensor:
    """One smooth pattern per class: a coarse random grid upsampled, so neighbouring pixels agree."""
    c, h, w = shape
    coarse = torch.randn(N_CLASSES, c, max(4, h // 4), max(4, w // 4), generator=g)
    smooth = F.interpolate(coarse, size=(h, w), mode="bicubic", align_corners=False)
    smooth = (smooth - smooth.mean(dim=(1, 2, 3), keepdim=True)) / smooth.std(dim=(1, 2, 3), keepdim=True)
    # Two independent unit-variance patterns are sqrt(2 * pixels) apart; rescale to the target separation.
    n_pixels = c * h * w
    return smooth * (PROTOTYPE_SEPARATION / math.sqrt(2 * n_pixels))
