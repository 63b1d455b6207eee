"""Faults of packed sweeps (`hydra.launcher.workers=N`) on the local cluster: nothing lost, nothing run twice.

- USR2 to a worker (its time limit, a preemption): its running job stops, is given back and resumes bit for bit
  from its last epoch checkpoint, in the requeued worker.
- A worker killed without a word (SIGKILL): the driver sees Slurm end it (FAILED) and gives its job to a fresh
  worker.
- A worker cancelled (scancel): someone stopped it; its job ends `interrupted` and `sweepit resume` runs it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from slurm_launcher_testing import (
    APP,
    TRAIN,
    Driver,
    assert_whole,
    epochs,
    manifest,
    only_job_dir,
    only_job_dir_when,
    read_json,
    result,
    rows,
    run,
    wait_until,
)

# Packed workers hold fake GPUs for a whole sweep: these tests hold the cluster alone (see test_packed.py).
pytestmark = pytest.mark.exclusive_cluster
# About 0.5 s an epoch on one core: long enough to be caught mid-training.
LINREG = ["task=linreg", "data.n_synthetic=40000", "device=cpu", "timeout_min=5", "hydra/launcher=slurm",
          "hydra.launcher.poll_interval_s=1", "hydra.launcher.result_grace_s=1", "hydra.launcher.workers=1"]


def test_usr2_to_a_worker_gives_its_job_back_and_the_job_resumes_bit_for_bit(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    # Two identical trainings in one worker, one after the other; the worker is preempted during the second.
    driver = Driver(TRAIN, sweep, *LINREG, "epochs=8", "+rep=0,1")
    try:
        job = only_job_dir_when(sweep, 1, timeout_s=180)
        wait_until(lambda: (job / "metrics.jsonl").exists() and len(epochs(job)) >= 2, "two epochs of job 1", 180)
        worker = str(manifest(sweep).jobs[1].extra["slurm_job_id"])
        subprocess.run(["scancel", "--signal=USR2", worker], check=True, timeout=30)
        code = driver.finish(timeout_s=300)
    finally:
        driver.kill()
    assert code == 0, driver.stderr[-3000:]
    reference = only_job_dir(sweep, 0)
    assert result(job)["status"] == "completed"
    assert_whole(job)
    assert rows(job) == rows(reference)  # every epoch's losses and weights, bit for bit
    assert "sweepit: resumed from" in (job / "stdout.log").read_text()
    m = manifest(sweep)
    assert m.jobs[1].extra["slurm_job_id"] == worker, "the same worker, requeued, ran it again"
    assert read_json(job / ".slurm" / "task-0.json")["slurm_restart_count"] == "1"
    worker_log = Path(m.workers["stderr"][worker]).read_text()
    assert "stopped for a requeue; job(s) 1 given back" in worker_log, worker_log[-3000:]
    assert "2 jobs: 2 completed" in driver.stdout


def test_a_worker_killed_with_sigkill_has_its_job_run_again_by_a_fresh_worker(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    release = tmp_path / "release"
    driver = Driver(APP, sweep, "hydra.launcher.workers=1", "x=1,2", f"release_file={release}")
    try:
        job = only_job_dir_when(sweep, 0)
        wait_until(lambda: (job / ".slurm" / "task-0.json").exists(), "job 0 to start", 120)
        first = read_json(job / ".slurm" / "task-0.json")
        os.kill(int(first["pid"]), signal.SIGKILL)  # the worker's own process, without a word
        wait_until(lambda: manifest(sweep).jobs[0].extra.get("retries") == 1, "the driver to give job 0 back", 90)
        release.touch()
        code = driver.finish(timeout_s=240)
    finally:
        release.touch()  # a worker left holding its GPU would starve the other tests of the cluster
        driver.kill()
    assert code == 0, driver.stderr[-3000:]
    assert "given to another worker (retry 1 of 2)" in driver.stderr
    assert "fresh worker(s) submitted" in driver.stderr
    m = manifest(sweep)
    assert [m.jobs[n].state for n in (0, 1)] == ["completed", "completed"]
    again = read_json(job / ".slurm" / "task-0.json")
    assert again["slurm_job_id"] != first["slurm_job_id"], "run by a fresh worker"
    assert result(job)["status"] == "completed"
    assert (job / "stdout.log").read_text().count("job x=1 starting") == 1, "the rerun's own log, from its start"


def test_a_cancelled_worker_leaves_its_job_interrupted_and_resume_runs_it(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    release = tmp_path / "release"
    driver = Driver(APP, sweep, "hydra.launcher.workers=1", "x=1,2", f"release_file={release}")
    try:
        job = only_job_dir_when(sweep, 0)
        wait_until(lambda: (job / ".slurm" / "task-0.json").exists(), "job 0 to start", 120)
        subprocess.run(["scancel", str(read_json(job / ".slurm" / "task-0.json")["slurm_job_id"])],
                       check=True, timeout=30)
        code = driver.finish(timeout_s=120)
    finally:
        driver.kill()
        release.touch()  # held jobs end, and their worker with them, should the scancel have failed
    assert code == 1, driver.stderr[-3000:]
    m = manifest(sweep)
    assert m.jobs[0].state == "interrupted", m.jobs[0]
    assert result(job)["slurm_state"] == "CANCELLED"
    assert m.jobs[1].state in ("not started", "failed"), m.jobs[1]
    release.touch()
    again = run(APP, sweep, "hydra.launcher.workers=1", "x=1,2", f"release_file={release}",
                "hydra.launcher.resume=true")
    assert again.returncode == 0, again.stderr[-3000:]
    assert [e.state for e in manifest(sweep).jobs.values()] == ["completed", "completed"]
