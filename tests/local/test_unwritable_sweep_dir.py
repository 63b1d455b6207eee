"""A sweep directory that cannot be written (a read-only file system, a full one: real tmpfs mounts) gives sweepit's
paragraph and exit 1, for a new sweep and for `sweepit resume` alike: the path, what is wrong, what to do and the
command to go on; no traceback, and nothing already written is changed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sweepit.results._lock import LOCK_FILE
from sweepit_testing import SWEEPIT, fill, remount, tmpfs

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
APP = Path(__file__).parent / "app" / "launcher_test_app.py"
WHY = {"read-only": "the file system is read-only", "full": "the file system is full"}


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "256k") as mount:
        yield mount


def _unwritable(disk: Path, how: str) -> None:
    if how == "read-only":
        remount(disk, "ro")
    else:
        fill(disk)


def _said(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return " ".join(proc.stderr.split())


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("how", ["read-only", "full"])
def test_a_new_sweep_in_an_unwritable_folder_says_so_in_a_paragraph(disk: Path, how: str) -> None:
    _unwritable(disk, how)
    sweep = disk / "sweep"
    proc = subprocess.run([sys.executable, str(APP), "-m", f"hydra.sweep.dir={sweep}", "x=0,1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    said = _said(proc)
    assert f"sweepit could not write {sweep}/{LOCK_FILE}: {WHY[how]}" in said, proc.stderr
    assert "No job was started" in said and "run the same command again, or pick another hydra.sweep.dir" in said
    assert not (sweep / LOCK_FILE).exists()  # no empty lock left behind to block the next try


@pytest.mark.parametrize("how", ["read-only", "full"])
def test_resuming_a_sweep_in_an_unwritable_folder_says_so_and_changes_nothing(disk: Path, how: str) -> None:
    sweep = disk / "sweep"
    first = subprocess.run([sys.executable, str(APP), "-m", f"hydra.sweep.dir={sweep}", "x=0,1", "raise_on=[1]"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert first.returncode == 1 and f"sweepit resume {sweep}" in first.stderr, first.stderr  # job 1 failed
    before = _files(sweep)
    _unwritable(disk, how)
    proc = subprocess.run([SWEEPIT, "resume", str(sweep)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    said = _said(proc)
    assert f"sweepit could not write {sweep}/" in said and WHY[how] in said, proc.stderr
    assert f"`sweepit resume {sweep}`" in said, proc.stderr
    if how == "full":
        (disk / "filler").unlink()
    assert _files(sweep) == before  # every result, sweep.json and log as they were


@pytest.mark.parametrize("how", ["through a file", "under a folder that cannot be made"])
def test_a_sweep_dir_that_cannot_be_made_names_the_cause_and_its_fix(tmp_path: Path, how: str) -> None:
    """Errno 20 and 2 were told "Free space or fix the permissions": the cause is a file in the way, or a missing
    folder that cannot be created (a path under /proc)."""
    if how == "through a file":
        blocker = tmp_path / "results.csv"
        blocker.write_text("a file, not a folder\n")
        sweep = blocker / "sweep"
        why, fix = f"{blocker} is a file, not a folder", "Pick a path that does not go through a file"
    else:
        missing = Path("/proc") / f"sweepit-test-{tmp_path.name}"
        sweep = missing / "sweep"
        why = f"{missing} does not exist and cannot be created in /proc"
        fix = f"Create {missing}, or pick a path whose missing folders can be created"
    proc = subprocess.run([sys.executable, str(APP), "-m", f"hydra.sweep.dir={sweep}", "x=0,1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    said = _said(proc)
    assert f"sweepit could not write {sweep}/{LOCK_FILE}: {why};" in said, proc.stderr
    assert f"{fix}, then run again" in said and "No job was started" in said, proc.stderr
    assert "Free space" not in said and "permissions" not in said, proc.stderr
