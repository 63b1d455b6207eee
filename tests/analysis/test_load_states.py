"""sweepit.load on sweeps that are not simply done: one running (read while it runs, then stopped), a broken one,
an Optuna sweep, and several sweeps under one folder in one frame."""

from __future__ import annotations

import csv
import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import sweepit
from sweepit.errors import SweepitError
from sweepit_testing import REPO, child_env, run_train, wait_until

pytestmark = pytest.mark.slow


def _job(sweep: Path, num: int) -> Path:
    (job,) = sweep.glob(f"{num}_*")
    return job


def _status_table(sweep: Path) -> dict[int, str]:
    """Each job's status as `sweepit status` prints it (its table: job, the swept value, status, ...)."""
    proc = subprocess.run([sys.executable, "-m", "sweepit.cli", "status", str(sweep)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    header, _, *rows = proc.stdout.split("\n\n")[0].splitlines()  # the table: header, dashes, a row per job
    at = re.split(r"\s{2,}", header).index("status")
    return {int(cells[0]): cells[at] for cells in (re.split(r"\s{2,}", row) for row in rows)}


def test_a_running_sweep_is_read_as_it_runs_and_as_status_tells_it_once_stopped(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    # One worker, long enough for a look to find job 0 mid-training and job 1 queued.
    driver = subprocess.Popen([sys.executable, str(REPO / "train.py"), "-m", "task=digits", "epochs=300",
                               "trainer.threads=1", "lr=0.01,0.02", "hydra.launcher.n_workers=1",
                               "hydra.callbacks.summary.report=false", f"hydra.sweep.dir={sweep}"],
                              cwd=tmp_path, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    try:
        def started() -> bool:
            return list(sweep.glob("0_*/metrics.jsonl")) != [] and sweepit.load(sweep).df["epochs"].iloc[0] >= 1

        wait_until(started, "job 0's first epoch", timeout_s=120, interval_s=0.5)
        results = sweepit.load(sweep)
        df = results.df
        assert list(df["status"]) == ["running", "queued"], df
        assert df["objective"].isna().all() and df["epochs"].iloc[0] >= 1
        done = int(df["epochs"].iloc[0])
        assert df["val_acc"].iloc[0] == results.job(0).history["val_acc"].iloc[done - 1]  # its last epoch so far
        assert results.best is None  # nothing completed yet
    finally:
        driver.send_signal(signal.SIGINT)  # Ctrl-C: the sweep stops, its jobs recorded as they ended
        _, stderr = driver.communicate(timeout=120)
    assert driver.returncode != 0, stderr[-2000:]
    stopped = sweepit.load(sweep).df
    assert dict(zip(stopped["job"], stopped["status"], strict=True)) == _status_table(sweep)
    assert "running" not in set(stopped["status"])


def test_a_broken_sweep_is_a_row_per_job_with_its_state_and_note(linreg_sweep: Path) -> None:
    with open(_job(linreg_sweep, 0) / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 3, "train_lo\n')  # torn: the last line a killed job left
    failed = _job(linreg_sweep, 1) / "result.json"
    failed.write_text(json.dumps({**json.loads(failed.read_text()), "status": "failed", "objective": None,
                                  "error": "RuntimeError: CUDA out of memory\nTraceback ..."}))
    (_job(linreg_sweep, 2) / "result.json").write_text('{"status": "compl')
    shutil.rmtree(_job(linreg_sweep, 3))  # listed in sweep.json, its folder gone
    results = sweepit.load(linreg_sweep)
    df = results.df.set_index("job")
    assert dict(df["status"]) == {0: "completed", 1: "failed", 2: "corrupt", 3: "completed"}
    assert "metrics.jsonl line 3 is not JSON" in df.loc[0, "note"]
    assert len(results.job(0).history) == 2  # the good lines
    assert df.loc[1, "note"] == "RuntimeError: CUDA out of memory"
    assert df.loc[2, "note"].startswith("result.json unreadable")
    assert df.loc[3, "note"] == "no result.json" and df[["objective", "epochs"]].loc[3].isna().all()
    assert results.best is not None and results.best.num == 0  # the one completed job with an objective


@pytest.fixture(scope="module")
def optuna_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("optuna_sweep")
    proc = run_train(["-m", "task=linreg", "epochs=2", "trainer.threads=1", "hydra/sweeper=optuna",
                      "hydra.sweeper.n_trials=3", "hydra.sweeper.n_jobs=1", "lr=tag(log, interval(0.001, 0.1))",
                      "hydra.callbacks.summary.report=false"], cwd, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = (cwd / "outputs" / "multirun").iterdir()
    return sweep


def test_an_optuna_sweep_is_its_trials(optuna_sweep: Path) -> None:
    results = sweepit.load(optuna_sweep)
    with open(optuna_sweep / "trials.csv") as f:
        trials = list(csv.DictReader(f))
    df = results.df
    assert list(df["job"]) == [int(t["job_num"]) for t in trials]
    assert list(df["lr"]) == [float(t["lr"]) for t in trials]  # the sampled values, as numbers
    assert list(df["objective"]) == [float(t["value"]) for t in trials]
    best = yaml.safe_load((optuna_sweep / "best_params.yaml").read_text())
    assert results.best is not None and str(results.best.job_dir) == best["job_dir"]
    assert results.best.config.lr == best["params"]["lr"]


def test_several_sweeps_under_one_folder_are_one_frame(linreg_sweep: Path, optuna_sweep: Path,
                                                       tmp_path: Path) -> None:
    study = tmp_path / "study"
    shutil.copytree(linreg_sweep, study / "grid")
    shutil.copytree(optuna_sweep, study / "optuna" / optuna_sweep.name)
    results = sweepit.load(study)
    df = results.df
    assert list(results.sweeps) == ["grid", f"optuna/{optuna_sweep.name}"]
    assert list(df["sweep"]) == ["grid"] * 4 + [f"optuna/{optuna_sweep.name}"] * 3
    assert list(df["job"]) == [0, 1, 2, 3, 0, 1, 2]
    assert df["optimizer"].iloc[4:].isna().all()  # swept in one sweep only
    assert df["lr"].notna().all()
    best = results.best  # both minimize val_loss: the best of the two
    assert best is not None and best.objective == df["objective"].min()
    assert results.job(1, sweep="grid").job_dir.parent == study / "grid"
    with pytest.raises(SweepitError, match=r"job\(1\) must name its sweep when several are loaded, as "
                                           r"job\(1, sweep=\.\.\.\) with one of: grid, optuna/"):
        results.job(1)
