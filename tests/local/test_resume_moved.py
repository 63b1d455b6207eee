"""`sweepit resume DIR` and `sweepit status DIR` act on the directory given, also when the sweep was copied or
moved (sweep.json records absolute paths of where it ran first), and a moved repository still resumes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sweepit_testing import REPO, SWEEPIT, run_train

pytestmark = pytest.mark.slow


def _results(sweep: Path) -> dict[str, dict[str, object]]:
    return {p.parent.name.split("_")[0]: json.loads(p.read_text()) for p in sweep.glob("*/result.json")}


def test_resume_of_a_copied_sweep_runs_in_the_copy_and_leaves_the_original_alone(tmp_path: Path) -> None:
    original = tmp_path / "first" / "sweep"
    # MNIST's files missing from data.root fail that job only, as it loads its data (a bad value, lr=-1, is refused
    # before any job starts: the sweep would not run).
    proc = run_train(["-m", "task=linreg,mnist", "epochs=1", f"data.root={tmp_path / 'no-mnist'}",
                      f"hydra.sweep.dir={original}", "hydra.callbacks.summary.report=false"], tmp_path)
    assert proc.returncode == 1
    assert "MNIST needs its 4 IDX files" in proc.stdout + proc.stderr
    first = _results(original)
    assert first["0"]["status"] == "completed" and first["1"]["status"] == "failed", first
    assert "MNIST needs its 4 IDX files" in str(first["1"]["error"])
    copy = tmp_path / "second" / "sweep"
    shutil.copytree(original, copy)
    before = {p: p.stat().st_mtime_ns for p in original.rglob("*") if p.is_file()}

    status = subprocess.run([SWEEPIT, "status", str(copy)], capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    assert f"sweep directory: {copy}" in status.stdout and "completed" in status.stdout

    resumed = subprocess.run([SWEEPIT, "resume", str(copy)], capture_output=True, text=True, timeout=300,
                             cwd=tmp_path)
    assert resumed.returncode == 1  # the bad job fails again, in the copy
    assert f"hydra.sweep.dir={copy}" in resumed.stderr
    assert {p: p.stat().st_mtime_ns for p in original.rglob("*") if p.is_file()} == before  # untouched
    assert json.loads((copy / "sweep.json").read_text())["sweep_dir"] == str(copy)
    assert _results(copy)["0"]["status"] == "completed" and _results(copy)["1"]["status"] == "failed"


def test_resume_after_the_repository_moved(tmp_path: Path) -> None:
    """The sweep ran from a copy of the repository that then moved: `sweepit resume`, run from the new place,
    finds train.py there."""
    repo = tmp_path / "repo"
    # Not a checkout's venvs (.venv-floors too), caches or built site: they are not the repository.
    shutil.copytree(REPO, repo, ignore=shutil.ignore_patterns(".git", ".venv*", ".*_cache", "site", "outputs",
                                                               "__pycache__", "tests", "bench", "examples"))
    sweep = repo / "outputs" / "moved"
    proc = subprocess.run([sys.executable, str(repo / "train.py"), "-m", "task=linreg,mnist", "epochs=1",
                           f"data.root={tmp_path / 'no-mnist'}", f"hydra.sweep.dir={sweep}",
                           "hydra.callbacks.summary.report=false"], cwd=repo, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    moved = tmp_path / "elsewhere"
    repo.rename(moved)
    resumed = subprocess.run([SWEEPIT, "resume", str(moved / "outputs" / "moved")], capture_output=True, text=True,
                             timeout=300, cwd=moved)
    assert resumed.returncode == 1, resumed.stderr[-2000:]  # ran again (the bad job fails again)
    assert f"{moved / 'train.py'}" in resumed.stderr
    assert _results(moved / "outputs" / "moved")["1"]["status"] == "failed"
