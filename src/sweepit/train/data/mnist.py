"""MNIST from the four IDX files (raw or gzipped) under `data.root`, normalised with the usual mean, std."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sweepit.errors import DataMissingError, SweepitError

FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
# Mean and std of the training pixels after scaling to [0, 1]; the values every MNIST example uses.
MEAN, STD = 0.1307, 0.3081

# IDX type codes (third byte of the magic number); multi-byte values are big-endian.
_IDX_DTYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def load(data_cfg: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """Train (60,000) and test (10,000) images as float tensors (N, 1, 28, 28), labels as int64."""
    root = Path(data_cfg.root if data_cfg.root is not None else "data/mnist")
    paths = {key: find_file(root, name) for key, name in FILES.items()}
    missing = [FILES[key] for key, path in paths.items() if path is None]
    if missing:
        raise DataMissingError(
            f"MNIST needs its 4 IDX files (raw or .gz) in data.root, but {', '.join(missing)} "
            f"not found in {root.resolve()}. Fix: run `sweepit data download mnist --root {root}`, "
            f"or set data.root=<folder with the files>, or data.synthetic=true to train on generated images."
        )
    found = {key: path for key, path in paths.items() if path is not None}
    x_train = _images(found["train_images"])
    y_train = _labels(found["train_labels"], len(x_train))
    x_test = _images(found["test_images"])
    y_test = _labels(found["test_labels"], len(x_test))
    return x_train, y_train, x_test, y_test, f"MNIST IDX files in {root.resolve()}"


def find_file(root: Path, name: str) -> Path | None:
    """`root/name`, else `root/name.gz`, else None (a raw file wins: a user unpacked it on purpose)."""
    for candidate in (root / name, root / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def read_idx(path: Path) -> np.ndarray:
    """The array in an IDX file: magic 0x0000 + type code + rank, big-endian uint32 sizes, then the data."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:
        raise SweepitError(
            f"An IDX file must be readable (and valid gzip if it ends in .gz), but {path} failed: {e}. "
            f"Fix: delete it and run `sweepit data download mnist --root {path.parent}` again."
        ) from e
    if len(raw) < 4:
        raise _malformed(path, f"the file has {len(raw)} bytes, fewer than the 4-byte magic number")
    zero, type_code, rank = int.from_bytes(raw[:2], "big"), raw[2], raw[3]
    if zero != 0 or type_code not in _IDX_DTYPES:
        raise _malformed(path, f"the magic number is 0x{raw[:4].hex()}, expected 0x0000 + a type code "
                               f"in {sorted(hex(c) for c in _IDX_DTYPES)} + the rank")
    header_len = 4 + 4 * rank
    if len(raw) < header_len:
        raise _malformed(path, f"rank {rank} needs a {header_len}-byte header, "
                               f"but the file has {len(raw)} bytes")
    dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(rank))
    dtype = _IDX_DTYPES[type_code]
    n_expected = header_len + int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(raw) != n_expected:
        raise _malformed(path, f"dims {dims} of {dtype} need {n_expected} bytes, but the file has {len(raw)} "
                               "(truncated or corrupted)")
    return np.frombuffer(raw, dtype=dtype, offset=header_len).reshape(dims)


def _images(path: Path) -> torch.Tensor:
    arr = read_idx(path)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[1:] != (28, 28):
        raise _malformed(path, f"MNIST images must be uint8 of shape (N, 28, 28), "
                               f"but got {arr.dtype} {arr.shape}")
    x = torch.from_numpy(arr.astype(np.float32)).unsqueeze(1)
    return x.div_(255.0).sub_(MEAN).div_(STD)


def _labels(path: Path, n_images: int) -> torch.Tensor:
    arr = read_idx(path)
    if arr.dtype != np.uint8 or arr.shape != (n_images,):
        raise _malformed(path, f"MNIST labels must be uint8 of shape ({n_images},) to match the images, "
                               f"but got {arr.dtype} {arr.shape}")
    if arr.size and int(arr.max()) > 9:
        raise _malformed(path, f"MNIST labels must be in 0..9, but the largest is {int(arr.max())}")
    return torch.from_numpy(arr.astype(np.int64))


def _malformed(path: Path, why: str) -> SweepitError:
    return SweepitError(
        f"Not a valid MNIST IDX file: {path}: {why}. "
        f"Fix: delete it and run `sweepit data download mnist --root {path.parent}` again."
    )
