"""The one way sweepit replaces a file: write a temporary file beside it, then rename it over the old one.

A reader (a second process, a browser, `sweepit status` on another node) sees the old file or the new one,
never half of one, and a job killed while writing keeps the previous version.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


@contextmanager
def atomic_file(path: Path, *, binary: bool = False, fsync: bool = True) -> Iterator[IO[Any]]:
    """A file to write `path`'s new content into; it replaces `path` when the block ends without an error.

    On an error the temporary file is removed and `path` keeps its old content. The file gets the
    permissions the umask allows (not mkstemp's 0600: results are for the group to read on a cluster).
    `fsync=False` skips the flush to disk, for files rewritten often whose loss in a power cut costs
    nothing (the manifest, report pages). The temporary file's path is `f.name`, to check it before it
    replaces the old one (a download's checksum).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        os.close(fd)
        with open(tmp, "wb" if binary else "w") as f:  # by name, so that `f.name` is the temporary path
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: Path, data: str | bytes, *, fsync: bool = True) -> Path:
    """Replace `path` with `data` (see `atomic_file`)."""
    with atomic_file(path, binary=isinstance(data, bytes), fsync=fsync) as f:
        f.write(data)
    return Path(path)
