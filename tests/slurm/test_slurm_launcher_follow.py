"""Following a sweep: a cancelled job is reported within seconds, arrays split at MaxArraySize, and a
detached sweep is followed with `sweepit status` and finished with `sweepit resume`."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from slurm_launcher_testing import (
    APP,
    Driver,
    driver_env,
    job_dirs,
    manifest,
    read_json,
    result,
    run,
    scancel,
    slurm_ids,
    sweepit,
    wait_until,
)

from sweepit.results._job_files import read_result
from sweepit.slurm import _cluster as slurm_queue

if TYPE_CHECKING:
    from slurm_cluster_testing import SlurmCluster


def test_a_cancelled_job_is_reported_within_10_s_and_the_others_complete(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    driver = Driver(APP, sweep, "x=range(4)", "hang_on=[1]", "slow_on=[0,2,3]", "extra_sleep_s=3")
    try:
        wait_until(lambda: (sweep / "1_x=1" / ".slurm" / "task-0.json").exists(), "job 1 to run", 60)
        scancel(slurm_ids(sweep)[1])
        cancelled_at = time.monotonic()
        reported_at = driver.wait_for_line(lambda line: line.startswith("sweepit: job 1 ") and "interrupted" in line,
                                           timeout_s=30)
        code = driver.finish()
    finally:
        driver.kill()
    assert reported_at - cancelled_at < 10, f"reported {reported_at - cancelled_at:.1f} s after scancel"
    assert code == 1  # fail_on_error
    assert "4 jobs: 3 completed, 1 interrupted" in driver.stdout
    cancelled = result(sweep / "1_x=1")
    assert cancelled["status"] == "interrupted" and cancelled["slurm_state"] == "CANCELLED"
    assert cancelled["error"].startswith("cancelled in Slurm (job ")
    assert "stopped by SIGTERM from Slurm" in cancelled["stderr_tail"]  # the job stopped at once, in its own words
    assert "1 of 4 jobs failed or were interrupted" in driver.stderr and "sweepit resume" in driver.stderr
    assert [manifest(sweep).jobs[n].state for n in range(4)] == ["completed", "interrupted", "completed", "completed"]


def test_max_array_size_splits_a_group_into_several_arrays(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    assert slurm_queue.max_array_size() == slurm_cluster.max_array_size  # read from `scontrol show config`
    sweep = tmp_path / "sweep"
    args = ["x=range(5)", "hydra.launcher.max_array_size=2", "hydra.launcher.array_parallelism=1"]
    dry = run(APP, sweep, *args, "hydra.launcher.dry_run=true")
    assert dry.returncode == 0, dry.stderr
    assert "5 job(s) in 3 sbatch call(s)" in dry.stdout and "array sizes 2, 2, 1" in dry.stdout
    assert not (sweep / ".submitit").exists() and not (sweep / "sweep.json").exists()

    proc = run(APP, sweep, *args)
    assert proc.returncode == 0, proc.stderr
    assert "5 jobs: 5 completed" in proc.stdout
    ids = slurm_ids(sweep)
    assert [i.split("_")[1] if "_" in i else "-" for i in ids.values()] == ["0", "1", "0", "1", "-"]
    assert len({i.split("_")[0] for i in ids.values()}) == 3
    folders = sorted(p.name for p in (sweep / ".submitit").iterdir())
    assert folders == ["0001", "0002", "0003"]  # a fresh submitit folder for each sbatch call
    first = next((sweep / ".submitit" / "0001").glob("*_submission.sh")).read_text()
    assert "#SBATCH --array=0-1%1\n" in first  # array_parallelism
    # The dry run printed the script that was then submitted (the job name's suffix is drawn per run).
    printed = re.search(r"#!/bin/bash\n.*?\n(?=# \d+ job\(s\) with|dry run: )", dry.stdout, re.DOTALL)
    assert printed is not None, dry.stdout
    assert re.sub(r"-[0-9a-f]{6}\n", "\n", printed.group(0)).strip() == re.sub(r"-[0-9a-f]{6}\n", "\n", first).strip()


# Alone: the user's other jobs count against max_queued, and the jobs of the tests sharing the cluster held job 0
# back for up to 96 s.
@pytest.mark.exclusive_cluster
def test_status_during_a_sweep_lists_the_jobs_the_queue_limit_holds_back_as_queued(tmp_path: Path) -> None:
    """hydra.launcher.max_queued=1 (the user's other jobs in the queue count too): while the driver holds jobs back,
    `sweepit status` lists them as `queued`, "not submitted yet" (as docs/slurm.md says), not as `not started`."""
    sweep = tmp_path / "sweep"
    driver = Driver(APP, sweep, "x=0,1,2", "~trainer", "slow_on=[0,1,2]", "extra_sleep_s=10",
                    "hydra.launcher.max_queued=1")
    try:
        wait_until(lambda: (sweep / "sweep.json").exists() and bool(manifest(sweep).jobs[2].extra.get("held"))
                   and bool(manifest(sweep).jobs[0].extra.get("slurm_job_id")),
                   "the driver to submit job 0 and hold job 2 back", 180)
        status = sweepit("status", str(sweep))
    finally:
        driver.kill()
        ids = [str(e.extra["slurm_job_id"]) for e in manifest(sweep).jobs.values() if e.extra.get("slurm_job_id")] \
            if (sweep / "sweep.json").exists() else []
        if ids:
            scancel(*ids)
    assert status.returncode == 0, status.stderr
    rows = {int(line.split()[0]): line for line in status.stdout.split("\n\n")[0].splitlines()[2:]}
    assert " queued " in rows[2], status.stdout
    assert "not submitted yet: hydra.launcher.max_queued=1 allows 1 Slurm job(s)" in rows[2], status.stdout
    assert "not started" not in status.stdout, status.stdout


def test_detach_then_status_then_resume_runs_only_what_did_not_complete(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    started = time.monotonic()
    proc = run(APP, sweep, "x=range(4)", "slow_on=[3]", "extra_sleep_s=15", "hydra.launcher.wait=false",
               env=driver_env(SLURM_APP_FAIL_ON="2"))
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 30, "wait=false returns once the jobs are submitted"
    ids = slurm_ids(sweep)
    assert f"Not waiting (hydra.launcher.wait=false): 4 job(s) in Slurm: {' '.join(ids.values())}" in proc.stdout
    assert f"sweepit status {sweep}" in proc.stdout and f"sweepit resume {sweep}" in proc.stdout

    def three_ended() -> bool:
        return all((sweep / name / "result.json").exists() for name in ("0_x=0", "1_x=1", "2_x=2"))

    wait_until(three_ended, "jobs 0-2 to end", 60)
    # Job 2 wrote its failed result.json a moment before its process ends; until Slurm says it ended, a
    # failed result beside a RUNNING job is what a requeued job looks like, and status rightly says running.
    def job_2_ended() -> bool:
        row = (slurm_queue.sacct([ids[2]]) or {}).get(ids[2])
        return row is not None and row.state in slurm_queue.FINAL_STATES

    wait_until(job_2_ended, f"Slurm to end job 2 ({ids[2]})", 60)
    status = sweepit("status", str(sweep))
    assert status.returncode == 0, status.stderr
    table = status.stdout.split("\n\n")[0].splitlines()[2:]  # header and rule first
    rows = {int(line.split()[0]): line for line in table}
    assert " completed " in rows[0] and " completed " in rows[1]
    assert " failed " in rows[2] and "fails on purpose" in rows[2] and f"slurm {ids[2]} FAILED" in rows[2]
    assert re.search(r" (queued|running) ", rows[3]), rows[3]
    assert "1 job(s) did not complete" in status.stdout and f"sweepit resume {sweep}" in status.stdout
    assert [manifest(sweep).jobs[n].state for n in range(3)] == ["completed", "completed", "failed"]
    first_starts = {n: read_json(job_dirs(sweep)[n] / "times.json")["start"] for n in (0, 1)}

    # No --wait: a resume follows its jobs to the end, though the sweep was first detached (it detached again).
    resumed = sweepit("resume", str(sweep), timeout_s=120)  # without SLURM_APP_FAIL_ON: job 2 succeeds
    assert resumed.returncode == 0, resumed.stderr
    assert "4 jobs: 4 completed" in resumed.stdout
    assert "Submitted 1 of 4 job(s)" in resumed.stderr + resumed.stdout
    after = slurm_ids(sweep)
    assert after[0] == ids[0] and after[1] == ids[1]  # completed: never run again
    assert {n: read_json(job_dirs(sweep)[n] / "times.json")["start"] for n in (0, 1)} == first_starts
    assert after[3] == ids[3]  # still running when resumed: followed, not submitted twice
    assert after[2] != ids[2]  # the failed one: submitted again
    assert sorted(p.name for p in (sweep / ".submitit").iterdir()) == ["0001", "0002"]
    assert [e.state for e in manifest(sweep).jobs.values()] == ["completed"] * 4
    # Job 2's first attempt keeps its record and its links to its own Slurm logs; the record counts both attempts.
    job_2 = job_dirs(sweep)[2]
    assert (job_2 / "stdout.1.log").resolve().parent.name == "0001" and (job_2 / "stdout.1.log").exists()
    assert (job_2 / "stdout.log").resolve().parent.name == "0002"
    first = read_result(job_2, "result.1.json") or {}
    assert first["status"] == "failed" and "fails on purpose" in first["error"], first
    assert result(job_2)["attempts"] == 2 and result(job_2)["status"] == "completed"


def test_a_jobs_end_is_taken_when_its_task_writes_its_return_value_not_at_the_next_poll(tmp_path: Path) -> None:
    """Between two polls of Slurm the driver watches the submitit folders, where each task writes its return value as
    it ends: with polls 10 minutes apart, a sweep of short jobs still ends once its jobs have. Before: it ended at the
    first poll after the last job's end."""
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "x=range(2)", "hydra.launcher.poll_interval_s=600", timeout_s=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 jobs: 2 completed" in proc.stdout, proc.stdout
    assert [manifest(sweep).jobs[n].state for n in range(2)] == ["completed", "completed"]


def test_a_job_its_record_ended_while_slurm_still_runs_it_says_no_slurm_state_that_contradicts_it(
        tmp_path: Path) -> None:
    """A job writes its result.json a moment before its process ends (here held there). Before: `sweepit status`
    showed it `completed` with the note `slurm <id> RUNNING <node>`, and kept that note after the job had gone."""
    sweep, linger = tmp_path / "sweep", tmp_path / "linger"
    proc = run(APP, sweep, "x=0", "sleep_s=0", "hydra.launcher.wait=false", f"linger_file={linger}")
    assert proc.returncode == 0, proc.stderr
    (job_id,) = slurm_ids(sweep).values()
    try:
        wait_until(lambda: (sweep / "0_x=0" / "result.json").exists(), "job 0's result", 60)
        assert slurm_queue.squeue([job_id])[job_id].state == "RUNNING"  # type: ignore[index]
        looked = sweepit("status", str(sweep))
        assert looked.returncode == 0, looked.stderr
        (row,) = looked.stdout.split("\n\n")[0].splitlines()[2:]
        assert " completed " in row and "RUNNING" not in row and f"slurm {job_id}" in row, looked.stdout
    finally:
        linger.touch()
    watched = sweepit("status", str(sweep), "--watch", "0.5")
    assert watched.returncode == 0, watched.stderr
    last = watched.stdout.rsplit("\n[", 1)[-1]  # the last look
    (row,) = last.split("\n\n")[0].splitlines()[3:]  # its time, the header and the rule first
    assert " completed " in row and f"slurm {job_id} COMPLETED" in row, watched.stdout
    assert "RUNNING" not in watched.stdout, watched.stdout
