"""Helpers of the Optuna sweeper tests: run a real multirun in a subprocess, read its study back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from sweepit_testing import REPO, run_command

# A small, fast search: digits, CPU, one thread, few epochs.
FAST = ["device=cpu", "trainer.threads=1", "trainer.checkpoint=false", "trainer.log_every_epoch=false",
        "hydra/sweeper=optuna", "hydra.callbacks.summary.report=false"]


def run_search(args: list[str], cwd: Path, timeout: float = 240, options: tuple[str, ...] = (),
               python: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`python <python> train.py <options> -m <FAST> <args>`, outputs under `cwd`."""
    return run_command([sys.executable, *python, REPO / "train.py", *options, "-m", *FAST, *args], cwd,
                       timeout_s=timeout)


def load(sweep_dir: Path, study_name: str) -> Any:
    import optuna

    backend = optuna.storages.journal.JournalFileBackend(str(sweep_dir / "optuna.journal"))
    storage = optuna.storages.JournalStorage(backend)
    return optuna.load_study(study_name=study_name, storage=storage)


def job_dirs(sweep_dir: Path) -> list[Path]:
    return sorted((p for p in sweep_dir.iterdir() if p.is_dir() and p.name.split("_")[0].isdigit()),
                  key=lambda p: int(p.name.split("_")[0]))


def conditional_space(cfg: Any, trial: Any) -> None:
    """A custom search space (hydra.sweeper.custom_search_space): a momentum only for sgd, a key the config lacks."""
    assert "hydra" in cfg  # the sweep's config, as the released plugin passes it
    if trial.params["opt"] == "sgd":
        trial.suggest_float("+momentum", 0.5, 0.9)
