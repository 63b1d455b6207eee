"""augment_images: identity when off, seeded, and the transforms move pixels the way they claim."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from sweepit.errors import ConfigError
from sweepit.train.data.augment import augment_images

BACKGROUND = -0.4242  # MNIST's black after normalisation: (0 - 0.1307) / 0.3081


def blobs(n: int, size: int = 28) -> torch.Tensor:
    """`n` images of a bright square in the centre on MNIST's normalised background."""
    x = torch.full((n, 1, size, size), BACKGROUND)
    lo, hi = size // 2 - 3, size // 2 + 3
    x[:, :, lo:hi, lo:hi] = 2.8
    return x


def centre_of_mass(x: torch.Tensor) -> torch.Tensor:
    """(row, col) of the mass above the background, per image."""
    mass = (x - BACKGROUND).clamp(min=0)[:, 0]
    rows = torch.arange(x.shape[-2], dtype=x.dtype)[:, None]
    cols = torch.arange(x.shape[-1], dtype=x.dtype)[None, :]
    total = mass.sum(dim=(1, 2))
    return torch.stack([(mass * rows).sum(dim=(1, 2)) / total, (mass * cols).sum(dim=(1, 2)) / total], dim=1)


def test_all_zero_is_identity_and_draws_nothing() -> None:
    x = blobs(3)
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    assert augment_images(x, 0.0, 0.0, 0.0, g) is x
    assert torch.equal(g.get_state(), state)


def test_shape_dtype_and_device_are_kept() -> None:
    x = torch.randn(5, 3, 32, 32)
    out = augment_images(x, 15.0, 0.1, 0.1, torch.Generator().manual_seed(0))
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    assert not torch.equal(out, x)


class CopiesBetweenDevices(TorchDispatchMode):
    """Every copy from one device to another that runs under it, as "op: from -> to"."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        aten = torch.ops.aten
        if func is aten._to_copy.default:
            src, dst = args[0], out
        elif func is aten.copy_.default:
            src, dst = args[1], args[0]
        elif func is aten._copy_from.default:
            src, dst = args[0], args[1]
        else:
            return out
        if src.device != dst.device:
            self.copies.append(f"{func}: {src.device} -> {dst.device}")
        return out


def test_a_step_copies_nothing_from_the_host_to_the_batchs_device() -> None:
    """theta was drawn and built on the CPU, then copied to the GPU at every step, which waits for the copy. On
    the meta device, as on a GPU, the batch's device is not the host's."""
    x = blobs(8).to("meta")
    with CopiesBetweenDevices() as mode:
        out = augment_images(x, 10.0, 0.1, 0.1, torch.Generator().manual_seed(0))
    assert out.device == x.device and out.shape == x.shape
    assert mode.copies == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_stays_on_cuda_with_a_cuda_generator() -> None:
    x = blobs(4).cuda()
    out = augment_images(x, 10.0, 0.1, 0.1, torch.Generator("cuda").manual_seed(0))
    assert out.device == x.device
    assert torch.equal(out, augment_images(x, 10.0, 0.1, 0.1, torch.Generator("cuda").manual_seed(0)))


def test_same_seed_same_images_other_seed_other_images() -> None:
    x = blobs(8)
    a = augment_images(x, 10.0, 0.1, 0.1, torch.Generator().manual_seed(1))
    b = augment_images(x, 10.0, 0.1, 0.1, torch.Generator().manual_seed(1))
    c = augment_images(x, 10.0, 0.1, 0.1, torch.Generator().manual_seed(2))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_each_image_gets_its_own_transform() -> None:
    out = augment_images(blobs(6), 0.0, 0.2, 0.0, torch.Generator().manual_seed(0))
    assert len({tuple(c.round(decimals=3).tolist()) for c in centre_of_mass(out)}) == 6


def test_shift_moves_mass_by_at_most_the_fraction() -> None:
    x = blobs(64)
    out = augment_images(x, 0.0, 0.25, 0.0, torch.Generator().manual_seed(0))
    moved = centre_of_mass(out) - centre_of_mass(x)
    assert moved.abs().max() <= 0.25 * 28 + 0.5
    assert moved.abs().mean() > 0.25 * 28 / 4  # uniform in [-7, 7] px: mean |shift| 3.5 px


def test_zoom_scales_the_blob_area() -> None:
    x = blobs(32)
    out = augment_images(x, 0.0, 0.0, 0.5, torch.Generator().manual_seed(0))
    area = ((out - BACKGROUND) > 1.5).sum(dim=(1, 2, 3)).float()
    assert area.min() < 36 * 0.6 and area.max() > 36 * 1.6  # zoom in [0.5, 1.5] scales area by its square


def test_rotation_keeps_a_centred_blob_centred() -> None:
    x = blobs(16)
    out = augment_images(x, 45.0, 0.0, 0.0, torch.Generator().manual_seed(0))
    torch.testing.assert_close(centre_of_mass(out), centre_of_mass(x), atol=0.6, rtol=0)
    assert not torch.allclose(out, x)


def test_pixels_moved_in_from_outside_take_the_background() -> None:
    out = augment_images(blobs(16), 30.0, 0.25, 0.3, torch.Generator().manual_seed(0))
    corners = out[:, :, [0, 0, -1, -1], [0, -1, 0, -1]]
    torch.testing.assert_close(corners, torch.full_like(corners, BACKGROUND))


@pytest.mark.parametrize(("rotation_deg", "shift_frac", "zoom_frac"), [(-1, 0, 0), (0, 1.0, 0), (0, 0, 1.2)])
def test_out_of_range_settings_are_refused(rotation_deg: float, shift_frac: float, zoom_frac: float) -> None:
    with pytest.raises(ConfigError, match=r"data\.augment\..* must be in"):
        augment_images(blobs(1), rotation_deg, shift_frac, zoom_frac, torch.Generator())


def test_non_image_batches_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"augment\.enabled=false"):
        augment_images(torch.randn(4, 1), 10.0, 0.0, 0.0, torch.Generator())
