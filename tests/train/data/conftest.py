"""Writers of tiny MNIST and CIFAR-10 files in the official formats, for the reader and download tests."""

from __future__ import annotations

import gzip
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

IDX_TYPE_CODES = {np.dtype(np.uint8): 0x08, np.dtype(">i4"): 0x0C, np.dtype(">f4"): 0x0D}
MNIST_NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte")

MnistWriter = Callable[..., dict[str, np.ndarray]]
CifarWriter = Callable[..., dict[str, tuple[np.ndarray, list[int]]]]


def idx_bytes(arr: np.ndarray) -> bytes:
    """`arr` in IDX format: 0x0000, type code, rank, big-endian uint32 sizes, big-endian data."""
    dtype = arr.dtype.newbyteorder(">") if arr.dtype.itemsize > 1 else arr.dtype
    header = bytes([0, 0, IDX_TYPE_CODES[dtype], arr.ndim])
    header += b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    return header + arr.astype(dtype).tobytes()


@pytest.fixture
def to_idx() -> Callable[[np.ndarray], bytes]:
    return idx_bytes


@pytest.fixture
def write_mnist() -> MnistWriter:
    """Writes train (20) and test (10) images and labels into a folder; returns the arrays by file name."""

    def write(root: Path, *, gz: bool = False, seed: int = 0, n_train: int = 20, n_test: int = 10
              ) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        arrays = {
            MNIST_NAMES[0]: rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
            MNIST_NAMES[1]: (np.arange(n_train) % 10).astype(np.uint8),
            MNIST_NAMES[2]: rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
            MNIST_NAMES[3]: (np.arange(n_test)[::-1] % 10).astype(np.uint8),
        }
        root.mkdir(parents=True, exist_ok=True)
        for name, arr in arrays.items():
            data = idx_bytes(arr)
            if gz:
                (root / f"{name}.gz").write_bytes(gzip.compress(data, mtime=0))
            else:
                (root / name).write_bytes(data)
        return arrays

    return write


@pytest.fixture
def write_cifar() -> CifarWriter:
    """Writes data_batch_1..5 (n each) and test_batch as protocol-2 pickles like the official ones."""

    def write(folder: Path, *, n: int = 4, seed: int = 0) -> dict[str, tuple[np.ndarray, list[int]]]:
        rng = np.random.default_rng(seed)
        folder.mkdir(parents=True, exist_ok=True)
        batches = {}
        for i, name in enumerate([*(f"data_batch_{k}" for k in range(1, 6)), "test_batch"]):
            data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
            labels = [(i + j) % 10 for j in range(n)]
            batch = {b"batch_label": name.encode(), b"data": data, b"labels": labels,
                     b"filenames": [f"img_{j}.png".encode() for j in range(n)]}
            (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
            batches[name] = (data, labels)
        return batches

    return write
