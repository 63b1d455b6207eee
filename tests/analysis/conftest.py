"""A real sweep of train.py (linreg, optimizer x lr, 2 epochs, every file a job can keep), run once per session and
copied per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweepit_testing import private_copy, sweep_once

# The local launcher (sweep.json), both weight files and the checkpoint kept: all that sweepit.load reads.
SWEEP_ARGS = ["-m", "task=linreg", "epochs=2", "device=cpu", "trainer.threads=1", "optimizer=adam,sgd",
              "lr=0.01,0.1", "trainer.save_model=both", "trainer.keep_checkpoint=true",
              "hydra.callbacks.summary.report=false"]


@pytest.fixture(scope="session")
def linreg_sweep_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sweep_once(tmp_path_factory, "analysis_sweep", SWEEP_ARGS)


@pytest.fixture
def linreg_sweep(linreg_sweep_once: Path, tmp_path: Path) -> Path:
    """A private copy of the real sweep, under outputs/multirun/ as a sweep is: tests may break its jobs."""
    return private_copy(linreg_sweep_once, tmp_path)
