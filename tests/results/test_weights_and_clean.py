"""Trained weights are a result (trainer.save_model) and `sweepit clean` frees their disk, keeping the best job's;
`sweepit --version` and `python train.py --help`. Real sweeps of train.py and the real `sweepit` command."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import sweepit
from sweepit_testing import REPO, run_train

pytestmark = pytest.mark.slow


def sweepit_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sweepit.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("weights")
    sweep = root / "sweep"
    proc = run_train(["-m", "task=digits", "epochs=4", "lr=0.003,0.3", "trainer.save_model=both",
                      "trainer.threads=1", f"hydra.sweep.dir={sweep}"], root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "weights: " in proc.stdout and f"sweepit clean {sweep}" in proc.stdout  # the summary says what they take
    return sweep


def jobs(sweep: Path) -> dict[int, Path]:
    return {int(p.name.split("_")[0]): p for p in sweep.iterdir() if (p / "result.json").is_file()}


def test_each_job_keeps_its_best_and_last_weights(sweep: Path) -> None:
    for job_dir in jobs(sweep).values():
        result = json.loads((job_dir / "result.json").read_text())
        best = torch.load(job_dir / "model_best.pt", weights_only=True)
        last = torch.load(job_dir / "model_last.pt", weights_only=True)
        assert (best["epoch"], best["metric"], best["value"]) == (result["best_epoch"], "val_acc", result["best_value"])
        assert last["epoch"] == 4 and last["value"] == result["final"]["val_acc"]
        assert result["weights"] == {n: (job_dir / n).stat().st_size for n in ("model_best.pt", "model_last.pt")}
        assert best["model"].keys() == last["model"].keys() and all(t.device.type == "cpu"
                                                                    for t in best["model"].values())


def test_clean_keeps_the_best_jobs_weights_and_resumable_checkpoints(sweep: Path, tmp_path: Path) -> None:
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    by_num = jobs(copy)
    results = {n: json.loads((d / "result.json").read_text()) for n, d in by_num.items()}
    best = max(results, key=lambda n: results[n]["objective"])
    other = 1 - best
    (by_num[other] / "checkpoint.pt").write_bytes(b"x" * 10)  # a completed job's kept checkpoint: nothing resumes it
    failed = copy / "2_lr=9"  # a failed job's checkpoint: `sweepit resume` continues from it
    failed.mkdir()
    (failed / "result.json").write_text(json.dumps({"status": "failed", "objective": None}))
    (failed / "checkpoint.pt").write_bytes(b"y" * 10)

    dry = sweepit_cli("clean", str(copy), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would delete 3 files" in dry.stdout
    assert (by_num[other] / "model_best.pt").is_file()  # a dry run deletes nothing

    done = sweepit_cli("clean", str(copy))
    assert done.returncode == 0, done.stderr
    assert "deleted 3 files" in done.stdout and f"kept the best job's ({best})" in done.stdout
    assert sorted(p.name for p in by_num[other].glob("*.pt")) == []
    assert sorted(p.name for p in by_num[best].glob("*.pt")) == ["model_best.pt", "model_last.pt"]
    assert (failed / "checkpoint.pt").is_file()

    everything = sweepit_cli("clean", str(copy), "--all")
    assert everything.returncode == 0 and "deleted 2 files" in everything.stdout
    assert not list(by_num[best].glob("*.pt"))


def test_clean_refuses_while_a_driver_runs_the_sweep(sweep: Path, tmp_path: Path) -> None:
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    driver = subprocess.Popen(["sleep", "60"])
    try:
        (copy / "sweep.lock").write_text(json.dumps({"host": socket.gethostname(), "pid": driver.pid,
                                                     "since": "now", "argv": ["train.py", "-m"]}))
        proc = sweepit_cli("clean", str(copy))
    finally:
        driver.kill()
        driver.wait()
    assert proc.returncode == 2
    assert "sweepit clean runs on a sweep that has ended" in proc.stderr and f"pid {driver.pid}" in proc.stderr
    assert all((d / "model_best.pt").is_file() for d in jobs(copy).values())


def test_a_bad_save_model_is_one_paragraph(tmp_path: Path) -> None:
    proc = run_train(["task=linreg", "epochs=1", "trainer.save_model=sometimes", f"hydra.run.dir={tmp_path / 'r'}"],
                     tmp_path)
    assert proc.returncode != 0
    assert "trainer.save_model must be one of best, last, both, none, but got trainer.save_model='sometimes'" \
        in proc.stderr
    assert "Traceback" not in proc.stderr


def test_version_and_help_name_what_there_is(tmp_path: Path) -> None:
    version = sweepit_cli("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"sweepit {sweepit.__version__}"
    proc = subprocess.run([sys.executable, "-X", "importtime", str(REPO / "train.py"), "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # Only a job imports torch: not `--help`, nor a Slurm sweep's driver.
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "hydra" in imported and "torch" not in imported
    launchers = next(line for line in proc.stdout.splitlines() if line.startswith("hydra/launcher:"))
    names = set(launchers.split(": ")[1].split(", "))
    assert {"local", "slurm", "marenostrum5", "juwels_booster", "cte_power"} <= names
    sweepers = next(line for line in proc.stdout.splitlines() if line.startswith("hydra/sweeper:"))
    assert "optuna" in sweepers
    assert "logger: csv, many, mlflow, tensorboard, wandb" in proc.stdout
