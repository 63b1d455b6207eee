"""The one way sweepit replaces a file: write a temporary file beside it, then rename it over the old one, so that a
reader sees the old file or the new one, never half of one, and a job killed while writing keeps the previous one."""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from sweepit.errors import OutputWriteError

_UMASK = os.umask(0)  # read by setting it, then set back
os.umask(_UMASK)


def remove_temporaries(folder: Path, keep: str = "") -> None:
    """Delete what `atomic_file` writes killed mid-way (SIGKILL, out of memory) left in `folder`, but those of the file
    `keep`. Only for a folder no live process writes to but for `keep`: a driver calls it once the job that owned the
    folder is gone."""
    for tmp in Path(folder).glob(".*.tmp"):
        if keep and tmp.name.startswith(f".{keep}."):
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()


@contextmanager
def atomic_file(path: Path, *, binary: bool = False, fsync: bool = True, replace: bool = True) -> Iterator[IO[Any]]:
    """A file to write `path`'s new content into; it replaces `path` when the block ends without an error (on an
    error `path` keeps its old content). The file gets the permissions the umask allows (not mkstemp's 0600: results
    are for the group to read on a cluster). `fsync=False`: for files rewritten often whose loss in a power cut costs
    nothing (the manifest, report pages). `f.name` is the temporary file, to check it before it replaces the old one
    (a download's checksum). `replace=False` creates `path` only where there is none, in one step (a hard link,
    atomic on NFS too): FileExistsError when a file is there, which is left as it is."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise _clear(e, path) from e
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        os.close(fd)
        with open(tmp, "wb" if binary else "w") as f:  # by name, so that `f.name` is the temporary path
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # FileExistsError when another process's file is there: it stays
            os.unlink(tmp)
        if fsync:
            _fsync_dir(path.parent)  # the rename itself survives a crash
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS):
            raise _clear(e, path) from e
        raise


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # a file system that cannot open directories (rare): the file itself is synced
    with contextlib.suppress(OSError):
        os.fsync(fd)
    os.close(fd)


def _clear(e: OSError, path: Path) -> OutputWriteError:
    """The same error (its errno), saying which file could not be written, why in words of its cause, that its old
    content is intact, and what to do."""
    why, fix = _cause(e, Path(path))
    return OutputWriteError(e.errno, f"sweepit could not write {path}: {why}; nothing was replaced (a file there "
                                     f"keeps its previous content). {fix}, then run again or resume the sweep")


def _cause(e: OSError, path: Path) -> tuple[str, str]:
    """What is wrong and what to do, for each errno a write gets; the system's words for any other."""
    code = e.errno or 0
    if code in (errno.ENOENT, errno.ENOTDIR):
        # The nearest folder on the path that exists says which: a file in the way, or a folder that cannot be made.
        below = path
        for above in path.parents:
            if os.path.lexists(above):
                if not above.is_dir():
                    return (f"{above} is a file, not a folder", "Pick a path that does not go through a file")
                return (f"{below} does not exist and cannot be created in {above}",
                        f"Create {below}, or pick a path whose missing folders can be created")
            below = above
    if code in (errno.EACCES, errno.EPERM):
        return "permission is denied", f"Make {path.parent} writable for you, or pick another folder"
    known = {errno.ENOSPC: ("the file system is full", "Free space on it"),
             errno.EDQUOT: ("the disk quota is used up", "Free space within the quota, or ask for a larger one"),
             errno.EROFS: ("the file system is read-only", "Pick a folder on a writable file system")}
    return known.get(code, (e.strerror or str(e), "Fix that"))


def atomic_write(path: Path, data: str | bytes, *, fsync: bool = True, replace: bool = True) -> Path:
    """Replace `path` with `data` (see `atomic_file`; `replace=False`: only where there is no file)."""
    with atomic_file(path, binary=isinstance(data, bytes), fsync=fsync, replace=replace) as f:
        f.write(data)
    return Path(path)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a large sweep's files are read: reading makes many objects and no
    reference cycles, and the collector would walk them all again as they pile up."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
