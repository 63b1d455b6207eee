"""A real sweep of train.py (linreg, optimizer x lr, 3 epochs), run once per session and copied per test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sweepit_testing import run_train

# Basic launcher: the report must read any launcher's sweeps, and this one has no manifest (sweep.json).
SWEEP_ARGS = ["-m", "hydra/launcher=basic", "task=linreg", "epochs=3", "device=cpu", "trainer.threads=1",
              "optimizer=adam,sgd", "lr=0.01,0.1"]


@pytest.fixture(scope="session")
def linreg_sweep_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("linreg_sweep")
    proc = run_train(SWEEP_ARGS, cwd, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = (cwd / "outputs" / "multirun").iterdir()
    return sweep


@pytest.fixture
def linreg_sweep(linreg_sweep_once: Path, tmp_path: Path) -> Path:
    """A private copy of the real sweep: tests may break its jobs."""
    copy = tmp_path / "outputs" / "multirun" / linreg_sweep_once.name
    shutil.copytree(linreg_sweep_once, copy, ignore=shutil.ignore_patterns("report"))
    return copy
