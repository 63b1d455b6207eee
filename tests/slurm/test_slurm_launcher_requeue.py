"""Preemption and time limits: on submitit's USR2 the job is requeued and resumes from its epoch checkpoint,
ending with the same metrics as an uninterrupted run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from slurm_launcher_testing import TRAIN, Driver, read_json, result, slurm_ids, tasks, wait_until

TIMING = ("epoch_time_s", "samples_per_s", "step_time_s")


def _rows(job_dir: Path) -> list[dict[str, float]]:
    lines = (job_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]


def test_usr2_requeues_the_job_and_it_resumes_to_the_same_final_metrics(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    # Two identical trainings (`rep` changes nothing in them), about 0.5 s per epoch; job 1 is interrupted.
    driver = Driver(TRAIN, sweep, "task=linreg", "epochs=8", "data.n_synthetic=40000", "device=cpu",
                    "timeout_min=5", "+rep=0,1", "hydra/launcher=slurm", "hydra.launcher.poll_interval_s=1")
    try:
        interrupted = sweep / "1_+rep=1,data.n_synthetic=40000,device=cpu,epochs=8,task=linreg,timeout_min=5"
        metrics = interrupted / "metrics.jsonl"
        wait_until(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 2, "two epochs of job 1",
                   120)
        job_id = slurm_ids(sweep)[1]
        # What Slurm sends signal_delay_s before the time limit, and on preemption; plain scancel --signal
        # reaches the job's srun step, where submitit's handler runs.
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True, timeout=30)
        code = driver.finish()
    finally:
        driver.kill()
    assert code == 0, driver.stderr
    uninterrupted = sweep / "0_+rep=0,data.n_synthetic=40000,device=cpu,epochs=8,task=linreg,timeout_min=5"
    assert result(interrupted)["status"] == "completed" and result(interrupted)["epochs_completed"] == 8
    assert _rows(interrupted) == _rows(uninterrupted)  # every epoch's losses and weights, bit for bit
    assert result(interrupted)["final"]["val_loss"] == result(uninterrupted)["final"]["val_loss"]
    log = (interrupted / "stdout.log").read_text()
    assert "sweepit: resumed from" in log and "Epoch 8/8" in log
    assert tasks(interrupted)[0]["slurm_restart_count"] == "1"  # the same Slurm job, run again
    requeued = subprocess.run(["sacct", "-n", "-X", "-P", "-D", "-j", job_id, "-o", "State"], capture_output=True,
                              text=True, check=True, timeout=30).stdout.split()
    assert requeued[0] == "REQUEUED" and requeued[-1] == "COMPLETED", requeued
    assert "submitit WARNING" in (interrupted / "stderr.log").read_text()  # "Caught signal SIGUSR2"
    assert read_json(sweep / "sweep.json")["jobs"][1]["state"] == "completed"
    assert "2 jobs: 2 completed" in driver.stdout
