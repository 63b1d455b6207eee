"""mnist.load and cifar.load on tiny files in the official formats: shapes, values, and clear errors."""

from __future__ import annotations

import gzip
import pickle
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from sweepit.errors import DataMissingError, SweepitError
from sweepit.train.data import cifar, mnist

Writer = Callable[..., dict[str, Any]]  # the write_mnist and write_cifar fixtures
ToIdx = Callable[[np.ndarray], bytes]


@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
def test_mnist_reads_idx_files(tmp_path: Path, write_mnist: Writer, gz: bool) -> None:
    arrays = write_mnist(tmp_path, gz=gz)
    x_train, y_train, x_test, y_test, source = mnist.load(SimpleNamespace(root=str(tmp_path)))

    assert x_train.shape == (20, 1, 28, 28) and x_test.shape == (10, 1, 28, 28)
    assert x_train.dtype == torch.float32 and y_train.dtype == torch.int64
    assert y_train.tolist() == arrays["train-labels-idx1-ubyte"].tolist()
    assert y_test.tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()
    expected = (arrays["t10k-images-idx3-ubyte"].astype(np.float32) / 255 - mnist.MEAN) / mnist.STD
    torch.testing.assert_close(x_test[:, 0], torch.from_numpy(expected))
    assert str(tmp_path.resolve()) in source


def test_mnist_prefers_raw_over_gz(tmp_path: Path, write_mnist: Writer) -> None:
    write_mnist(tmp_path, gz=True, seed=1)
    raw = write_mnist(tmp_path, gz=False, seed=2)
    x_train = mnist.load(SimpleNamespace(root=tmp_path))[0]
    expected = (raw["train-images-idx3-ubyte"].astype(np.float32) / 255 - mnist.MEAN) / mnist.STD
    torch.testing.assert_close(x_train[:, 0], torch.from_numpy(expected))


def test_idx_reader_is_big_endian_for_every_type(tmp_path: Path, to_idx: ToIdx) -> None:
    for arr in (np.arange(-6, 6, dtype=np.int32).reshape(3, 4), np.linspace(-1, 1, 5, dtype=np.float32)):
        path = tmp_path / "a.idx"
        path.write_bytes(to_idx(arr))
        np.testing.assert_array_equal(mnist.read_idx(path), arr)


@pytest.mark.parametrize(
    ("mangle", "words"),
    [
        (lambda b: b"\x01\x00" + b[2:], "magic number"),
        (lambda b: b[:2] + b"\x07" + b[3:], "magic number"),
        (lambda b: b[:-5], "truncated"),
        (lambda b: b[:6], "header"),
        (lambda b: b"\x00\x00", "fewer than"),
    ],
    ids=["bad-zero-bytes", "bad-type-code", "truncated-data", "truncated-header", "tiny"],
)
def test_malformed_idx_names_file_and_fix(
    tmp_path: Path, to_idx: ToIdx, mangle: Callable[[bytes], bytes], words: str
) -> None:
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(mangle(to_idx(np.zeros((2, 28, 28), np.uint8))))
    with pytest.raises(SweepitError, match=words) as info:
        mnist.read_idx(path)
    assert str(path) in str(info.value) and "sweepit data download mnist" in str(info.value)


def test_gz_that_is_not_gzip_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(b"<html>mirror error page</html>")
    with pytest.raises(SweepitError, match="valid gzip"):
        mnist.read_idx(path)


def test_mnist_rejects_images_of_the_wrong_shape(tmp_path: Path, write_mnist: Writer, to_idx: ToIdx) -> None:
    write_mnist(tmp_path)
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(to_idx(np.zeros((10, 32, 32), np.uint8)))
    with pytest.raises(SweepitError, match=r"\(N, 28, 28\)"):
        mnist.load(SimpleNamespace(root=tmp_path))


def test_mnist_missing_files_say_where_and_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataMissingError) as info:
        mnist.load(SimpleNamespace(root="data/mnist"))
    message = str(info.value)
    assert str(tmp_path.resolve() / "data" / "mnist") in message
    assert "sweepit data download mnist --root data/mnist" in message
    assert "data.synthetic=true" in message
    assert isinstance(info.value, FileNotFoundError)


