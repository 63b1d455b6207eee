"""`sweepit data download`: MNIST or CIFAR-10 into a folder with urllib, each file streamed to a temporary file,
checked against its published md5, then renamed. A file in place with a good checksum is kept, so a rerun goes on."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import shutil
import tarfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import IO

from sweepit._files import atomic_file
from sweepit.errors import ChecksumError, ConfigError, SweepitError
from sweepit.train.data import cifar

BASE_URLS = {
    "mnist": "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "cifar10": "https://www.cs.toronto.edu/~kriz/",
}
# File name -> accepted md5s. For .gz files either the md5 of the file itself or of its gunzipped content
# matches: mirrors have recompressed MNIST, which changes the former but never the latter.
CHECKSUMS: dict[str, dict[str, frozenset[str]]] = {
    "mnist": {
        "train-images-idx3-ubyte.gz": frozenset({"6bbc9ace898e44ae57da46a324031adb",
                                                 "f68b3c2dcbeaaa9fbdd348bbdeb94873"}),
        "train-labels-idx1-ubyte.gz": frozenset({"a25bea736e30d166cdddb491f175f624",
                                                 "d53e105ee54ea40749a09fcbcd1e9432"}),
        "t10k-images-idx3-ubyte.gz": frozenset({"2646ac647ad5339dbf082846283269ea",
                                                "9fb629c4189551a2d022fa330f9573f3"}),
        "t10k-labels-idx1-ubyte.gz": frozenset({"27ae3e4e09519cfbb04c329615203637",
                                                "ec29112dd5afa0611ce80d1b7f02629c"}),
    },
    "cifar10": {"cifar-10-python.tar.gz": frozenset({"c58f30108f718f92721af3b95e74349a"})},
}
TIMEOUT_S = 60  # per connection attempt and per read; a stalled mirror fails instead of hanging a job
_CHUNK_BYTES = 1 << 20


def download(dataset: str, root: Path, base_url: str | None = None, *, log: Callable[[str], None] = print
             ) -> list[Path]:
    """Fetch `dataset` into `root` (`base_url`: another mirror's folder URL) and return the files its loader reads."""
    if dataset not in CHECKSUMS:
        raise ConfigError(
            f"the data set to download must be one of {sorted(CHECKSUMS)}, but got {dataset!r}. "
            "Fix: name one of them, e.g. `sweepit data download mnist --root data/mnist`."
        )
    root.mkdir(parents=True, exist_ok=True)
    url = (base_url or BASE_URLS[dataset]).rstrip("/") + "/"
    fetched = [_fetch(url + name, root / name, md5s, log) for name, md5s in CHECKSUMS[dataset].items()]
    return _extract_cifar(fetched[0], root, log) if dataset == "cifar10" else fetched


def _fetch(url: str, dest: Path, md5s: frozenset[str], log: Callable[[str], None]) -> Path:
    gzipped = dest.name.endswith(".gz") and not dest.name.endswith(".tar.gz")  # a .tar.gz has only its published md5
    if dest.is_file():
        if _md5_ok(dest, md5s, gzipped):
            log(f"{dest}: already present, checksum ok")
            return dest
        log(f"{dest}: present but its checksum is wrong; deleting it and downloading again")
        dest.unlink()
    with atomic_file(dest, binary=True) as out:
        n_bytes = _stream(url, out)
        out.flush()
        if not _md5_ok(Path(out.name), md5s, gzipped):
            raise ChecksumError(
                f"a download must match its published md5, but {dest.name} from {url} has md5 {_md5(Path(out.name))}, "
                f"expected {' or '.join(sorted(md5s))}; the bad file was deleted. Fix: run the command again "
                "(the transfer may have been cut), or check the mirror (pass another base URL)."
            )
    log(f"{dest}: downloaded {n_bytes / 1e6:.1f} MB from {url}, checksum ok")
    return dest


def _stream(url: str, out: IO[bytes]) -> int:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            shutil.copyfileobj(response, out, _CHUNK_BYTES)
    except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError) as e:
        raise SweepitError(
            f"downloading needs the mirror to answer, but fetching {url} failed: {e}. "
            "Fix: compute nodes often have no internet; run `sweepit data download` on a login node "
            "and point data.root at the same folder, or pass another mirror's base URL."
        ) from e
    return out.tell()


def _md5(path: Path, *, gunzip: bool = False) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with gzip.open(path, "rb") if gunzip else path.open("rb") as f:
        while chunk := f.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _md5_ok(path: Path, md5s: frozenset[str], gzipped: bool) -> bool:
    try:
        return _md5(path) in md5s or (gzipped and _md5(path, gunzip=True) in md5s)
    except (OSError, EOFError):  # not gzip at all: certainly not the file we want
        return False


def _extract_cifar(archive: Path, root: Path, log: Callable[[str], None]) -> list[Path]:
    """Unpack the batches into `root/cifar-10-batches-py`, refusing members that would land elsewhere."""
    wanted = [*cifar.TRAIN_BATCHES, cifar.TEST_BATCH]
    folder = root / cifar.BATCHES_DIR
    targets = [folder / name for name in wanted]
    # Batches older than the archive came from an earlier download: extract again.
    archive_mtime = archive.stat().st_mtime
    if all(t.is_file() and t.stat().st_mtime >= archive_mtime for t in targets):
        log(f"{folder}: already extracted")
        return targets
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()  # all checked before anything is written
        for member in members:
            parts = PurePosixPath(member.name).parts
            if member.name.startswith("/") or ".." in parts or member.islnk() or member.issym():
                raise SweepitError(
                    f"an archive member must be a plain path inside the target folder, but {archive} holds "
                    f"{member.name!r}. Fix: delete {archive} and download it again from the official mirror."
                )
        # The batches, batches.meta and the readme; anything elsewhere in an archive is not ours to unpack.
        inside = PurePosixPath(cifar.BATCHES_DIR)
        files = [m for m in members if m.isfile() and PurePosixPath(m.name).parent == inside]
        missing = sorted(set(wanted) - {PurePosixPath(m.name).name for m in files})
        if missing:
            raise SweepitError(
                f"the CIFAR-10 archive must hold {', '.join(wanted)} under {cifar.BATCHES_DIR}/, but "
                f"{', '.join(missing)} are not in {archive}. Fix: delete {archive} and download it again."
            )
        folder.mkdir(exist_ok=True)
        for member in files:
            source = tar.extractfile(member)
            assert source is not None  # a regular file always has content
            target = folder / PurePosixPath(member.name).name
            with atomic_file(target, binary=True) as out:
                shutil.copyfileobj(source, out, _CHUNK_BYTES)
    log(f"{folder}: extracted {len(files)} files")
    return targets
