"""A Hydra app for the launcher tests: records when each job ran, and misbehaves on demand (see conf/)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from sweepit.results._job_files import write_result

TIMES_FILE = "times.json"


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    job_dir = Path(HydraConfig.get().runtime.output_dir)
    x = int(cfg.x)
    start = time.time()
    times: dict[str, float | int | str | None] = {"start": start, "end": None, "pid": os.getpid(),
                                                  "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                                  "threads": os.environ.get("OMP_NUM_THREADS")}
    print(f"job x={x} starting", flush=True)
    if x in cfg.spawn_on:
        times["grandchild_pid"] = subprocess.Popen(["sleep", "600"]).pid
    (job_dir / TIMES_FILE).write_text(json.dumps(times))
    time.sleep(float(cfg.sleep_s))
    while cfg.release_file and not Path(str(cfg.release_file)).exists():  # held until the test says (an event)
        time.sleep(0.05)
    if x in cfg.segfault_on:
        print(f"job x={x} about to segfault", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    if x in cfg.raise_on:
        raise ValueError(f"job x={x} raises on purpose")
    if x in cfg.exit_on:
        os._exit(3)
    if x in cfg.get("killed_mid_write_on", []):
        from sweepit._files import atomic_file

        with atomic_file(job_dir / "checkpoint.pt", binary=True) as f:
            f.write(b"half a checkpoint")
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer would, mid-write
    if x in cfg.ignore_term_on:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if x in cfg.get("remove_others_on", []):  # an app's clean-up of other runs' folders
        for other in job_dir.parent.iterdir():
            if other.is_dir() and other != job_dir and other.name[0].isdigit():
                shutil.rmtree(other)
    if x in (*cfg.hang_on, *cfg.spawn_on, *cfg.ignore_term_on):
        time.sleep(600)
    times["end"] = end = time.time()
    (job_dir / TIMES_FILE).write_text(json.dumps(times))
    write_result(job_dir, {"status": "completed", "objective": float(x * x), "metric": "x2",
                           "direction": "minimize", "written_by": "app", "wall_time_s": end - start})
    return float(x * x)


if __name__ == "__main__":
    main()
