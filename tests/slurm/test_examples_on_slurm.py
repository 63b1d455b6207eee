"""The example projects on the local Slurm cluster, as the README runs them: `hydra/launcher=slurm` from an
app's own conf dir (the profiles come with sweepit), a user's own loop that resumes exactly after a requeue,
sweepit's loop on a user's model and data, a Hydra app that has never heard of sweepit, and docs/own-code.md's
project built from the page alone."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from slurm_launcher_testing import ROOT, Driver, driver_env, job_dirs, result, slurm_ids, tasks, wait_until

from own_code_page import run_app, write_page_app

EXAMPLES = ROOT / "examples"
OWN_LOOP = EXAMPLES / "own_loop" / "train.py"


def _rows(job_dir: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines()]


def test_own_loop_requeued_by_slurm_resumes_to_the_same_metrics(tmp_path: Path) -> None:
    """Two identical jobs (`+rep` changes nothing); job 1 gets the USR2 Slurm sends before a time limit or on
    preemption, is requeued, loads its checkpoint through sweepit.load_checkpoint and ends as job 0 does."""
    sweep = tmp_path / "sweep"
    driver = Driver(OWN_LOOP, sweep, "hydra/launcher=slurm", "epochs=6", "n_train=6000", "+rep=0,1",
                    "hydra.launcher.poll_interval_s=1")
    try:
        wait_until(lambda: sweep.is_dir() and len(job_dirs(sweep)) == 2, "two job directories", 60)
        interrupted = job_dirs(sweep)[1]
        metrics = interrupted / "metrics.jsonl"
        wait_until(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 2, "two epochs of job 1", 180)
        subprocess.run(["scancel", "--signal=USR2", slurm_ids(sweep)[1]], check=True, timeout=30)
        code = driver.finish()
    finally:
        driver.kill()
    assert code == 0, driver.stderr
    uninterrupted = job_dirs(sweep)[0]
    assert tasks(interrupted)[0]["slurm_restart_count"] == "1"  # really requeued, and run again
    assert _rows(interrupted) == _rows(uninterrupted)  # every epoch's metrics, bit for bit
    assert result(interrupted)["status"] == "completed" and result(interrupted)["epochs_completed"] == 6
    assert result(interrupted)["objective"] == result(uninterrupted)["objective"]
    assert "2 jobs: 2 completed" in driver.stdout


def test_config_only_on_slurm(tmp_path: Path) -> None:
    env = driver_env(PYTHONPATH=str(EXAMPLES / "config_only"))  # the user's package, as sbatch passes it on
    conf = EXAMPLES / "config_only" / "conf"
    argv = [sys.executable, str(ROOT / "train.py"), "--config-dir", str(conf), "--config-name", "stripes", "-m",
            f"hydra.sweep.dir={tmp_path / 'sweep'}", "hydra/launcher=slurm", "model.width=4,8", "epochs=2",
            "timeout_min=5"]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = [result(d) for _, d in sorted(job_dirs(tmp_path / "sweep").items())]
    assert [r["status"] for r in done] == ["completed", "completed"]
    assert {r["model"] for r in done} == {"mypkg.nets.StripeNet"} and done[0]["n_params"] < done[1]["n_params"]


def test_the_own_code_pages_project_on_slurm_a_grid_and_an_optuna_search_with_a_pruner(tmp_path: Path) -> None:
    """docs/own-code.md's project, built from the page's code blocks (tests/own_code_page.py), with its one config line
    on hydra/launcher=slurm: a grid without `direction` says its "best" is the default's; a pruner on a config without
    `metric` is refused before any job is submitted; with the page's `metric`, every trial reports each epoch."""
    app = write_page_app(tmp_path)
    tiny = ["hydra/launcher=slurm", "epochs=2", "n_samples=400", "hydra.launcher.poll_interval_s=1"]
    grid = run_app(app, "-m", "lr=0.03,0.3", *tiny, "~direction", f"hydra.sweep.dir={tmp_path / 'grid'}")
    assert grid.returncode == 0, grid.stderr[-3000:]
    assert [result(d)["status"] for _, d in sorted(job_dirs(tmp_path / "grid").items())] == ["completed"] * 2
    assert slurm_ids(tmp_path / "grid"), "the jobs ran as Slurm jobs"
    lines = grid.stdout.splitlines()
    best = next(i for i, line in enumerate(lines) if line.startswith("best (minimize val_acc)"))
    assert lines[best + 1].startswith("warning: minimize is sweepit's default"), lines[best:]

    search = ["-m", "hydra/sweeper=optuna", "lr=interval(0.01, 0.5)", "hydra/sweeper/pruner=median",
              "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2", *tiny]
    refused = run_app(app, *search, "~metric", f"hydra.sweep.dir={tmp_path / 'refused'}")
    assert refused.returncode != 0 and "the app's config names no `metric`" in refused.stderr, refused.stderr[-3000:]
    assert not (tmp_path / "refused").exists()

    study = run_app(app, *search, f"hydra.sweep.dir={tmp_path / 'study'}")
    assert study.returncode == 0, study.stderr[-3000:]
    trials = list(csv.DictReader((tmp_path / "study" / "trials.csv").open()))
    assert len(trials) == 2 and all(t["epochs_reported"] for t in trials), trials
    assert "best (maximize val_acc)" in study.stdout and "warning: minimize" not in study.stdout
