"""Packed sweeps on the local cluster (`hydra.launcher.workers=N`): the jobs of each resource request run in one
array of at most N long-lived workers, each job forked from the worker in its own directory, and the sweep reads
as any other Slurm sweep (table, `sweepit status`, resume)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from slurm_launcher_testing import (
    APP,
    CPU_ONLY,
    Driver,
    driver_env,
    manifest,
    read_json,
    result,
    run,
    sweepit,
    wait_until,
)

# Packed workers asking for GPUs hold the cluster's 4 fake GPUs for a whole sweep each: beside the other tests they
# would starve a 4-GPU job and an Optuna worker of theirs, so those tests hold the cluster alone. A test
# whose point is not the GPUs asks for none (CPU_ONLY: a CPU-only request, packed as any other) and shares the
# cluster, as do the tests that submit nothing (a dry run, a refusal).
PACK = ["hydra.launcher.workers=2"]


def workers_of(sweep: Path) -> dict[str, dict[str, object]]:
    return dict(manifest(sweep).workers["arrays"])


@pytest.mark.exclusive_cluster
def test_a_grid_of_two_gpu_counts_runs_in_one_array_of_workers_per_count(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, *PACK, "x=1,2,3", "trainer.gpus=1,2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "6 jobs: 6 completed" in proc.stdout
    assert "packed into 4 worker(s) in 2 sbatch call(s)" in proc.stdout
    m = manifest(sweep)
    arrays = workers_of(sweep)
    assert sorted(int(a["shape"]) for a in arrays.values()) == [0, 1], "one array per resource request"
    assert all(len(info["ids"]) == 2 for info in arrays.values()), arrays  # type: ignore[arg-type]
    worker_scripts = [p.read_text() for p in sorted((sweep / ".submitit").glob("*/*_submission.sh"))]
    assert len(worker_scripts) == 2
    gpu_lines = sorted(line for s in worker_scripts for line in s.splitlines() if "--gpus-per-node" in line)
    assert gpu_lines == ["#SBATCH --gpus-per-node=1", "#SBATCH --gpus-per-node=2"], gpu_lines
    assert all("#SBATCH --ntasks-per-node=1\n" in s for s in worker_scripts), "one task: a job forks its ranks"
    for num, entry in m.jobs.items():
        job_dir = Path(entry.job_dir)
        assert entry.state == "completed" and result(job_dir)["objective"] == float(int(entry.overrides[0][2:]) ** 2)
        worker = str(entry.extra["slurm_job_id"])
        assert worker in m.workers["ids"], (num, worker)
        shape = int(arrays[worker.split("_")[0]]["shape"])  # type: ignore[call-overload]
        assert entry.extra["packed"] == shape, "run by a worker of its own request's array"
        assert entry.extra["gpus"] == (1 if "trainer.gpus=1" in entry.overrides else 2)
        assert f"x={entry.overrides[0][2:]} starting" in (job_dir / "stdout.log").read_text(), "the job's own log"
        assert not (job_dir / "stdout.log").is_symlink()
        assert (job_dir / ".hydra" / "overrides.yaml").exists()
        task = read_json(job_dir / ".slurm" / "task-0.json")
        assert task["slurm_array_task_id"] == worker.split("_")[1]
    assert len({str(e.extra["slurm_job_id"]) for e in m.jobs.values()}) <= 4, "6 jobs, at most 4 workers"
    status = sweepit("status", str(sweep))
    assert status.returncode == 0, status.stderr
    assert "6 jobs: 6 completed" in status.stdout


@pytest.mark.exclusive_cluster
def test_a_failing_job_fails_alone_and_its_worker_goes_on(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "hydra.launcher.workers=1", "x=1,2,3", env=driver_env(SLURM_APP_FAIL_ON="2"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "3 jobs: 2 completed, 1 failed" in proc.stdout
    m = manifest(sweep)
    assert [m.jobs[n].state for n in range(3)] == ["completed", "failed", "completed"]
    assert len({str(e.extra["slurm_job_id"]) for e in m.jobs.values()}) == 1, "one worker ran all three"
    failed = result(Path(m.jobs[1].job_dir))
    assert "fails on purpose" in failed["error"]
    assert "fails on purpose" in (Path(m.jobs[1].job_dir) / "stderr.log").read_text()
    # the sweep's resume runs the failed job alone, with new workers
    again = run(APP, sweep, "hydra.launcher.workers=1", "x=1,2,3", "hydra.launcher.resume=true")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Submitted 1 of 3 job(s) packed into 1 worker(s)" in again.stdout
    m = manifest(sweep)
    assert [m.jobs[n].state for n in range(3)] == ["completed"] * 3
    assert m.workers["generation"] == 2


@pytest.mark.exclusive_cluster
def test_slots_run_jobs_side_by_side_in_one_worker(tmp_path: Path) -> None:
    """slots=2: two jobs run at once in one worker, both held until the test releases them (an event, not a time),
    and a third starts only once one of them has ended."""
    sweep = tmp_path / "sweep"
    release = tmp_path / "release"
    driver = Driver(APP, sweep, "hydra.launcher.workers=1", "hydra.launcher.slots=2", "x=1,2,3,4",
                    f"release_file={release}")
    try:
        wait_until(lambda: len(list(sweep.glob("*/times.json"))) == 2, "two jobs to run side by side", 120)
        released_at = time.time()
        release.touch()
        assert driver.finish() == 0, driver.stderr[-3000:]
    finally:
        release.touch()
        driver.kill()
    m = manifest(sweep)
    assert len({str(e.extra["slurm_job_id"]) for e in m.jobs.values()}) == 1
    (script,) = (sweep / ".submitit").glob("*/*_submission.sh")
    assert "#SBATCH --cpus-per-task=2\n" in script.read_text(), "slots x cpus_per_task cores"
    starts = sorted(read_json(Path(e.job_dir) / "times.json")["start"] for e in m.jobs.values())
    assert starts[2] >= released_at, f"never more than two at once: {starts}, released at {released_at}"


def test_jobs_side_by_side_in_a_worker_each_have_gpus_of_their_own(tmp_path: Path) -> None:
    """slots=2 of 1-GPU jobs: the worker asks Slurm for 2 GPUs and gives each job one. Before, it asked for one,
    handed out none, and both jobs ran on it (each job's rank 0 takes its first visible GPU)."""
    sweep = tmp_path / "sweep"
    release = tmp_path / "release"
    driver = Driver(APP, sweep, "hydra.launcher.workers=1", "hydra.launcher.slots=2", "x=1,2", "trainer.gpus=1",
                    f"release_file={release}")
    try:  # both jobs running at once (an event): each has written its times.json, then waits for the release
        wait_until(lambda: len(list(sweep.glob("*/times.json"))) == 2, "both jobs to run side by side", 120)
        release.touch()
        assert driver.finish() == 0, driver.stderr[-3000:]
    finally:
        release.touch()  # a worker left holding its GPUs would starve the other tests of the cluster
        driver.kill()
    (script,) = (sweep / ".submitit").glob("*/*_submission.sh")
    assert "#SBATCH --gpus-per-node=2\n" in script.read_text(), "slots x the job's GPUs"
    seen = [read_json(p)["gpus"] for p in sweep.glob("*/times.json")]
    assert len(set(seen)) == 2 and all(len(g.split(",")) == 1 for g in seen), seen


@pytest.mark.waits_minutes
def test_a_worker_leaves_a_job_that_would_not_fit_to_a_fresh_worker(tmp_path: Path) -> None:
    """Worker time 1 min, jobs of ~32 s: after the first, the second would not fit; a fresh worker runs it. CPU-only
    jobs: their workers ask for no GPU (the only test of that request packed)."""
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "hydra.launcher.workers=1", "hydra.launcher.worker_timeout_min=1", "timeout_min=1",
               "hydra.launcher.signal_delay_s=0", "x=1,2", "sleep_s=32", CPU_ONLY, timeout_s=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = manifest(sweep)
    assert [m.jobs[n].state for n in range(2)] == ["completed", "completed"]
    arrays = workers_of(sweep)
    assert len(arrays) == 2, arrays
    assert len({str(e.extra["slurm_array_job_id"]) for e in m.jobs.values()}) == 2, "each job its own worker's"
    assert "1 job(s) of request" in proc.stderr and "fresh worker(s) submitted" in proc.stderr
    first = sorted(arrays, key=int)[0]
    log = Path(m.workers["stderr"][arrays[first]["ids"][0]]).read_text()  # type: ignore[index]
    assert "would not fit in its time left" in log, log


@pytest.mark.exclusive_cluster
def test_sweepit_status_during_a_packed_sweep_lists_unclaimed_jobs_as_queued(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    release = tmp_path / "release"
    driver = Driver(APP, sweep, "hydra.launcher.workers=1", "x=1,2,3", f"release_file={release}")
    try:
        wait_until(lambda: (sweep / "0_x=1" / "times.json").exists(), "the first job to start", 120)
        wait_until(lambda: manifest(sweep).jobs[0].state == "running", "the driver to adopt job 0", 30)
        status = sweepit("status", str(sweep))
        assert status.returncode == 0, status.stderr
        assert "3 jobs: 2 queued, 1 running" in status.stdout, status.stdout
        assert "packed worker(s)" in status.stdout and "scancel" in status.stdout
        release.touch()
        assert driver.finish() == 0, driver.stderr[-3000:]
    finally:
        release.touch()  # a worker left holding its GPU would starve the other tests of the cluster
        driver.kill()
    assert "3 jobs: 3 completed" in driver.stdout


def test_dry_run_shows_the_packed_plan(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "hydra.launcher.workers=3", "hydra.launcher.slots=2", "hydra.launcher.dry_run=true",
               "x=range(0,10)", "trainer.gpus=1,2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # 10 jobs, 2 at a time in each of 3 workers: 2 rounds of the jobs' 5 min, and a minute to start; each job of a
    # worker on GPUs of its own, so a worker holds 2 x the job's GPUs
    assert "# 10 job(s) with 1 GPU(s), 5 min: 3 worker(s) of 2 GPU(s), 11 min, 2 job(s) at a time each, about 4 " \
           "job(s) per worker" in proc.stdout, proc.stdout
    assert "#SBATCH --gpus-per-node=2\n" in proc.stdout and "#SBATCH --gpus-per-node=4\n" in proc.stdout
    # 3 workers x 2 GPUs x 11 min + 3 workers x 4 GPUs x 11 min = 198 GPU-minutes
    assert "20 job(s) packed into 6 worker(s) in 2 sbatch call(s), at most 3.30 GPU-hours" in proc.stdout
    assert proc.stdout.count("#SBATCH --array=0-2%3") == 2
    assert "#SBATCH --cpus-per-task=4" in proc.stdout, "2 slots x 2 ranks x 1 core"
    assert not (sweep / "sweep.json").exists()


def test_an_adaptive_search_on_a_packing_launcher_is_refused_with_the_key_to_use(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "hydra/sweeper=optuna", "hydra.launcher.workers=2", "x=choice(0,1,2)",
               "hydra.sweeper.n_trials=2")
    assert proc.returncode == 1
    assert "hydra.sweeper.workers=N" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_slots_of_jobs_whose_gpus_do_not_fit_one_node_are_refused(tmp_path: Path) -> None:
    proc = run(APP, tmp_path / "sweep", "hydra.launcher.workers=1", "hydra.launcher.slots=3", "x=1,2",
               "trainer.gpus=2", "hydra.launcher.dry_run=true")
    assert proc.returncode == 1
    assert ("hydra.launcher.slots x a job's GPUs must fit on one node, at most 4 GPUs (each job a worker runs at once "
            "has GPUs of its own), but slots=3 x 2 GPU(s) (job 0) is 6. Lower hydra.launcher.slots to 2 or less."
            ) in " ".join(proc.stderr.split()), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_worker_time_below_a_jobs_own_limit_is_refused(tmp_path: Path) -> None:
    proc = run(APP, tmp_path / "sweep", "hydra.launcher.workers=1", "hydra.launcher.worker_timeout_min=2", "x=1,2")
    assert proc.returncode == 1
    assert "worker_timeout_min must be at least the jobs' own time limit, 5 min" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
