"""The Optuna sweeper on hydra/launcher=slurm: trials run as Slurm jobs, report each epoch to the study's journal
file in the sweep directory (shared by the driver and the jobs), and are told to Optuna when they end."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
import pytest
from optuna.trial import TrialState
from slurm_launcher_testing import (
    APP,
    LINREG,
    TRAIN,
    Driver,
    driver_env,
    manifest,
    result,
    run,
    slurm_ids,
    sweepit,
    wait_until,
)

if TYPE_CHECKING:
    from slurm_cluster_testing import SlurmCluster


def test_optuna_search_through_slurm_into_the_default_sweep_folder(tmp_path: Path) -> None:
    """Trials run as Slurm jobs, report their epochs and are told to Optuna; the search as a user types it, without
    hydra.sweep.dir (issue 20; every other test passes one): it ended in ReadonlyConfigError at its end, exit 1, no
    table."""
    proc = subprocess.run([sys.executable, str(TRAIN), "-m", "hydra/sweeper=optuna", *LINREG, "epochs=3",
                           "optimizer=choice(adam,sgd)", "lr=tag(log, interval(1e-3, 0.1))", "hydra.sweeper.n_trials=2",
                           "hydra.sweeper.n_jobs=2", "hydra.sweeper.sampler.seed=0"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=driver_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ReadonlyConfigError" not in proc.stderr
    assert "batches" not in proc.stderr + proc.stdout  # the Slurm launcher starts trials one by one
    (sweep,) = (tmp_path / "outputs" / "multirun").iterdir()
    assert manifest(sweep).launcher == "slurm"
    assert "2 jobs: 2 completed" in proc.stdout, proc.stdout
    assert "reproduce: python " in proc.stdout
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(sweep / "optuna.journal")))
    trials = optuna.load_study(study_name="multirun", storage=storage).trials  # the study is named after `study`
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    for t in trials:
        assert sorted(t.intermediate_values) == [1, 2, 3]  # reported by the Slurm job, epoch by epoch
        assert result(Path(t.user_attrs["job_dir"]))["status"] == "completed"
    assert (sweep / "best_params.yaml").is_file()


def test_slurm_trials_start_as_soon_as_any_ends(tmp_path: Path) -> None:
    """On Slurm too a trial is submitted as soon as any ends: job 0 runs until two other jobs have ended, which
    they can only do one after another in the second slot (a batch of 2 would wait for job 0 and never end)."""
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "hydra/sweeper=optuna", "x=choice(0,1,2,3)", "hydra.sweeper.n_trials=4",
               "hydra.sweeper.n_jobs=2", "hydra/sweeper/sampler=random", "hydra.sweeper.sampler.seed=0",
               "slow_jobs=[0]", "extra_sleep_s=0", "slow_until_results=2",
               "hydra.sweeper.study_name=async_slurm")
    assert proc.returncode == 0, proc.stderr[-3000:]
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(sweep / "optuna.journal")))
    trials = optuna.load_study(study_name="async_slurm", storage=storage).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    assert [t.value for t in trials] == [float(t.params["x"] ** 2) for t in trials]
    slow = next(t for t in trials if t.user_attrs["job_num"] == 0)
    # Trial b was asked while the slow trial ran, after trial c (started after the slow one) was told.
    assert any(slow.datetime_start < c.datetime_start and c.datetime_complete < b.datetime_start
               < slow.datetime_complete for b in trials for c in trials), \
        [(t.number, t.datetime_start, t.datetime_complete) for t in trials]
    assert {e.state for e in manifest(sweep).jobs.values()} == {"completed"}


def test_ctrl_c_cancels_the_trials_in_flight(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    """Ctrl-C stops the search: the Slurm jobs of the trials in flight are cancelled (nothing left running),
    their trials are interrupted and enqueued again, and the same command resumes the study."""
    sweep = tmp_path / "sweep"
    args = ["hydra/sweeper=optuna", "x=choice(0,1,2,3)", "hydra.sweeper.n_trials=3", "hydra.sweeper.n_jobs=2",
            "hydra/sweeper/sampler=random", "hydra.sweeper.sampler.seed=0",
            "hydra.sweeper.study_name=ctrl_c_slurm"]
    driver = Driver(APP, sweep, *args, "extra_sleep_s=600", "slow_jobs=[0,1]")
    try:
        wait_until(lambda: all((d / ".slurm" / "task-0.json").exists() for d in sweep.glob("[01]_*"))
                   and len(list(sweep.glob("[01]_*"))) == 2, "jobs 0 and 1 to run", 60)
        driver.proc.send_signal(signal.SIGINT)
        code = driver.finish(timeout_s=60)
    finally:
        driver.kill()
    assert code != 0
    assert "SIGINT: cancelled 2 Slurm job(s) still in flight" in driver.stdout
    assert "Traceback" not in driver.stderr  # the search stops with its message, not a KeyboardInterrupt
    assert "was interrupted, so the search stops" in driver.stderr + driver.stdout
    ids = slurm_ids(sweep)
    assert slurm_cluster.wait_until_final(int(ids[0])).startswith("CANCELLED")
    assert slurm_cluster.wait_until_final(int(ids[1])).startswith("CANCELLED")
    assert {manifest(sweep).jobs[n].state for n in (0, 1)} == {"interrupted"}
    status = sweepit("status", str(sweep))
    assert status.stdout.count(" interrupted ") == 2 and "SWEEPIT_OPTUNA" not in status.stdout, status.stdout
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(sweep / "optuna.journal")))
    trials = optuna.load_study(study_name="ctrl_c_slurm", storage=storage).trials
    assert [t.user_attrs.get("sweepit_status") for t in trials[:2]] == ["interrupted", "interrupted"]
    assert [t.state for t in trials[2:]] == [TrialState.WAITING] * 2  # their parameters, enqueued for the rerun

    proc = run(APP, sweep, *args)  # the same command (no slow jobs now) resumes and finishes the study
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = optuna.load_study(study_name="ctrl_c_slurm", storage=storage).trials
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 3
    assert {t.user_attrs["job_num"] for t in trials if t.state == TrialState.COMPLETE}.isdisjoint({0, 1})


def test_a_task_raising_trial_pruned_on_slurm_is_pruned_and_its_slurm_job_completes(
        tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    """optuna.TrialPruned from a plain app (no sweepit import): PRUNED in the study, `pruned` in result.json,
    and the Slurm job ends COMPLETED (a pruned trial is a result, not a crash)."""
    sweep = tmp_path / "sweep"
    app = Path(__file__).parents[1] / "search" / "app" / "pruning_app.py"
    proc = run(app, sweep, "hydra/launcher=slurm", "hydra/sweeper=optuna", "x=choice(-1,1)",
               "hydra/sweeper/sampler=grid", "hydra.sweeper.n_trials=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(sweep / "optuna.journal")))
    trials = optuna.load_study(study_name="sweepit", storage=storage).trials
    assert {t.params["x"]: t.state for t in trials} == {-1: TrialState.PRUNED, 1: TrialState.COMPLETE}
    pruned = next(t for t in trials if t.params["x"] == -1)
    assert result(Path(pruned.user_attrs["job_dir"]))["status"] == "pruned"
    job_id = slurm_ids(sweep)[pruned.user_attrs["job_num"]]
    assert slurm_cluster.wait_until_final(int(job_id.split("_")[0])) == "COMPLETED"


@pytest.mark.parametrize(("option", "said"), [("hydra.launcher.dry_run=true", "hydra.launcher.dry_run shows"),
                                              ("hydra.launcher.workers=2", "hydra.launcher.workers packs")])
def test_launcher_options_a_search_cannot_use_are_refused_before_anything_is_written(tmp_path: Path, option: str,
                                                                                     said: str) -> None:
    """A dry run (or packing) of a search of trials one by one is refused with its paragraph, and leaves no sweep
    folder (it left multirun.yaml and an Optuna journal that `sweepit ls` listed as a sweep of 0 jobs)."""
    proc = subprocess.run([sys.executable, str(TRAIN), "-m", "hydra/sweeper=optuna", *LINREG, option,
                           "lr=tag(log, interval(1e-4, 1))", "hydra.sweeper.n_trials=2"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=driver_env())
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    left = sorted((tmp_path / "outputs").rglob("*"))
    assert left in ([], [tmp_path / "outputs" / "multirun"]), left  # no sweep folder (the study's parent may stay)
