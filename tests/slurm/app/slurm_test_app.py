"""A Hydra app for the Slurm launcher's tests: starts in a second (no torch), records where and when each
task ran, and fails or hangs on demand (see conf/config.yaml)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from sweepit.results._job_files import write_result


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    job_dir = Path(HydraConfig.get().runtime.output_dir)
    x = int(cfg.x)
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    start = time.time()
    if rank == 0:
        print(f"job x={x} starting", flush=True)
        times = {"start": start, "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                 "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}
        (job_dir / "times.json").write_text(json.dumps(times))
    # Read from the environment at run time: a resume submitted without it runs the job cleanly.
    fail_on = [int(v) for v in os.environ.get("SLURM_APP_FAIL_ON", "").split(",") if v]
    slow = x in cfg.slow_on or HydraConfig.get().job.num in cfg.slow_jobs
    time.sleep(float(cfg.sleep_s) + (float(cfg.extra_sleep_s) if slow else 0.0))
    if slow:  # held until that many other jobs have ended (an event, not a time), for at most 300 s
        deadline, sweep_dir = time.time() + 300, Path(HydraConfig.get().sweep.dir)
        while len(list(sweep_dir.glob("*/result.json"))) < cfg.slow_until_results and time.time() < deadline:
            time.sleep(0.05)
    while cfg.release_file and not Path(str(cfg.release_file)).exists():  # held until the test says (an event)
        time.sleep(0.05)
    if x in cfg.hang_on:
        time.sleep(600)
    if cfg.fail_on_rank is not None and rank == int(cfg.fail_on_rank):
        raise ValueError(f"rank {rank} fails on purpose (fail_on_rank)")
    if cfg.fail_on_rank is not None:
        time.sleep(600)  # the other ranks wait for it, as in a collective whose peer never comes
    if x in fail_on:
        raise ValueError(f"job x={x} fails on purpose (SLURM_APP_FAIL_ON={os.environ['SLURM_APP_FAIL_ON']})")
    if rank == 0:
        write_result(job_dir, {"status": "completed", "objective": float(x * x), "metric": "x2",
                               "direction": "minimize", "wall_time_s": time.time() - start})
        while cfg.linger_file and not Path(str(cfg.linger_file)).exists():  # ended by its record, running in Slurm
            time.sleep(0.05)
    return float(x * x)


if __name__ == "__main__":
    main()
