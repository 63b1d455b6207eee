"""Every `make sweep-<study>` target runs its study for real (tiny `ARGS`), so the Makefile cannot silently
break again: a pattern rule listed in .PHONY once made every one of them do nothing and exit 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sweepit_testing import REPO

pytestmark = pytest.mark.slow

STUDIES = sorted(p.stem for p in (REPO / "sweeps").glob("*.yaml"))
SYNTHETIC = "data.synthetic=true data.n_synthetic=200"
# Each study shrunk to one or two quick jobs on this machine's CPU (a key swept on the command line replaces the
# study's hydra.sweeper.params entry for it).
TINY = {
    "optimizers": "epochs=1 optimizer=sgd,adam lr=0.1",
    "optimizer_lr": "epochs=1 optimizer=sgd lr=0.1,0.01",
    "batch_size": f"epochs=1 {SYNTHETIC} batch_size=32,64",
    "mnist_best": f"epochs=1 {SYNTHETIC} task.hidden=16",
    "optuna_lr": "epochs=1 hydra.sweeper.n_trials=2 hydra.sweeper.n_jobs=1",
    "scaling": "data.n_synthetic=200 epochs=1 repeat=0",  # after the CPU variant's own overrides: these win
}
EXPECTED_JOBS = {"optimizers": 2, "optimizer_lr": 2, "batch_size": 2, "mnist_best": 1, "optuna_lr": 2, "scaling": 2}


def test_every_study_has_a_tiny_variant_here() -> None:
    assert sorted(TINY) == STUDIES, "a new file in sweeps/ needs its tiny ARGS in this test"


@pytest.mark.parametrize("study", STUDIES)
def test_make_sweep_target_runs_the_study(study: str, tmp_path: Path) -> None:
    sweep = tmp_path / study
    args = f"{TINY[study]} hydra.sweep.dir={sweep} hydra.callbacks.summary.report=false"
    proc = subprocess.run(["make", "-C", str(REPO), f"sweep-{study}", f"ARGS={args}", f"PY={sys.executable}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    results = [json.loads(p.read_text()) for p in sweep.glob("*/result.json")]
    assert len(results) == EXPECTED_JOBS[study], proc.stdout[-2000:]
    assert all(r["status"] in ("completed", "pruned") for r in results), results
    multirun = (sweep / "multirun.yaml").read_text()
    assert f"study: {study}" in multirun  # the study's own file composed, not the root config


def test_make_sweep_optuna_is_the_optuna_lr_study(tmp_path: Path) -> None:
    proc = subprocess.run(["make", "-n", "-C", str(REPO), "sweep-optuna", f"PY={sys.executable}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--config-name optuna_lr" in proc.stdout
