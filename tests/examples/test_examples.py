"""The three ways in, run as the README shows them, from a clean working directory: a user's model and data by
configuration on sweepit's loop, a user's own loop on the public API (local sweep, Optuna with pruning), and a
Hydra app that has never heard of sweepit. Real multiruns in subprocesses; the Slurm runs are in tests/slurm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from sweepit.results._summary import collect
from sweepit_testing import REPO

pytestmark = pytest.mark.slow

EXAMPLES = REPO / "examples"
CONFIG_ONLY = ["--config-dir", str(EXAMPLES / "config_only" / "conf"), "--config-name", "stripes"]


def run(script: Path, args: list[str], cwd: Path, pythonpath: Path | None = None,
        timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": "1"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout_s)


def only_sweep(root: Path) -> Path:
    (sweep,) = [p for p in root.iterdir() if p.is_dir()]
    return sweep


def results(sweep: Path) -> dict[int, dict[str, Any]]:
    return {row.num: row.result for row in collect(sweep)}


def test_config_only_sweeps_a_users_model_width(tmp_path: Path) -> None:
    proc = run(REPO / "train.py", ["-m", *CONFIG_ONLY, "model.width=4,16", "epochs=3", "trainer.threads=1"],
               tmp_path, pythonpath=EXAMPLES / "config_only")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = only_sweep(tmp_path / "outputs" / "stripes")
    done = results(sweep)
    assert [done[n]["status"] for n in (0, 1)] == ["completed", "completed"]
    assert {done[n]["model"] for n in (0, 1)} == {"mypkg.nets.StripeNet"}
    assert done[0]["n_params"] < done[1]["n_params"]  # width 4 vs 16: the swept argument reached the model
    assert done[0]["data"] == "mypkg.data.make()" and done[0]["n_train"] == 1600
    assert "best (maximize val_acc)" in proc.stdout and "model.width" in proc.stdout


def test_config_only_streams_datasets_from_disk_and_a_bad_target_fails_only_its_job(tmp_path: Path) -> None:
    proc = run(REPO / "train.py", ["-m", *CONFIG_ONLY, "data._target_=mypkg.data.on_disk", f"+data.root={tmp_path}",
                                   "data.loader.num_workers=1", "model._target_=mypkg.nets.StripeNet,mypkg.nets.Nope",
                                   "epochs=2", "trainer.threads=1"],
               tmp_path, pythonpath=EXAMPLES / "config_only")
    assert proc.returncode == 1  # a job failed: the sweep says so, after running the other
    done = results(only_sweep(tmp_path / "outputs" / "stripes"))
    assert done[0]["status"] == "completed" and done[0]["data"] == "mypkg.data.on_disk()"
    assert done[1]["status"] == "failed"
    assert done[1]["error"].startswith("ConfigError: model._target_ must name a class or function, but mypkg.nets "
                                       "has no attribute 'Nope' (model._target_=mypkg.nets.Nope)")
    assert "1 of 2 jobs failed" in proc.stderr and "sweepit resume" in proc.stderr
    assert any(p.suffix == ".npy" for p in tmp_path.rglob("*.npy"))


def test_a_users_model_on_a_built_in_task(tmp_path: Path) -> None:
    proc = run(REPO / "train.py", ["model._target_=mypkg.nets.StripeNet", "epochs=2", "trainer.threads=1"], tmp_path,
               pythonpath=EXAMPLES / "config_only")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "model=mypkg.nets.StripeNet" in proc.stdout and "UCI digits" in proc.stdout and "Epoch 2/2" in proc.stdout


def test_own_loop_local_sweep_leaves_curves_results_and_the_summary(tmp_path: Path) -> None:
    proc = run(EXAMPLES / "own_loop" / "train.py", ["-m", "lr=0.003,0.03", "epochs=3", "n_train=600"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = only_sweep(tmp_path / "outputs" / "own_loop")
    for num, result in results(sweep).items():
        assert result["status"] == "completed" and result["recorded_by"] == "sweepit", result
        assert result["metric"] == "val_acc" and result["epochs_completed"] == 3
        assert result["objective"] == result["final"]["val_acc"]  # what the function returned
        assert 1 <= result["best_epoch"] <= 3
        rows = [json.loads(line) for line in next(sweep.glob(f"{num}_*/metrics.jsonl")).read_text().splitlines()]
        assert [r["epoch"] for r in rows] == [1, 2, 3] and {"train_loss", "val_loss", "val_acc"} <= set(rows[0])
        assert next(sweep.glob(f"{num}_*/checkpoint.pt")).is_file()  # the user's loop owns its checkpoint: kept
    assert "best (maximize val_acc)" in proc.stdout
    assert (sweep / "report" / "learning_curves.png").is_file()
    summary = (sweep / "report" / "summary.md").read_text()
    assert f"python {EXAMPLES / 'own_loop' / 'train.py'} " in summary  # reproduce: this app, not sweepit's train.py


def test_own_loop_under_optuna_is_pruned_by_the_median_pruner(tmp_path: Path) -> None:
    """lr 1e-5 learns nothing in one epoch: once an lr=0.03 trial has finished, the median pruner stops it."""
    proc = run(EXAMPLES / "own_loop" / "train.py",
               ["-m", "hydra/sweeper=optuna", "lr=choice(0.03,0.00001)", "seed=choice(0,1)",
                "hydra.sweeper.sampler.name=grid", "hydra.sweeper.sampler.seed=4", "hydra.sweeper.n_trials=4",
                "hydra.sweeper.pruner.name=median", "hydra.sweeper.pruner.n_startup_trials=1",
                "epochs=4", "n_train=600", f"hydra.sweep.dir={tmp_path / 'study'}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = optuna.load_study(study_name="sweepit", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "study" / "optuna.journal"))))
    states = {t.number: (t.state.name, t.params["lr"]) for t in study.trials}
    pruned = [t for t in study.trials if t.state.name == "PRUNED"]
    assert any(t.params["lr"] == 0.00001 for t in pruned), states  # the loop returned when told: PRUNED, not FAIL
    assert study.best_trial.params["lr"] == 0.03
    done = results(tmp_path / "study")
    for trial in pruned:
        result = done[trial.user_attrs["job_num"]]
        assert result["status"] == "pruned" and result["epochs_completed"] == len(trial.intermediate_values) < 4
    assert "pruned" in proc.stdout  # the summary table shows it


def test_own_loop_optuna_command_of_the_readme(tmp_path: Path) -> None:
    """The README's command, with fewer trials and epochs: a TPE search with median pruning, 2 trials in flight."""
    proc = run(EXAMPLES / "own_loop" / "train.py",
               ["-m", "hydra/sweeper=optuna", "lr=tag(log, interval(1e-4, 1e-1))", "hydra.sweeper.n_trials=4",
                "hydra.sweeper.n_jobs=2", "hydra/sweeper/pruner=median", "epochs=2", "n_train=300",
                f"hydra.sweep.dir={tmp_path / 'study'}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    statuses = [r["status"] for r in results(tmp_path / "study").values()]
    assert len(statuses) == 4 and set(statuses) <= {"completed", "pruned"}
    assert (tmp_path / "study" / "best_params.yaml").is_file()


def test_any_hydra_app_runs_on_the_local_launcher_and_optuna(tmp_path: Path) -> None:
    app = EXAMPLES / "any_hydra_app" / "app.py"
    grid = run(app, ["-m", "x=-1,0,1", "y=0,2", "hydra.launcher.preload=[]"], tmp_path)
    assert grid.returncode == 0, grid.stderr[-3000:]
    assert "6 jobs: 6 completed" in grid.stdout and "best (minimize objective): job 4 = 1.154" in grid.stdout
    search = run(app, ["-m", "hydra/sweeper=optuna", "x=interval(-2, 2)", "y=range(0, 4)", "hydra.sweeper.n_trials=8",
                       "hydra.sweeper.direction=minimize", "hydra.sweeper.sampler.seed=0", "hydra.launcher.preload=[]",
                       f"hydra.sweep.dir={tmp_path / 'search'}"], tmp_path)
    assert search.returncode == 0, search.stderr[-3000:]
    values = [r["objective"] for r in results(tmp_path / "search").values()]
    assert len(values) == 8 and f"= {min(values):.4g}" in search.stdout.split("best (minimize objective)")[1]


def test_own_loop_on_hydras_basic_launcher_gives_every_job_its_own_state_and_result(tmp_path: Path) -> None:
    """Hydra's basic launcher runs every job in one process: job 1 once loaded job 0's checkpoint (a size mismatch
    with another width), trained 0 epochs and left no result.json, and the table said `pending`."""
    proc = run(EXAMPLES / "own_loop" / "train.py", ["-m", "lr=0.003,0.03", "width=8,16", "epochs=2", "n_train=300",
                                                    "hydra/launcher=basic"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = only_sweep(tmp_path / "outputs" / "own_loop")
    done = results(sweep)
    assert sorted(done) == [0, 1, 2, 3]
    for result in done.values():
        assert result["status"] == "completed" and result["epochs_completed"] == 2, result
        assert result["objective"] == result["final"]["val_acc"]
    assert "4 jobs: 4 completed" in proc.stdout and "best (maximize val_acc)" in proc.stdout
    listing = subprocess.run([sys.executable, "-m", "sweepit.cli", "ls"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=60).stdout
    assert "4 jobs: 4 completed" in listing, listing  # not `running`


def test_own_loop_under_optuna_on_hydras_basic_launcher(tmp_path: Path) -> None:
    """Trials of two widths in one process: each builds its own model (5 of 6 failed on another trial's checkpoint)."""
    proc = run(EXAMPLES / "own_loop" / "train.py",
               ["-m", "hydra/sweeper=optuna", "hydra/launcher=basic", "width=choice(8,16)", "lr=interval(0.001,0.1)",
                "hydra.sweeper.n_trials=4", "hydra.sweeper.sampler.seed=1", "epochs=2", "n_train=300",
                f"hydra.sweep.dir={tmp_path / 'study'}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = results(tmp_path / "study")
    assert len(done) == 4 and {r["status"] for r in done.values()} == {"completed"}, done
    assert {r["epochs_completed"] for r in done.values()} == {2}
