"""Random rotation, shift and zoom of a whole batch in one resampling pass on the batch's device."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from sweepit.errors import ConfigError


def augment_images(
    x: torch.Tensor,
    rotation_deg: float,
    shift_frac: float,
    zoom_frac: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """Each image of `x` (N, C, H, W) rotated, shifted and zoomed by its own random amounts.

    Angles are uniform in [-rotation_deg, rotation_deg], shifts in [-shift_frac, shift_frac] of the side
    along each axis, zoom factors in [1 - zoom_frac, 1 + zoom_frac] (above 1 magnifies). The random numbers
    come from `generator`, which must live on the batch's device: drawn there, they need no copy from the host,
    which on a GPU would block every step. A seed gives the same augmentation on every device of one type (the
    CPU's and CUDA's generators draw different streams).
    """
    _check(x, rotation_deg, shift_frac, zoom_frac)
    if rotation_deg == 0 and shift_frac == 0 and zoom_frac == 0:
        return x
    n = x.shape[0]
    # Four draws per image whatever the settings, so the stream (and thus later draws) does not
    # depend on which of the three transforms are switched on.
    u = torch.rand(n, 4, generator=generator, dtype=torch.float64, device=x.device) * 2 - 1
    angle = u[:, 0] * math.radians(rotation_deg)
    # affine_grid works in coordinates spanning [-1, 1], so a shift of f of the side is 2 f there.
    dx, dy = u[:, 1] * 2 * shift_frac, u[:, 2] * 2 * shift_frac
    zoom = 1 + u[:, 3] * zoom_frac
    # theta maps output coordinates to where they are read in the input: the inverse transform.
    cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
    theta = torch.stack(
        [torch.stack([cos, -sin, -dx], dim=1), torch.stack([sin, cos, -dy], dim=1)], dim=1
    ).to(x.dtype)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    # Pixels moved in from outside the image take each image's border colour (mean of its outermost ring,
    # per channel), not 0: after normalisation 0 is the mean pixel, a grey frame on MNIST's black
    # background, while the ring is that background exactly for digits and a neutral edge tone for photos.
    fill = _border_mean(x)
    return F.grid_sample(x - fill, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + fill


def _border_mean(x: torch.Tensor) -> torch.Tensor:
    """Mean of the outermost ring of pixels, shape (N, C, 1, 1)."""
    ring = torch.cat([x[..., 0, :], x[..., -1, :], x[..., 1:-1, 0], x[..., 1:-1, -1]], dim=-1)
    return ring.mean(dim=-1)[..., None, None]


def _check(x: torch.Tensor, rotation_deg: float, shift_frac: float, zoom_frac: float) -> None:
    if x.ndim != 4 or not x.is_floating_point():
        raise ConfigError(
            f"augmentation needs a float batch of images (N, C, H, W), but got {x.dtype} {tuple(x.shape)}. "
            "Fix: set data.augment.enabled=false for data that are not images."
        )
    for name, value, upper in (("rotation_deg", rotation_deg, 180.0), ("shift_frac", shift_frac, 1.0),
                               ("zoom_frac", zoom_frac, 1.0)):
        if not 0 <= value < upper:
            raise ConfigError(
                f"data.augment.{name} must be in [0, {upper:g}), but got {value}. "
                f"Fix: set data.augment.{name}=0 to switch it off, or a value below {upper:g}."
            )
