"""Faults on the local cluster, each run for real: scancel, the node going down, the controller going away, a
time limit, preemption of a 2-rank job. Each test checks that nothing is lost or doubled: the job's result
and metrics agree, no epoch is missing or written twice, no temporary file is left, the manifest says the
same as the result. What the user sees in each case is in the README's "What survives what"."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from slurm_cluster_testing import cluster_up
from slurm_launcher_testing import (
    APP,
    TRAIN,
    Driver,
    assert_whole,
    driver_env,
    epochs,
    manifest,
    only_job_dir,
    only_job_dir_when,
    result,
    rows,
    run,
    slurm_ids,
    sweepit,
    tasks,
    wait_until,
)

from sweepit.slurm import _cluster as slurm_queue
from sweepit_testing import Hold

if TYPE_CHECKING:
    from slurm_cluster_testing import SlurmCluster

# About 0.5 s an epoch on one core: long enough to be caught mid-training.
LINREG = ["task=linreg", "data.n_synthetic=40000", "device=cpu", "timeout_min=5", "hydra/launcher=slurm",
          "hydra.launcher.poll_interval_s=1", "hydra.launcher.result_grace_s=1"]


def test_scancel_stops_a_training_job_at_once_and_its_record_stands(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    driver = Driver(TRAIN, sweep, *LINREG, "epochs=60")
    try:
        job = sweep / "0_data.n_synthetic=40000,device=cpu,epochs=60,task=linreg,timeout_min=5"
        wait_until(lambda: (job / "metrics.jsonl").exists() and len(epochs(job)) >= 2, "two epochs", 120)
        subprocess.run(["scancel", slurm_ids(sweep)[0]], check=True, timeout=30)
        cancelled_at = time.monotonic()
        reported_at = driver.wait_for_line(lambda line: line.startswith("sweepit: job 0 ") or "job 0 interrupted"
                                           in line, timeout_s=60)
        code = driver.finish()
        epochs_when_reported = len(epochs(job))
        recorded = (job / "result.json").read_text()
        time.sleep(7)  # KillWait (5 s) and more: a job still training would write on
    finally:
        driver.kill()
    assert code == 1, driver.stderr
    assert reported_at - cancelled_at < 10, f"reported {reported_at - cancelled_at:.1f} s after scancel"
    assert (job / "result.json").read_text() == recorded, "the job wrote over its record after the driver read it"
    assert len(epochs(job)) == epochs_when_reported < 60
    cancelled = result(job)
    assert cancelled["status"] == "interrupted" and cancelled["slurm_state"] == "CANCELLED", cancelled
    assert "stopped by SIGTERM from Slurm" in cancelled["job_error"]  # it stopped itself, at once
    assert_whole(job)
    assert manifest(sweep).jobs[0].state == "interrupted"
    assert "1 jobs: 1 interrupted" in driver.stdout
    assert "resumed from" not in (job / "stdout.log").read_text()


@pytest.mark.exclusive_cluster
def test_the_node_going_down_requeues_the_job_and_it_resumes_without_losing_or_doubling_an_epoch(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    driver = Driver(TRAIN, sweep, *LINREG, "epochs=10")
    node_down = False
    try:
        job = sweep / "0_data.n_synthetic=40000,device=cpu,epochs=10,task=linreg,timeout_min=5"
        wait_until(lambda: (job / "metrics.jsonl").exists() and len(epochs(job)) >= 3, "three epochs", 120)
        subprocess.run(["scontrol", "update", f"nodename={slurm_cluster.node}", "state=down", "reason=fault-test"],
                       check=True, timeout=30)
        node_down = True
        epochs_before = len(epochs(job))
        time.sleep(3)
        # With ReturnToService=2 the node comes back as soon as slurmd registers again; resume it if not.
        subprocess.run(["scontrol", "update", f"nodename={slurm_cluster.node}", "state=resume"], timeout=30)
        node_down = False
        code = driver.finish()
    finally:
        driver.kill()
        if node_down:
            subprocess.run(["scontrol", "update", f"nodename={slurm_cluster.node}", "state=resume"], timeout=30)
    assert code == 0, driver.stderr
    assert result(job)["status"] == "completed" and result(job)["epochs_completed"] == 10
    assert_whole(job)
    log = (job / "stdout.log").read_text()
    assert "sweepit: resumed from" in log, log[-2000:]
    assert tasks(job)[0]["slurm_restart_count"] == "1"  # the same Slurm job, requeued by Slurm
    assert epochs_before >= 3
    assert "1 jobs: 1 completed" in driver.stdout


@pytest.mark.exclusive_cluster
def test_results_are_reported_while_the_controller_is_down_and_the_user_is_told_once(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    # Jobs 0 and 1 end while the controller is away; job 2 outlasts the outage and is cancelled after it.
    driver = Driver(APP, sweep, "x=range(3)", "~trainer", "slow_on=[0,1]", "extra_sleep_s=4", "hang_on=[2]")
    killed = False
    try:
        jobs = [only_job_dir_when(sweep, n) for n in range(3)]
        wait_until(lambda: all((job / ".slurm" / "task-0.json").exists() for job in jobs), "every job running", 90)
        pid = Path("/run/slurmctld.pid").read_text().strip()
        subprocess.run(["kill", pid], check=True, timeout=10)  # the controller goes away; slurmd runs the jobs on
        killed = True
        wait_until(lambda: (jobs[0] / "result.json").exists(), "job 0's result", 30)
        written_at = time.monotonic()
        reported_at = driver.wait_for_line(lambda line: "job 0 completed" in line, timeout_s=60)
        down_lines = [line for _, line in driver.lines if "Slurm controller does not answer" in line]
        time.sleep(3)
        cluster_up()  # the controller is back
        killed = False
        driver.wait_for_line(lambda line: "the Slurm controller answers again" in line, timeout_s=30)
        subprocess.run(["scancel", slurm_ids(sweep)[2]], check=True, timeout=30)
        code = driver.finish()
    finally:
        if killed:
            cluster_up()
        driver.kill()
        if (sweep / "sweep.json").exists():
            subprocess.run(["scancel", *slurm_ids(sweep).values()], timeout=30)  # job 2 hangs until cancelled
    assert code == 1, driver.stderr
    assert reported_at - written_at < 6, f"job 0 reported {reported_at - written_at:.1f} s after its result"
    assert len(down_lines) == 1, driver.stderr
    assert driver.stderr.count("Slurm controller does not answer") == 1, driver.stderr
    assert driver.stderr.count("the Slurm controller answers again") == 1, driver.stderr
    assert "3 jobs: 2 completed, 1 interrupted" in driver.stdout
    assert [e.state for e in manifest(sweep).jobs.values()] == ["completed", "completed", "interrupted"]


def test_preempting_a_two_rank_job_requeues_it_and_it_ends_with_an_uninterrupted_runs_metrics(
        tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    # Two identical 2-rank trainings (gloo on CPU, one fake GPU per task), held after their second epoch (Hold: no
    # slow training to be caught mid-way); job 1 is preempted there.
    hold = Hold(tmp_path / "hold")
    small = [o for o in LINREG if not o.startswith("data.n_synthetic=")]
    driver = Driver(TRAIN, sweep, *small, "model._target_=held_jobs.linear", "epochs=4", "trainer.gpus=2", "+rep=0,1",
                    env=driver_env(**{k: hold.env()[k] for k in ("PYTHONPATH", "SWEEPIT_TEST_HOLD")}))
    try:
        job = only_job_dir_when(sweep, 1)
        wait_until(lambda: hold.held(1), "job 1 held after its second epoch", 180)
        assert len(epochs(job)) == 2
        # What Slurm sends signal_delay_s before the time limit, and on preemption; plain scancel --signal reaches the
        # job's srun steps, where submitit's handler runs.
        subprocess.run(["scancel", "--signal=USR2", slurm_ids(sweep)[1]], check=True, timeout=30)
        wait_until(lambda: "submitit WARNING" in (job / "stderr.log").read_text(), "the job to catch USR2", 60)
        hold.release()
        code = driver.finish(timeout_s=300)
    finally:
        driver.kill()
    assert code == 0, driver.stderr
    reference = only_job_dir(sweep, 0)
    assert result(job)["status"] == "completed" and result(job)["world_size"] == 2
    assert_whole(job)
    assert rows(job) == rows(reference)  # every epoch's losses and weights, bit for bit
    assert "sweepit: resumed from" in (job / "stdout.log").read_text()
    assert [t["slurm_restart_count"] for t in tasks(job)] == ["1", "1"]  # both ranks ran again
    assert "submitit WARNING" in (job / "stderr.log").read_text()  # "Caught signal SIGUSR2"
    assert manifest(sweep).jobs[1].state == "completed"
    assert "2 jobs: 2 completed" in driver.stdout
    job_id = slurm_ids(sweep)[1]

    seen: list[str] = []

    def states() -> list[str]:
        seen[:] = subprocess.run(["sacct", "-n", "-X", "-P", "-D", "-j", job_id, "-o", "State"],
                                 capture_output=True, text=True, check=True, timeout=30).stdout.split()
        return seen

    # The same Slurm job, requeued, then completed (slurmdbd records the end a moment after the job's result).
    # A rank aborting at exit (a gloo thread outliving the interpreter) would leave FAILED here instead.
    wait_until(lambda: states()[-1:] == ["COMPLETED"], lambda: f"sacct to record the job's end (states {seen})", 30)
    assert states()[0] == "REQUEUED", states()


def test_sweepit_status_after_the_end_shows_no_stale_slurm_state(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    driver = Driver(APP, sweep, "x=range(2)", "~trainer")
    assert driver.finish() == 0, driver.stderr
    assert all(e.extra.get("slurm_state") not in ("RUNNING", "PENDING") for e in manifest(sweep).jobs.values()), [
        e.extra.get("slurm_state") for e in manifest(sweep).jobs.values()]
    ids = list(slurm_ids(sweep).values())
    # The driver ends when the results and return values are in; the processes exit a moment later.
    wait_until(lambda: all(s.state == "COMPLETED" for s in (slurm_queue.squeue(ids) or {}).values()),
               "Slurm to end both jobs", 30)
    status = sweepit("status", str(sweep))
    assert status.returncode == 0, status.stderr
    assert "RUNNING" not in status.stdout and status.stdout.count(" COMPLETED") == 2, status.stdout


def test_sbatch_refusing_a_later_array_says_which_jobs_went_out_before(tmp_path: Path) -> None:
    """sbatch takes the sweep's first array and refuses the second, as it refuses an account it does not know (an
    `sbatch` in front of Slurm's on PATH says so after its first call): the error names the jobs already in Slurm."""
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "sbatch").write_text(
        f'#!/bin/sh\nif [ -e "{shim}/once" ]; then\n  echo "sbatch: error: Batch job submission failed: Invalid '
        f'account or account/partition combination specified" >&2\n  exit 1\nfi\ntouch "{shim}/once"\n'
        f'exec {shutil.which("sbatch")} "$@"\n')
    (shim / "sbatch").chmod(0o755)
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "x=0,1,2,3", "~trainer", "hydra.launcher.max_array_size=2",
               env=driver_env(PATH=f"{shim}:{os.environ['PATH']}"), timeout_s=120)
    assert proc.returncode == 1, proc.stderr
    went = {e.num: str(e.extra["slurm_array_job_id"]) for e in manifest(sweep).jobs.values()
            if e.extra.get("slurm_job_id")}
    assert sorted(went) == [0, 1] and len(set(went.values())) == 1, went
    said = " ".join(proc.stderr.split())
    assert "sbatch must accept the jobs, but refused them: sbatch: error: Batch job submission failed" in said, said
    assert (f"2 job(s) were submitted before (Slurm job(s) {went[0]}): follow them with `sweepit status {sweep}`."
            in said), said
    assert "Nothing was submitted." not in said
    wait_until(lambda: all((only_job_dir(sweep, n) / "result.json").exists() for n in went),
               "the two jobs that went out to end", 60)  # they run on: not left running into the next test


