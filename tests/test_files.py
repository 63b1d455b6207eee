"""sweepit._files: the one atomic write that results, manifests, checkpoints, reports and downloads share."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest

from sweepit._files import atomic_file, atomic_write


def test_atomic_write_leaves_the_old_file_when_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "result.json"
    atomic_write(path, '{"status": "completed"}\n')

    def killed(*_: object) -> None:
        raise KeyboardInterrupt  # as if the job were stopped between writing and renaming

    monkeypatch.setattr("sweepit._files.os.replace", killed)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, '{"status": "fail')
    assert json.loads(path.read_text()) == {"status": "completed"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]  # no temporary file left behind


def test_an_error_inside_the_block_keeps_the_old_content(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"old")
    with pytest.raises(ValueError, match="checksum"), atomic_file(path, binary=True) as f:
        f.write(b"new but bad")
        f.flush()
        assert Path(f.name).read_bytes() == b"new but bad"  # the temporary file can be checked by path
        raise ValueError("checksum mismatch")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["data.bin"]


def test_files_are_readable_as_the_umask_allows_not_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        import importlib

        import sweepit._files as files

        importlib.reload(files)  # the umask is read once, at import
        path = files.atomic_write(tmp_path / "sub" / "out.txt", "x", fsync=False)
    finally:
        os.umask(old)
        importlib.reload(files)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert path.read_text() == "x"


def test_a_full_disk_names_the_file_and_keeps_the_old_content(small_tmpfs: Path) -> None:
    """A write that does not fit: the error names the file and says nothing was replaced; the previous
    version is intact and no temporary file is left."""
    path = small_tmpfs / "metrics.jsonl"
    atomic_write(path, "old\n")
    (small_tmpfs / "filler").write_bytes(b"x" * (64 * 1024 - 8192))  # most of the space gone
    with pytest.raises(OSError) as e:
        atomic_write(path, "y" * 32 * 1024)
    assert e.value.errno == errno.ENOSPC
    said = str(e.value)
    assert str(path) in said and "file system is full" in said and "nothing was replaced" in said
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in small_tmpfs.iterdir()) == ["filler", "metrics.jsonl"]  # no temporary file left
