"""Real multiruns of train.py in a subprocess: the README's first command, failures, bad group options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sweepit_testing import run_train

pytestmark = pytest.mark.slow


def _sweep_dir(cwd: Path, study: str = "multirun") -> Path:
    (sweep,) = (cwd / "outputs" / study).iterdir()
    return sweep


def test_unknown_group_option_lists_the_valid_ones(tmp_path: Path) -> None:
    proc = run_train(["optimizer=adamx"], tmp_path)
    assert proc.returncode != 0
    assert "Could not find 'optimizer/adamx'" in proc.stderr
    assert "Available options" in proc.stderr and "nesterov" in proc.stderr
    assert not (tmp_path / "outputs").exists()  # nothing started


def test_single_run_goes_under_outputs_runs(tmp_path: Path) -> None:
    proc = run_train(["task=linreg", "epochs=2"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run,) = (tmp_path / "outputs" / "runs").iterdir()
    assert json.loads((run / "result.json").read_text())["status"] == "completed"
    assert "Epoch 2/2" in proc.stdout


@pytest.mark.parametrize(("override", "words"), [
    ("lr=-1", "lr must be a finite number > 0, but got lr=-1"),
    ("seed=x", "seed must be an integer >= 0, but got seed='x'"),
    pytest.param("device=cuda", "device=cuda needs a CUDA GPU, but torch sees none here",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
    ("trainer.checkpoint_every=0", "trainer.checkpoint_every must be an integer >= 1"),
])
def test_a_single_run_with_a_bad_value_prints_one_paragraph_and_no_traceback(tmp_path: Path, override: str,
                                                                             words: str) -> None:
    proc = run_train(["task=linreg", "epochs=1", override], tmp_path)
    assert proc.returncode == 1
    assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "HYDRA_FULL_ERROR" not in proc.stderr, proc.stderr  # sweepit's message is all there is to see
    (job,) = (tmp_path / "outputs" / "runs").iterdir()
    assert json.loads((job / "result.json").read_text())["status"] == "failed"  # recorded all the same
