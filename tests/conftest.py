"""Shared fixtures: compose the real configs from conf/, shrunk to run in seconds on a CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"

# Shrinks a job to a few steps: few samples, one epoch, one thread.
TINY = ["epochs=1", "device=cpu", "trainer.threads=1"]


@pytest.fixture
def compose_cfg() -> Iterator[Callable[..., DictConfig]]:
    """compose_cfg("task=mnist", ...) returns the job config as `python train.py <overrides>` sees it."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):

        def _compose(*overrides: str) -> DictConfig:
            return compose(config_name="config", overrides=list(overrides))

        yield _compose


def run_train(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the real entry point in a subprocess, with outputs/ under `cwd`."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(REPO / "train.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
