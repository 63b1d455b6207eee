"""`hydra/sweeper=halving` on the per-job Slurm launcher: each rung's start of a job is a Slurm job of its own, in the
job's one folder, resumed from its checkpoint. One job is requeued by Slurm (`scontrol requeue`) in the middle of its
first rung: it still runs each rung once, and the promoted job ends bit for bit as the same job run straight through
on the local launcher."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from slurm_launcher_testing import TRAIN, Driver, driver_env, manifest, only_job_dir, slurm_ids, wait_until

from sweepit.results import JobPaths, JobState, read_metrics, read_record, read_rungs
from sweepit_testing import HELD_JOBS, Hold, child_env, run_command

# Two jobs of 4 epochs on digits, cut at epoch 3 (eta 2: one goes on). Both are held at the first step of their third
# epoch (sweepit_testing.Hold), in the middle of the rung, where job 0 is requeued. sgd at lr 0.1 leads lr 0.001.
GRID = ["task=digits", "model._target_=held_jobs.mlp", "optimizer=sgd", "lr=0.1,0.001", "epochs=4", "device=cpu",
        "trainer.threads=1", "timeout_min=5", "hydra/sweeper=halving", "hydra.sweeper.eta=2",
        "hydra.sweeper.rungs=[3]", "hydra/launcher=slurm", "hydra.launcher.poll_interval_s=1",
        "hydra.launcher.result_grace_s=1", "hydra.callbacks.summary.report=false"]
EPOCH_LINE = re.compile(r"^Epoch (\d+)/4\b", re.MULTILINE)
TIMING = ("epoch_time_s", "samples_per_s", "step_time_s")  # what differs between two runs of the same job


def _attempts(job_dir: Path) -> list[tuple[str, int]]:
    """Each start's status and epochs, the first first (result.1.json, ..., then result.json)."""
    names = sorted((p.name for p in job_dir.glob("result.*.json")), key=lambda n: int(n.split(".")[1]))
    records = [read_record(job_dir, name) for name in [*names, "result.json"]]
    return [(str(r.status), int(r.result["epochs_completed"])) for r in records]


def _logs(job_dir: Path) -> list[str]:
    """Each start's stdout (a Slurm job's, requeues included), the first first."""
    logs = sorted(job_dir.glob("stdout.*.log"), key=lambda p: int(p.name.split(".")[1]))
    return [log.read_text() for log in [*logs, JobPaths(job_dir).stdout]]


def _untimed(folder: Path) -> list[dict[str, Any]]:
    rows, _ = read_metrics(folder)
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def test_a_job_requeued_mid_rung_runs_each_rung_once_and_the_promoted_job_ends_as_one_run_straight_through(
        tmp_path: Path) -> None:
    sweep, hold = tmp_path / "sweep", Hold(tmp_path / "hold")
    driver = Driver(TRAIN, sweep, *GRID,
                    env=driver_env(**{k: hold.env()[k] for k in ("PYTHONPATH", "SWEEPIT_TEST_HOLD")}))
    try:
        wait_until(lambda: hold.held(0) and hold.held(1), "both jobs held in their third epoch", 240)
        job = only_job_dir(sweep, 0)
        subprocess.run(["scontrol", "requeue", slurm_ids(sweep)[0]], check=True, timeout=30)
        wait_until(lambda: read_record(job).status == JobState.INTERRUPTED, "job 0 stopped for its requeue", 60)
        hold.release()
        code = driver.finish(timeout_s=400)
    finally:
        driver.kill()
        if (sweep / "sweep.json").exists():  # a test that failed leaves none of its jobs in the shared queue
            subprocess.run(["scancel", *slurm_ids(sweep).values()], timeout=30)
    assert code == 0, driver.stderr[-3000:]
    plan = read_rungs(sweep)
    assert plan is not None and plan.promoted == [[0]]
    states = {e.num: str(e.state) for e in manifest(sweep).jobs.values()}
    assert states == {0: "completed", 1: "paused"}
    jobs = {num: only_job_dir(sweep, num) for num in (0, 1)}
    # The requeue is the same start of job 0 (one Slurm job, run again from its checkpoint); the promotion a new one.
    assert _attempts(jobs[0]) == [("paused", 3), ("completed", 4)]
    assert _attempts(jobs[1]) == [("paused", 3)]
    logs = {num: _logs(folder) for num, folder in jobs.items()}
    assert [[int(e) for e in EPOCH_LINE.findall(log)] for log in logs[0]] == [[1, 2, 3], [4]], logs[0]
    assert [[int(e) for e in EPOCH_LINE.findall(log)] for log in logs[1]] == [[1, 2, 3]], logs[1]
    assert "sweepit: resumed from" in logs[0][0] and "sweepit: resumed from" in logs[0][1]
    assert "sweepit: resumed from" not in logs[1][0]

    straight = tmp_path / "straight"
    overrides = manifest(sweep).jobs[0].overrides
    proc = run_command([sys.executable, TRAIN, *overrides, f"hydra.run.dir={straight}"], tmp_path,
                       child_env(PYTHONPATH=str(HELD_JOBS)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _untimed(jobs[0]) == _untimed(straight) and len(_untimed(straight)) == 4