@pytest.mark.waits_minutes
def test_a_job_past_its_time_limit_is_recorded_as_such_and_the_sweep_goes_on(tmp_path: Path) -> None:
    """The shortest limit Slurm has (1 min), no requeue left (max_num_timeout=0): the job ends at its limit."""
    sweep = tmp_path / "sweep"
    driver = Driver(APP, sweep, "x=0,1", "~trainer", "hang_on=[0]", "timeout_min=1",
                    "hydra.launcher.signal_delay_s=0", "hydra.launcher.max_num_timeout=0")
    try:
        code = driver.finish(timeout_s=240)
    finally:
        driver.kill()
        if (sweep / "sweep.json").exists():
            subprocess.run(["scancel", *slurm_ids(sweep).values()], timeout=30)
    assert code == 1, driver.stderr
    timed_out = result(only_job_dir(sweep, 0))
    assert timed_out["status"] == "failed", timed_out
    assert "time limit" in timed_out["error"].lower(), timed_out
    assert result(only_job_dir(sweep, 1))["status"] == "completed"
    assert "2 jobs: 1 completed, 1 failed" in driver.stdout


def test_a_failing_rank_ends_its_job_at_once_and_its_record_names_the_rank_and_its_error(tmp_path: Path) -> None:
    """Rank 1 of a 2-task job raises while rank 0 waits for it (as in a collective). Before: no --kill-on-bad-exit, so
    rank 0 waited (on NCCL, for the watchdog: 300 s), and the record was rank 0's, the cause only in task 1's log,
    which no job directory linked."""
    sweep = tmp_path / "sweep"
    started = time.monotonic()
    proc = run(APP, sweep, "x=0", "trainer.gpus=2", "fail_on_rank=1", timeout_s=240)
    took_s = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    assert took_s < 90, f"the job took {took_s:.0f} s to end: the failing rank did not end it"
    job_dir = only_job_dir(sweep, 0)
    record = result(job_dir)
    assert record["status"] == "failed", record
    assert record["error"].startswith("RankFailedError: rank 1 of 2 failed: ValueError: rank 1 fails on purpose "
                                      "(fail_on_rank) (its log: .slurm/task-1.stderr.log)"), record["error"]
    own_log = (job_dir / ".slurm" / "task-1.stderr.log").read_text()  # every task's logs, linked from the job
    assert "ValueError: rank 1 fails on purpose" in own_log
    assert (job_dir / ".slurm" / "task-0.stdout.log").resolve() == (job_dir / "stdout.log").resolve()
    script = next((sweep / ".submitit").rglob("*_submission.sh")).read_text()
    assert "--kill-on-bad-exit=1" in script
