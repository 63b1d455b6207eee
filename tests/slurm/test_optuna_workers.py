"""Optuna worker mode on the local cluster (`hydra.sweeper.workers=N`): N workers of one Slurm array loop
ask -> train -> tell against the study's journal file; the driver submits them with one sbatch and follows."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optuna.trial import TrialState
from slurm_launcher_testing import (
    APP,
    LINREG,
    TRAIN,
    Driver,
    driver_env,
    job_dirs,
    manifest,
    result,
    run,
    scancel,
    sweepit,
    wait_until,
)

from sweepit.search import load_study_of, started_trials

if TYPE_CHECKING:
    from slurm_cluster_testing import SlurmCluster

WORKERS = ["hydra/sweeper=optuna", "hydra.sweeper.workers=2", "hydra/sweeper/sampler=random",
           "hydra.sweeper.sampler.seed=0"]


def trials(sweep: Path) -> list[Any]:
    return list(load_study_of(sweep).trials)


def counted(ts: list[Any]) -> list[Any]:
    return [t for t in ts if t.user_attrs.get("sweepit_status") not in ("interrupted", "surplus")
            and t.state != TrialState.WAITING]


def assert_one_job_per_trial(sweep: Path, ts: list[Any]) -> None:
    """Every trial that ran has its own job directory, and every job directory is one trial's."""
    nums = [t.user_attrs["job_num"] for t in ts if "job_num" in t.user_attrs]
    assert len(nums) == len(set(nums)), nums
    assert sorted(nums) == sorted(job_dirs(sweep)), (nums, sorted(job_dirs(sweep)))