def test_mnist_one_missing_file_is_named(tmp_path: Path, write_mnist: Writer) -> None:
    write_mnist(tmp_path, gz=True)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataMissingError, match="t10k-labels-idx1-ubyte not found"):
        mnist.load(SimpleNamespace(root=tmp_path))


def test_cifar_reads_python_batches(tmp_path: Path, write_cifar: Writer) -> None:
    batches = write_cifar(tmp_path / cifar.BATCHES_DIR, n=4)
    x_train, y_train, x_test, y_test, source = cifar.load(SimpleNamespace(root=str(tmp_path)))

    assert x_train.shape == (20, 3, 32, 32) and x_test.shape == (4, 3, 32, 32)
    assert x_train.dtype == torch.float32 and y_test.dtype == torch.int64
    assert y_train.tolist() == [label for i in range(1, 6) for label in batches[f"data_batch_{i}"][1]]
    data = batches["test_batch"][0].astype(np.float32).reshape(4, 3, 32, 32) / 255
    expected = (data - np.array(cifar.MEAN).reshape(1, 3, 1, 1)) / np.array(cifar.STD).reshape(1, 3, 1, 1)
    torch.testing.assert_close(x_test, torch.from_numpy(expected.astype(np.float32)))
    assert "cifar-10-batches-py" in source


def test_cifar_rows_are_channel_planes(tmp_path: Path, write_cifar: Writer) -> None:
    folder = tmp_path / cifar.BATCHES_DIR
    write_cifar(folder, n=1)
    red = np.zeros((1, 3072), np.uint8)
    red[0, :1024] = 255  # the first 1024 values are the red plane
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": red, b"labels": [3]}, protocol=2))
    x_test = cifar.load(SimpleNamespace(root=tmp_path))[2]
    for c in range(3):
        value = ((255.0 if c == 0 else 0.0) / 255 - cifar.MEAN[c]) / cifar.STD[c]
        torch.testing.assert_close(x_test[0, c], torch.full((32, 32), value))


def test_cifar_root_may_be_the_batches_folder(tmp_path: Path, write_cifar: Writer) -> None:
    write_cifar(tmp_path / cifar.BATCHES_DIR, n=2)
    assert cifar.load(SimpleNamespace(root=tmp_path / cifar.BATCHES_DIR))[0].shape == (10, 3, 32, 32)


def test_cifar_missing_files_say_where_and_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(DataMissingError) as info:
        cifar.load(SimpleNamespace(root=tmp_path / "cifar"))
    message = str(info.value)
    assert str((tmp_path / "cifar" / cifar.BATCHES_DIR).resolve()) in message
    assert f"sweepit data download cifar10 --root {tmp_path / 'cifar'}" in message


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("this ran during unpickling",))


@pytest.mark.parametrize("payload", [{b"data": _Evil(), b"labels": []}, b"not a pickle", [1, 2]],
                         ids=["code", "garbage", "not-a-dict"])
def test_cifar_refuses_anything_but_arrays(tmp_path: Path, write_cifar: Writer, payload: object,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / cifar.BATCHES_DIR
    write_cifar(folder, n=1)
    raw = payload if isinstance(payload, bytes) else pickle.dumps(payload, protocol=2)
    (folder / "data_batch_3").write_bytes(raw)
    with pytest.raises(SweepitError, match="data_batch_3"):
        cifar.load(SimpleNamespace(root=tmp_path))
    assert "this ran" not in capsys.readouterr().out


def test_gz_read_matches_raw(tmp_path: Path, to_idx: ToIdx) -> None:
    arr = np.arange(12, dtype=np.uint8).reshape(3, 4)
    (tmp_path / "a.gz").write_bytes(gzip.compress(to_idx(arr)))
    np.testing.assert_array_equal(mnist.read_idx(tmp_path / "a.gz"), arr)
