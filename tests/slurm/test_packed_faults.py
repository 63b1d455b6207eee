"""Faults of packed sweeps (`hydra.launcher.workers=N`) on the local cluster: nothing lost, nothing run twice.

- USR2 to a worker (its time limit, a preemption): its running job stops, is given back and resumes bit for bit
  from its last epoch checkpoint, in the requeued worker.
- A worker killed without a word (SIGKILL): the driver sees Slurm end it (FAILED) and gives its job to a fresh
  worker.
- A worker cancelled (scancel): someone stopped it; its job ends `interrupted` and `sweepit resume` runs it.
- The node set DOWN and back: Slurm requeues the worker (NODE_FAIL); in its new life it gives back the job it was
  running, which resumes from its checkpoint.
- The driver killed, then the controller away for 20 s: the workers go on with the sweep's jobs meanwhile, and
  `sweepit resume` follows the same workers to the end (no new ones, no job run twice).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from slurm_cluster_testing import SlurmCluster, cluster_up
from slurm_launcher_testing import (
    APP,
    CPU_ONLY,
    TRAIN,
    Driver,
    assert_whole,
    driver_env,
    epochs,
    job_dirs,
    manifest,
    only_job_dir,
    only_job_dir_when,
    read_json,
    result,
    rows,
    run,
    sweepit,
    wait_until,
)

from sweepit.results._job_files import read_result
from sweepit_testing import Hold

# A fault that is the worker's own (a signal to it, its cancellation) leaves the other tests' jobs alone: those tests
# share the cluster, their workers asking for no GPU (a worker holds what it asked for the whole sweep: see
# test_packed.py). The node going down and the controller going away touch every job: those hold the cluster alone.
# About 0.5 s an epoch on one core: long enough to be caught mid-training.
LINREG = ["task=linreg", "data.n_synthetic=40000", "device=cpu", CPU_ONLY, "timeout_min=5", "hydra/launcher=slurm",
          "hydra.launcher.poll_interval_s=1", "hydra.launcher.result_grace_s=1", "hydra.launcher.workers=1"]


def test_usr2_to_a_worker_gives_its_job_back_and_the_job_resumes_bit_for_bit(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    # Two identical trainings in one worker, one after the other; the worker is preempted during the first, held
    # after its second epoch (Hold: no slow training to be caught mid-way), and the second is the reference.
    hold = Hold(tmp_path / "hold")
    small = [o for o in LINREG if not o.startswith("data.n_synthetic=")]
    driver = Driver(TRAIN, sweep, *small, "model._target_=held_jobs.linear", "epochs=4", "+rep=0,1",
                    env=driver_env(**{k: hold.env()[k] for k in ("PYTHONPATH", "SWEEPIT_TEST_HOLD")}))
    try:
        job = only_job_dir_when(sweep, 0, timeout_s=180)
        wait_until(lambda: hold.held(0), "job 0 held after its second epoch", 180)
        assert len(epochs(job)) == 2
        worker = str(manifest(sweep).jobs[0].extra["slurm_job_id"])
        subprocess.run(["scancel", "--signal=USR2", worker], check=True, timeout=30)
        wait_until(lambda: "given back" in Path(manifest(sweep).workers["stderr"][worker]).read_text(),
                   "the worker to give its job back", 60)
        hold.release()
        code = driver.finish(timeout_s=300)
    finally:
        driver.kill()
    assert code == 0, driver.stderr[-3000:]
    reference = only_job_dir(sweep, 1)
    assert result(job)["status"] == "completed"
    assert_whole(job)
    assert rows(job) == rows(reference)  # every epoch's losses and weights, bit for bit
    assert "sweepit: resumed from" in (job / "stdout.log").read_text()
    m = manifest(sweep)
    assert m.jobs[0].extra["slurm_job_id"] == worker, "the same worker, requeued, ran it again"
    assert read_json(job / ".slurm" / "task-0.json")["slurm_restart_count"] == "1"
    worker_log = Path(m.workers["stderr"][worker]).read_text()
    assert "stopped for a requeue; job(s) 0 given back" in worker_log, worker_log[-3000:]
    assert "2 jobs: 2 completed" in driver.stdout


@pytest.mark.exclusive_cluster
def test_the_node_going_down_requeues_the_worker_and_its_job_resumes_bit_for_bit(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    driver = Driver(TRAIN, sweep, *LINREG, "epochs=8", "+rep=0,1")
    node_down = False
    try:
        job = only_job_dir_when(sweep, 1, timeout_s=180)
        wait_until(lambda: (job / "metrics.jsonl").exists() and len(epochs(job)) >= 2, "two epochs of job 1", 180)
        worker = str(manifest(sweep).jobs[1].extra["slurm_job_id"])
        subprocess.run(["scontrol", "update", f"nodename={slurm_cluster.node}", "state=down", "reason=fault-test"],
                       check=True, timeout=30)
        node_down = True
        time.sleep(3)
        subprocess.run(["scontrol", "update", f"nodename={slurm_cluster.node}", "state=resume"], timeout=30)
        node_down = False
        code = driver.finish(timeout_s=300)
    finally:
        driver.kill()
        if node_down:
            subprocess.run(["scontrol", "update", f"nodename={slurm_cluster.node}", "state=resume"], timeout=30)
    assert code == 0, driver.stderr[-3000:]
    assert result(job)["status"] == "completed"
    assert_whole(job)
    assert rows(job) == rows(only_job_dir(sweep, 0)), "every epoch's losses and weights, bit for bit"
    assert "sweepit: resumed from" in (job / "stdout.log").read_text()
    worker_log = Path(manifest(sweep).workers["stderr"][worker]).read_text()
    assert "which this worker ran before Slurm requeued it, is claimable again" in worker_log, worker_log[-3000:]
    assert "2 jobs: 2 completed" in driver.stdout


def test_a_worker_killed_with_sigkill_has_its_job_run_again_by_a_fresh_worker(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    release = tmp_path / "release"
    driver = Driver(APP, sweep, "hydra.launcher.workers=1", CPU_ONLY, "x=1,2", f"release_file={release}")
    try:
        job = only_job_dir_when(sweep, 0)
        wait_until(lambda: (job / ".slurm" / "task-0.json").exists(), "job 0 to start", 120)
        first = read_json(job / ".slurm" / "task-0.json")
        os.kill(int(first["pid"]), signal.SIGKILL)  # the worker's own process, without a word
        wait_until(lambda: manifest(sweep).jobs[0].extra.get("retries") == 1, "the driver to give job 0 back", 90)
        release.touch()
        code = driver.finish(timeout_s=240)
    finally:
        release.touch()  # a worker left running would hold a core of the cluster to its time limit
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
    driver = Driver(APP, sweep, "hydra.launcher.workers=1", CPU_ONLY, "x=1,2", f"release_file={release}")
    try:
        job = only_job_dir_when(sweep, 0)
        # The task file is written before the app runs: wait for the app's own first line, so that the cancelled
        # attempt has a log line to keep (a scancel before it leaves an empty log).
        log = job / "stdout.log"
        wait_until(lambda: (job / ".slurm" / "task-0.json").exists() and log.exists()
                   and "job x=1 starting" in log.read_text(), "job 0 to start", 120)
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
    # The cancelled attempt's record and log stay beside the resumed one's, and the record counts both.
    assert (read_result(job, "result.1.json") or {})["slurm_state"] == "CANCELLED"
    assert "job x=1 starting" in (job / "stdout.1.log").read_text() and result(job)["attempts"] == 2


@pytest.mark.exclusive_cluster
def test_the_driver_killed_and_the_controller_away_lose_nothing_and_resume_follows_the_same_workers(
        tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    release = tmp_path / "release"
    # Jobs 4 and 5 (the last of each worker) outlast the outage: the workers are alive when the sweep is resumed.
    driver = Driver(APP, sweep, "hydra.launcher.workers=2", "x=range(6)", f"release_file={release}", "slow_on=[4,5]",
                    "extra_sleep_s=40")
    controller_down = False
    try:
        # Each worker runs its first job (held) and has claimed the next ahead.
        wait_until(lambda: sweep.is_dir() and sum((d / ".slurm" / "task-0.json").exists()
                                                  for d in job_dirs(sweep).values()) == 2, "a job in each worker", 120)
        driver.kill()  # SIGKILL: no word to anyone
        subprocess.run(["kill", Path("/run/slurmctld.pid").read_text().strip()], check=True, timeout=10)
        away_since = time.monotonic()
        controller_down = True
        release.touch()  # the workers finish jobs 0 and 1 and go on with the others, the controller away
        wait_until(lambda: sum((d / "result.json").exists() for d in job_dirs(sweep).values()) >= 4,
                   "four jobs done while the controller is away", 60)
        time.sleep(max(0.0, 20 - (time.monotonic() - away_since)))  # the controller stays away 20 s in all
        cluster_up()
        controller_down = False
        resumed = sweepit("resume", str(sweep), timeout_s=240)
    finally:
        release.touch()
        if controller_down:
            cluster_up()
        driver.kill()
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    said = resumed.stdout + resumed.stderr
    assert "Following the packed workers still running from before" in said, said[-3000:]
    assert "6 jobs: 6 completed" in resumed.stdout, said[-3000:]
    m = manifest(sweep)
    assert m.workers["generation"] == 1 and len(m.workers["arrays"]) == 1, "the same workers, none submitted anew"
    for entry in m.jobs.values():
        job = Path(entry.job_dir)
        assert result(job)["status"] == "completed"
        assert (job / "stdout.log").read_text().count("starting") == 1, f"{job.name} ran once"
