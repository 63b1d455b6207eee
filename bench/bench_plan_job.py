"""The driver's CPU per job to plan a sweep's jobs (issue 39): a full compose (`SweepitLauncher.compose_job`, then
the planned keys selected) against `SweepitLauncher.plan_job`, in this process, on two configs: train.py's
(conf/, `task=linreg`: a subdir of `${sweepit.job_dir:...}`, the Slurm launcher's keys) and an app with no config of
its own (bench/apps/fixed_work.py's: `+x=N +work_s=0.01`). No Slurm, no job runs.

Run: python bench/bench_plan_job.py [--jobs 2000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
KEYS = ("trainer.gpus", "timeout_min", "metric", "direction", "hydra.job.env_set", "hydra.output_subdir",
        "hydra.job.name", "hydra.job.chdir")  # what the Slurm launcher's packed plan asks of each job


def measure(conf_dir: Path, master_overrides: list[str], jobs: list[list[str]], n_composed: int) -> dict[str, Any]:
    from hydra import initialize_config_dir
    from hydra._internal.callbacks import Callbacks
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import HydraContext, RunMode

    from hydra_plugins.sweepit._plan_job import selected
    from hydra_plugins.sweepit.slurm_launcher import SlurmLauncher

    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", master_overrides, run_mode=RunMode.MULTIRUN)
        HydraConfig.instance().set_config(master)
        launcher = SlurmLauncher(dry_run=True)
        launcher.setup(hydra_context=HydraContext(config_loader=loader, callbacks=Callbacks()),
                       task_function=lambda cfg: None, config=master)
        sweep_dir = Path(tempfile.gettempdir()) / "bench-plan-job"
        launcher.plan_job(0, jobs[0], sweep_dir, KEYS)  # the working config made
        launcher.compose_job(0, jobs[0], sweep_dir)     # the base composed
        c0 = time.process_time()
        for num, job in enumerate(jobs):
            launcher.plan_job(num, job, sweep_dir, KEYS)
        plan_ms = (time.process_time() - c0) / len(jobs) * 1e3
        c0 = time.process_time()
        for num, job in enumerate(jobs[:n_composed]):
            config, _ = launcher.compose_job(num, job, sweep_dir)
            [selected(config, key) for key in KEYS]
        compose_ms = (time.process_time() - c0) / n_composed * 1e3
    return {"plan_job_cpu_ms": round(plan_ms, 3), "compose_cpu_ms": round(compose_ms, 2),
            "ratio": round(compose_ms / plan_ms, 1), "jobs_planned": len(jobs), "jobs_composed": n_composed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="jobs planned (a tenth of them composed; default 2000)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "bench"))
    from machine import machine_line

    empty = Path(tempfile.mkdtemp())
    (empty / "config.yaml").write_text("{}\n")
    n = args.jobs
    rows = {
        "train.py (conf/, task=linreg)": measure(REPO / "conf", ["task=linreg", "hydra/launcher=slurm"],
                                                 [["task=linreg", f"seed={i}", "lr=0.1"] for i in range(n)], n // 10),
        "no config (fixed_work.py's)": measure(empty, ["hydra/launcher=slurm"],
                                               [[f"+x={i}", "+work_s=0.01"] for i in range(n)], n // 10),
    }
    print(machine_line())
    print(f"{'config':<32}{'plan_job ms':>12}{'compose ms':>12}{'ratio':>8}   (CPU per job)")
    for name, r in rows.items():
        print(f"{name:<32}{r['plan_job_cpu_ms']:>12.3f}{r['compose_cpu_ms']:>12.2f}{r['ratio']:>8.1f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"benchmark": "bench/bench_plan_job.py", "argv": sys.argv[1:],
                                         "machine": machine_line(), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
