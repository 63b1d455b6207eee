"""download() against a real HTTP server on 127.0.0.1 serving tiny files: no internet needed."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import socket
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from sweepit.errors import ChecksumError, ConfigError, SweepitError
from sweepit.train.data import cifar, download, mnist

MNIST_GZ = [f"{name}.gz" for name in mnist.FILES.values()]
Mirror = tuple[Path, str]  # served folder, base URL
Writer = Callable[..., dict[str, Any]]  # the write_mnist and write_cifar fixtures


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    requests: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: object) -> None:
        _QuietHandler.requests.append(self.path)


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Mirror]:
    """A folder served over HTTP on a free local port: (folder, base URL)."""
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    served = tmp_path / "mirror"
    served.mkdir()
    _QuietHandler.requests = []
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(served))
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield served, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def mnist_on_mirror(
    mirror: Mirror, write_mnist: Writer, monkeypatch: pytest.MonkeyPatch
) -> Mirror:
    """Tiny gzipped MNIST on the mirror; the checksum table holds their md5s (content md5 for the images,
    file md5 for the labels, so both ways of matching are exercised)."""
    served, url = mirror
    write_mnist(served, gz=True)
    table = {}
    for name in MNIST_GZ:
        data = (served / name).read_bytes()
        table[name] = frozenset({md5(gzip.decompress(data)) if "images" in name else md5(data)})
    monkeypatch.setitem(download.CHECKSUMS, "mnist", table)
    return served, url


def test_mnist_download_then_load(mnist_on_mirror: Mirror, tmp_path: Path) -> None:
    served, url = mnist_on_mirror
    root = tmp_path / "data" / "mnist"
    lines: list[str] = []
    paths = download.download("mnist", root, base_url=url, log=lines.append)

    assert paths == [root / name for name in MNIST_GZ]
    assert all(p.read_bytes() == (served / p.name).read_bytes() for p in paths)
    assert sorted(p.name for p in root.iterdir()) == sorted(MNIST_GZ)  # no temporary files left
    assert len(lines) == 4 and all("downloaded" in line and "checksum ok" in line for line in lines)
    assert mnist.load(SimpleNamespace(root=root))[0].shape == (20, 1, 28, 28)


def test_present_verified_files_are_not_fetched_again(mnist_on_mirror: Mirror, tmp_path: Path) -> None:
    _, url = mnist_on_mirror
    download.download("mnist", tmp_path, base_url=url, log=lambda _: None)
    n_requests = len(_QuietHandler.requests)
    lines: list[str] = []
    download.download("mnist", tmp_path, base_url=url.rstrip("/"), log=lines.append)
    assert len(_QuietHandler.requests) == n_requests
    assert all("already present" in line for line in lines)


def test_a_bad_file_in_place_is_replaced(mnist_on_mirror: Mirror, tmp_path: Path) -> None:
    served, url = mnist_on_mirror
    (tmp_path / MNIST_GZ[0]).write_bytes(b"half a file")
    lines: list[str] = []
    download.download("mnist", tmp_path, base_url=url, log=lines.append)
    assert (tmp_path / MNIST_GZ[0]).read_bytes() == (served / MNIST_GZ[0]).read_bytes()
    assert "checksum is wrong" in lines[0]


def test_corrupted_download_raises_and_leaves_nothing(mnist_on_mirror: Mirror, tmp_path: Path) -> None:
    served, url = mnist_on_mirror
    name = MNIST_GZ[1]
    expected = next(iter(download.CHECKSUMS["mnist"][name]))
    (served / name).write_bytes(gzip.compress(b"corrupted in transit"))
    root = tmp_path / "out"
    with pytest.raises(ChecksumError) as info:
        download.download("mnist", root, base_url=url, log=lambda _: None)
    message = str(info.value)
    assert name in message and expected in message and md5((served / name).read_bytes()) in message
    assert "again" in message and "mirror" in message
    assert not (root / name).exists()
    assert not [p for p in root.iterdir() if p.name.endswith(".part")]


def _cifar_archive(folder: Path, write_cifar: Writer, extra: dict[str, bytes] | None = None) -> bytes:
    write_cifar(folder / "src" / cifar.BATCHES_DIR, n=2)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder / "src" / cifar.BATCHES_DIR, arcname=cifar.BATCHES_DIR)
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_cifar_download_extracts_the_batches(
    mirror: Mirror, tmp_path: Path, write_cifar: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    served, url = mirror
    archive = _cifar_archive(tmp_path, write_cifar, {f"{cifar.BATCHES_DIR}/readme.html": b"<p>hi</p>"})
    (served / "cifar-10-python.tar.gz").write_bytes(archive)
    monkeypatch.setitem(download.CHECKSUMS, "cifar10", {"cifar-10-python.tar.gz": frozenset({md5(archive)})})
    root = tmp_path / "cifar"
    lines: list[str] = []

    paths = download.download("cifar10", root, base_url=url, log=lines.append)
    assert [p.name for p in paths] == [*cifar.TRAIN_BATCHES, cifar.TEST_BATCH]
    assert cifar.load(SimpleNamespace(root=root))[0].shape == (10, 3, 32, 32)
    assert "extracted 7 files" in lines[-1]  # the six batches and the readme

    again: list[str] = []
    assert download.download("cifar10", root, base_url=url, log=again.append) == paths
    assert "already present" in again[0] and "already extracted" in again[1]


@pytest.mark.parametrize("evil", ["../escaped", f"{cifar.BATCHES_DIR}/../../escaped", "/tmp/escaped-abs"])
def test_cifar_archive_cannot_write_outside_root(
    mirror: Mirror, tmp_path: Path, write_cifar: Writer, monkeypatch: pytest.MonkeyPatch,
    evil: str,
) -> None:
    served, url = mirror
    archive = _cifar_archive(tmp_path, write_cifar, {evil: b"gotcha"})
    (served / "cifar-10-python.tar.gz").write_bytes(archive)
    monkeypatch.setitem(download.CHECKSUMS, "cifar10", {"cifar-10-python.tar.gz": frozenset({md5(archive)})})
    root = tmp_path / "deep" / "cifar"
    with pytest.raises(SweepitError, match="plain path inside"):
        download.download("cifar10", root, base_url=url, log=lambda _: None)
    assert not list(tmp_path.rglob("escaped*")) and not Path("/tmp/escaped-abs").exists()
    assert not (root / cifar.BATCHES_DIR).exists()  # refused before anything was written


def test_unknown_data_set_lists_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\['cifar10', 'mnist'\].*'imagenet'"):
        download.download("imagenet", tmp_path)


def test_unreachable_mirror_names_the_url_and_the_login_node_hint(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on once the socket is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mnist/"
    with pytest.raises(SweepitError, match="login node") as info:
        download.download("mnist", tmp_path, base_url=url, log=lambda _: None)
    assert f"{url}{MNIST_GZ[0]}" in str(info.value)
    assert not list(tmp_path.iterdir())


def test_missing_file_on_the_mirror_is_a_clear_error(mirror: Mirror, tmp_path: Path) -> None:
    _, url = mirror
    with pytest.raises(SweepitError, match="404") as info:
        download.download("mnist", tmp_path / "out", base_url=url, log=lambda _: None)
    assert url in str(info.value)


def test_cifar_archive_without_the_batches_is_refused(
    mirror: Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served, url = mirror
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo(f"{cifar.BATCHES_DIR}/data_batch_1")
        tar.addfile(info, io.BytesIO(b""))
    (served / "cifar-10-python.tar.gz").write_bytes(buffer.getvalue())
    monkeypatch.setitem(download.CHECKSUMS, "cifar10",
                        {"cifar-10-python.tar.gz": frozenset({md5(buffer.getvalue())})})
    with pytest.raises(SweepitError, match=r"data_batch_2, .*test_batch are not in"):
        download.download("cifar10", tmp_path, base_url=url, log=lambda _: None)
    assert not (tmp_path / cifar.BATCHES_DIR).exists()
