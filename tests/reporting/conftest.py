"""A real sweep of train.py (linreg, optimizer x lr, 3 epochs), run once per session and copied per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweepit_testing import private_copy, sweep_once

# Basic launcher: the report must read any launcher's sweeps, and this one has no manifest (sweep.json).
SWEEP_ARGS = ["-m", "hydra/launcher=basic", "task=linreg", "epochs=3", "device=cpu", "trainer.threads=1",
              "optimizer=adam,sgd", "lr=0.01,0.1"]


@pytest.fixture(scope="session")
def linreg_sweep_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sweep_once(tmp_path_factory, "linreg_sweep", SWEEP_ARGS)


@pytest.fixture
def linreg_sweep(linreg_sweep_once: Path, tmp_path: Path) -> Path:
    """A private copy of the real sweep: tests may break its jobs."""
    return private_copy(linreg_sweep_once, tmp_path, "report")
