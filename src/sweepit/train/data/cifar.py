"""CIFAR-10 from the python pickles in `<data.root>/cifar-10-batches-py/`, normalised per channel."""

from __future__ import annotations

import codecs
import pickle
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from sweepit.errors import DataMissingError, SweepitError

BATCHES_DIR = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
# Per-channel mean and std of the training images after scaling to [0, 1].
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def missing_batches(root: Path) -> tuple[Path, list[str]]:
    """The folder of the batches under `root` (`root/cifar-10-batches-py`, or `root` itself when it is that folder),
    and the batch files it lacks: what `load` and `make sweep-scaling` (scripts/scaling_plan.py) both ask."""
    folder = root / BATCHES_DIR
    if not folder.is_dir() and (root / TEST_BATCH).is_file():
        folder = root
    return folder, [name for name in (*TRAIN_BATCHES, TEST_BATCH) if not (folder / name).is_file()]


def load(data_cfg: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """Train (50,000) and test (10,000) images as float tensors (N, 3, 32, 32), labels as int64."""
    root = Path(data_cfg.root if data_cfg.root is not None else "data/cifar10")
    folder, missing = missing_batches(root)
    if missing:
        raise DataMissingError(
            f"CIFAR-10 needs {BATCHES_DIR}/ with data_batch_1..5 and test_batch under data.root, but "
            f"{', '.join(missing)} not found in {folder.resolve()}. "
            f"Fix: run `sweepit data download cifar10 --root {root}`, "
            f"or set data.root=<folder holding {BATCHES_DIR}/>, "
            "or data.synthetic=true to train on generated images."
        )
    train = [_read_batch(folder / name) for name in TRAIN_BATCHES]
    x_train = torch.cat([x for x, _ in train])
    y_train = torch.cat([y for _, y in train])
    x_test, y_test = _read_batch(folder / TEST_BATCH)
    return x_train, y_train, x_test, y_test, f"CIFAR-10 python batches in {folder.resolve()}"


# numpy's array rebuilder, whatever module it lives in for the installed numpy.
_RECONSTRUCT: Any = np.zeros(1).__reduce__()[0]


class _ArraysOnly(pickle.Unpickler):
    """Unpickles dicts of numpy arrays and nothing else: a pickle can run any code it names otherwise."""

    # Python 2 era pickles (the official files) and today's numpy name the array rebuilder differently.
    _ALLOWED: ClassVar[dict[tuple[str, str], Any]] = {
        ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
        ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): codecs.encode,  # how protocol-2 pickles written by Python 3 store bytes
    }

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refusing to load {module}.{name}: a CIFAR batch holds only arrays"
            ) from None


def _read_batch(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    try:
        with path.open("rb") as f:
            batch = _ArraysOnly(f, encoding="bytes").load()
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError) as e:
        raise _malformed(path, f"it does not unpickle ({e})") from e
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise _malformed(path, "it must be a dict with keys b'data' and b'labels'")
    data = np.asarray(batch[b"data"])
    labels = np.asarray(batch[b"labels"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise _malformed(path, f"b'data' must be uint8 of shape (N, 3072), but got {data.dtype} {data.shape}")
    if labels.shape != (len(data),) or not np.issubdtype(labels.dtype, np.integer):
        raise _malformed(path, f"b'labels' must be {len(data)} integers, "
                               f"but got {labels.dtype} {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise _malformed(path, f"labels must be in 0..9, but got {labels.min()}..{labels.max()}")
    # Rows are 1024 red, then 1024 green, then 1024 blue values, each plane row-major: already (C, H, W).
    x = torch.from_numpy(data.astype(np.float32)).reshape(-1, 3, 32, 32).div_(255.0)
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return x.sub_(mean).div_(std), torch.from_numpy(labels.astype(np.int64))


def _malformed(path: Path, why: str) -> SweepitError:
    return SweepitError(
        f"Not a valid CIFAR-10 python batch: {path}: {why}. "
        f"Fix: delete {path.parent} and run "
        f"`sweepit data download cifar10 --root {path.parent.parent}` again."
    )