def test_workers_share_n_trials_with_one_sbatch(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    # Trials of 2 s: one worker alone would take 14 s, time enough for the other to start beside the tests sharing the
    # cluster (with the app's 0.5 s, the first worker can run all 7 before the second asks for one).
    proc = run(APP, sweep, *WORKERS, "x=choice(0,1,2,3)", "hydra.sweeper.n_trials=7", "sleep_s=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ts = trials(sweep)
    assert [t.state for t in counted(ts)] == [TrialState.COMPLETE] * 7
    assert [t.value for t in counted(ts)] == [float(t.params["x"] ** 2) for t in counted(ts)]
    assert len({t.user_attrs["worker"] for t in counted(ts)}) == 2  # both workers ran trials
    assert_one_job_per_trial(sweep, [t for t in ts if t.user_attrs.get("sweepit_status") != "surplus"])
    m = manifest(sweep)
    assert len(m.workers["ids"]) == 2 and len({i.split("_")[0] for i in m.workers["ids"]}) == 1  # one array
    assert len(list((sweep / ".submitit").iterdir())) == 1  # one sbatch call
    assert {e.state for e in m.jobs.values()} == {"completed"} and len(m.jobs) == 7
    assert {e.extra["slurm_job_id"] for e in m.jobs.values()} <= set(m.workers["ids"])
    assert "7 jobs: 7 completed" in proc.stdout
    for d in job_dirs(sweep).values():
        assert result(d)["status"] == "completed" and (d / ".hydra" / "config.yaml").is_file()
        assert (d / "stdout.log").resolve().exists()
    status = sweepit("status", str(sweep))
    assert status.returncode == 0 and "7 jobs: 7 completed" in status.stdout, status.stdout


def test_workers_report_epochs_and_prune(tmp_path: Path) -> None:
    """train.py's epochs reach each trial from inside the worker (the pruning callback), and optuna.TrialPruned
    from a plain app ends its trial PRUNED. One worker for train.py's trials: each worker is a process that imports
    torch, and the fact is the same in one."""
    sweep = tmp_path / "sweep"
    one_worker = [k if k != "hydra.sweeper.workers=2" else "hydra.sweeper.workers=1" for k in WORKERS]
    proc = run(TRAIN, sweep, *LINREG, "epochs=3", *one_worker, "lr=tag(log, interval(1e-3, 0.1))",
               "hydra.sweeper.n_trials=3", "hydra/sweeper/pruner=median", "hydra.callbacks.summary.report=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for t in counted(trials(sweep)):
        assert t.state in (TrialState.COMPLETE, TrialState.PRUNED)
        assert sorted(t.intermediate_values)[:1] == [1], t.intermediate_values
    sweep = tmp_path / "pruned"
    app = Path(__file__).parents[1] / "search" / "app" / "pruning_app.py"
    proc = run(app, sweep, "hydra/launcher=slurm", "hydra/sweeper=optuna", "hydra.sweeper.workers=2", "x=choice(-1,1)",
               "hydra/sweeper/sampler=grid", "hydra.sweeper.n_trials=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {t.params["x"]: t.state for t in counted(trials(sweep))} == {-1: TrialState.PRUNED, 1: TrialState.COMPLETE}


def test_a_failing_trial_is_counted_and_too_many_stop_the_workers(tmp_path: Path) -> None:
    sweep = tmp_path / "some"  # x=2 and x=3 fail (8 random draws miss both with probability 0.4%)
    proc = run(APP, sweep, *WORKERS, "x=choice(0,1,2,3)", "hydra.sweeper.n_trials=8",
               "hydra.sweeper.max_failure_rate=1.0", env=driver_env(SLURM_APP_FAIL_ON="2,3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ts = counted(trials(sweep))
    assert len(ts) == 8 and any(t.state == TrialState.FAIL for t in ts)
    for t in ts:
        assert t.state == (TrialState.FAIL if t.params["x"] in (2, 3) else TrialState.COMPLETE)
        if t.state == TrialState.FAIL:
            assert result(Path(t.user_attrs["job_dir"]))["status"] == "failed"
            assert "fails on purpose" in t.user_attrs["error"]

    sweep = tmp_path / "all"
    proc = run(APP, sweep, *WORKERS, "x=choice(0,1,2,3)", "hydra.sweeper.n_trials=20",
               "hydra.sweeper.failure_rate_min_trials=3", env=driver_env(SLURM_APP_FAIL_ON="0,1,2,3"))
    assert proc.returncode == 1
    assert "max_failure_rate=0.5" in proc.stderr, proc.stderr[-3000:]
    assert 3 <= len(counted(trials(sweep))) <= 6  # each worker stops at its next ask once the budget is spent
    assert not Path(sweep / "sweep.lock").exists()


def assert_cut_trial_retried(sweep: Path, job0: Path, n_trials: int) -> list[Any]:
    """Job 0's trial, cut by Slurm, is `interrupted` (study and result.json), its parameters ran again as a
    completed retry, and the study counts n_trials complete ones. Returns the study's trials."""
    ts = trials(sweep)
    cut = next(t for t in ts if t.user_attrs.get("job_num") == 0)
    assert cut.user_attrs["sweepit_status"] == "interrupted" and result(job0)["status"] == "interrupted"
    retry = next(t for t in ts if t.user_attrs.get("retry_of") == cut.number)
    assert retry.state == TrialState.COMPLETE and retry.params == cut.params
    assert [t.state for t in counted(ts)] == [TrialState.COMPLETE] * n_trials
    return ts


def _wait_for_running_trials(sweep: Path, n: int, timeout_s: float = 90) -> None:
    wait_until(lambda: len(started_trials(sweep)) >= n, f"{n} trial(s) to start", timeout_s)


def test_resume_after_the_driver_is_killed_follows_the_same_workers(tmp_path: Path) -> None:
    """The driver killed (SIGKILL): the workers run on; the same command follows them (no new sbatch) and ends
    with exactly n_trials."""
    sweep = tmp_path / "sweep"
    release = tmp_path / "release"  # the trials run until the resumed driver has found the workers
    args = [*WORKERS, "x=choice(0,1,2,3)", "hydra.sweeper.n_trials=6", f"release_file={release}"]
    driver = Driver(APP, sweep, *args)
    try:
        _wait_for_running_trials(sweep, 2)  # the driver has adopted (and recorded) the first trials
        os.kill(driver.proc.pid, signal.SIGKILL)
        driver.finish(timeout_s=30)
    finally:
        driver.kill()
    ids = manifest(sweep).workers["ids"]
    resumed = Driver(APP, sweep, *args)
    try:
        resumed.wait_for_line(lambda line: "following the workers still running from before" in line, timeout_s=90,
                              stdout=True)
        release.touch()
        code = resumed.finish()
    finally:
        resumed.kill()
    assert code == 0, resumed.stderr[-3000:]
    assert manifest(sweep).workers["ids"] == ids and len(list((sweep / ".submitit").iterdir())) == 1
    ts = trials(sweep)
    assert [t.state for t in counted(ts)] == [TrialState.COMPLETE] * 6
    assert_one_job_per_trial(sweep, [t for t in ts if t.user_attrs.get("sweepit_status") != "surplus"])
    assert {e.state for e in manifest(sweep).jobs.values()} == {"completed"}


def test_a_scancelled_worker_leaves_its_trial_to_the_others(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    """scancel of one worker mid-trial: that trial ends `interrupted` (its parameters enqueued), the other worker
    runs the retry and the rest, and the study ends with n_trials; nothing is lost or doubled."""
    sweep = tmp_path / "sweep"
    driver = Driver(APP, sweep, *WORKERS, "x=choice(0,1,2,3)", "hydra.sweeper.n_trials=5", "slow_jobs=[0]",
                    "extra_sleep_s=600")
    try:
        wait_until(lambda: 0 in started_trials(sweep), "job 0 to start", 90)
        job0 = Path(started_trials(sweep)[0]["job_dir"])
        worker = started_trials(sweep)[0]["worker"]
        time.sleep(1)
        scancel(worker)
        code = driver.finish(timeout_s=180)
    finally:
        driver.kill()
    assert code == 0, driver.stderr[-3000:]
    ts = assert_cut_trial_retried(sweep, job0, n_trials=5)
    assert_one_job_per_trial(sweep, [t for t in ts if t.user_attrs.get("sweepit_status") != "surplus"])
    assert manifest(sweep).jobs[0].state == "interrupted"


def test_a_requeued_worker_retries_its_trial_and_asks_on(tmp_path: Path) -> None:
    """Preemption (`scancel --signal=USR2`, as Slurm sends before the time limit): the worker's trial ends
    `interrupted` (enqueued), the worker is requeued, comes back and runs on; the study ends with n_trials."""
    sweep = tmp_path / "sweep"
    driver = Driver(APP, sweep, "hydra/sweeper=optuna", "hydra.sweeper.workers=1", "x=choice(0,1,2,3)",
                    "hydra.sweeper.n_trials=3", "hydra/sweeper/sampler=random", "slow_jobs=[0]",
                    "extra_sleep_s=600")
    try:
        wait_until(lambda: 0 in started_trials(sweep), "job 0 to start", 90)
        job0 = Path(started_trials(sweep)[0]["job_dir"])
        time.sleep(2)
        scancel("--signal=USR2", manifest(sweep).workers["ids"][0])
        code = driver.finish(timeout_s=240)
    finally:
        driver.kill()
    assert code == 0, driver.stderr[-3000:]
    assert_cut_trial_retried(sweep, job0, n_trials=3)
    assert len(manifest(sweep).workers["ids"]) == 1 and len(list((sweep / ".submitit").iterdir())) == 1


def test_a_dry_run_shows_the_workers_array_and_submits_nothing(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, *WORKERS, "x=choice(0,1)", "hydra.launcher.dry_run=true", "hydra.sweeper.workers=3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "# 3 Optuna worker(s)" in proc.stdout and "#SBATCH --array=0-2%3" in proc.stdout, proc.stdout
    assert not (sweep / ".submitit").exists()


def test_workers_of_more_than_one_task_are_refused_before_anything_is_submitted(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, *WORKERS, "x=choice(0,1)", "trainer.gpus=2", "hydra.launcher.dry_run=true")
    assert proc.returncode != 0
    assert ("hydra.sweeper.workers runs each worker as one Slurm task, but the job's request is 1 node(s) x 2 task(s) "
            "(2 GPU(s)") in proc.stderr, proc.stderr[-3000:]
    assert ("Ask one task per job (trainer.gpus=1, hydra.launcher.tasks_per_node=1, nodes=1), or set "
            "hydra.sweeper.workers=0.\nSee docs/troubleshooting.md#optuna-worker-one-task") in proc.stderr
    assert not (sweep / ".submitit").exists()

