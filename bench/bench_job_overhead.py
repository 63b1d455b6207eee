"""Three per-job costs of the local launcher, measured alone: composing a job's config and forking the driver
(in the driver), and running Hydra's job steps around the task (in the forked job).

Run: python bench/bench_job_overhead.py [--jobs 64] [--forks 16] [--json F]

- Composing: the CPU time per job of Hydra's own `load_sweep_config` and of sweepit's `ComposedConfigs`
  (one compose per choice of config groups, value overrides applied to a copy), for the jobs of
  `train.py -m task=linreg epochs=1 data.n_synthetic=100 seed=range(N)` on the built-in configs.
- Forking: the CPU time (user + system) that `os.fork()` takes in the forking process, once it has imported
  what the driver has before it forks its first job (Hydra; then torch; then torch._dynamo, which the
  local launcher preloads), median of `--forks`; measured first, in a process that has imported nothing
  else. Forking copies the page tables of the process's private memory, so it grows with the driver's
  resident memory; in a virtual machine each copied page-table entry costs more than on bare metal.
- A job's Hydra steps: the CPU time per job of Hydra's own `run_job` and of sweepit's `run_forked_job` (the
  same steps with fewer config copies) around a task that does nothing, each on a fresh copy of the same
  composed jobs, writing their `.hydra/` files under a temporary directory.
- A job's whole path in its process: the CPU time (user + system) in a process forked for each job, from the
  fork to the job's end, of Hydra's own `run_job` and of sweepit's (`JobRunner`: the job's session,
  `run_forked_job`, its record in result.json, the session's end), around a task that does nothing; forked from
  a process that has composed the jobs and prepared what the local launcher's driver prepares before its first
  fork (`preload` of the job modules, `warm_up` where the code has one, `gc.freeze`); medians, the two
  alternated job by job, with the modules each job imported for the first time.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def compose_ms(n_jobs: int) -> dict[str, float]:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from hydra_plugins.sweepit._compose import ComposedConfigs

    fixed = ["task=linreg", "epochs=1", "data.n_synthetic=100"]
    jobs = [[*fixed, f"seed={i}"] for i in range(n_jobs)]
    out = {}
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", fixed, run_mode=RunMode.MULTIRUN)
        for label, composer in (("hydra_ms", copy.deepcopy(loader)),
                                ("sweepit_ms", ComposedConfigs(copy.deepcopy(loader)))):
            composer.load_sweep_config(master, jobs[0])  # the first one reads the files
            t0 = time.process_time()
            for job in jobs[1:]:
                composer.load_sweep_config(master, job)
            out[label] = (time.process_time() - t0) / (n_jobs - 1) * 1000
    return out


def run_job_ms(n_jobs: int) -> dict[str, float]:
    import tempfile

    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import run_job, setup_globals
    from hydra.types import HydraContext, RunMode
    from omegaconf import open_dict

    from hydra_plugins.sweepit._compose import ComposedConfigs
    from hydra_plugins.sweepit._runner import run_forked_job

    class NoCallbacks:
        def on_job_start(self, **_: Any) -> None: ...
        def on_job_end(self, **_: Any) -> None: ...

    setup_globals()
    out = {}
    with tempfile.TemporaryDirectory() as tmp, initialize_config_dir(config_dir=str(REPO / "conf"),
                                                                     version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", ["task=linreg", f"hydra.sweep.dir={tmp}"],
                                           run_mode=RunMode.MULTIRUN)
        composer = ComposedConfigs(copy.deepcopy(loader))
        configs = []
        for i in range(n_jobs):
            config = composer.take(master, [f"seed={i}"])
            with open_dict(config):
                config.hydra.job.num = config.hydra.job.id = i
            configs.append(config)
        context = HydraContext(config_loader=loader, callbacks=NoCallbacks())  # type: ignore[arg-type]
        runs = {"hydra_run_job_ms": lambda c: run_job(task_function=lambda cfg: None, config=c,
                                                      job_dir_key="hydra.sweep.dir",
                                                      job_subdir_key="hydra.sweep.subdir", hydra_context=context),
                "sweepit_run_job_ms": lambda c: run_forked_job(context, lambda cfg: None, c)}
        for label, run in runs.items():
            fresh = [copy.deepcopy(c) for c in configs]  # each run edits its config
            run(fresh[0])  # the first one sets up logging's modules
            t0 = time.process_time()
            for config in fresh[1:]:
                run(config)
            out[label] = (time.process_time() - t0) / (n_jobs - 1) * 1000
    return out


def job_path_ms(n_jobs: int) -> dict[str, Any]:
    import tempfile

    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import run_job, setup_globals
    from hydra.types import HydraContext, RunMode
    from omegaconf import open_dict

    from hydra_plugins.sweepit import _runner
    from hydra_plugins.sweepit._compose import ComposedConfigs
    from sweepit.local import preload

    class NoCallbacks:
        def on_job_start(self, **_: Any) -> None: ...
        def on_job_end(self, **_: Any) -> None: ...

    setup_globals()
    times: dict[str, list[float]] = {"hydra_job_path_ms": [], "sweepit_job_path_ms": []}
    imported: dict[str, set[str]] = {label: set() for label in times}
    with tempfile.TemporaryDirectory() as tmp, initialize_config_dir(config_dir=str(REPO / "conf"),
                                                                     version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", ["task=linreg", f"hydra.sweep.dir={tmp}"],
                                           run_mode=RunMode.MULTIRUN)
        composer = ComposedConfigs(copy.deepcopy(loader))
        context = HydraContext(config_loader=loader, callbacks=NoCallbacks())  # type: ignore[arg-type]
        preload([])  # the job modules, as the local launcher's driver imports them
        try:
            from hydra_plugins.sweepit._job_steps import warm_up  # type: ignore[import-not-found, unused-ignore]
        except ImportError:  # a checkout without it (the baseline)
            warm_up = None
        if warm_up is not None:
            warm_up(master)
        runs = {"hydra_job_path_ms": lambda c, d: run_job(task_function=lambda cfg: None, config=c,
                                                          job_dir_key="hydra.sweep.dir",
                                                          job_subdir_key="hydra.sweep.subdir", hydra_context=context),
                "sweepit_job_path_ms": lambda c, d: _runner.JobRunner(context, lambda cfg: None)(c, d)}
        gc.collect(1)
        gc.freeze()  # as the local launcher's driver does before its first fork
        for i in range(n_jobs):
            for label, run in runs.items():
                config = composer.take(master, ["task=linreg", f"seed={i}"])  # a sweeper's overrides of a job
                with open_dict(config):
                    config.hydra.job.num = config.hydra.job.id = i
                job_dir = Path(tmp) / f"{label}-{i}"
                read, write = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(read)
                    before = set(sys.modules)
                    t0 = time.process_time()  # user + system, to the nanosecond (os.times() counts 10 ms ticks)
                    run(config, job_dir)
                    cpu_s = time.process_time() - t0
                    os.write(write, json.dumps([cpu_s, sorted(set(sys.modules) - before)]).encode())
                    os._exit(0)
                os.close(write)
                with os.fdopen(read, "rb") as f:
                    cpu_s, new = json.loads(f.read())
                os.waitpid(pid, 0)
                times[label].append(cpu_s * 1000)
                imported[label].update(new)
    out: dict[str, Any] = {label: statistics.median(values) for label, values in times.items()}
    out.update({f"{label}_imports": sorted(names) for label, names in imported.items()})
    return out


def fork_ms(n_forks: int) -> dict[str, float]:
    out = {}
    for label, module in (("hydra", "hydra"), ("torch", "torch"), ("torch._dynamo", "torch._dynamo")):
        __import__(module)
        gc.collect(1)
        gc.freeze()  # as the driver does before forking
        times = []
        for _ in range(n_forks):
            t0 = time.process_time()
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            times.append(time.process_time() - t0)
            os.waitpid(pid, 0)
        with open("/proc/self/status") as f:
            rss_mb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024
        out[f"fork_ms_with_{label}"] = statistics.median(times) * 1000
        out[f"rss_mb_with_{label}"] = rss_mb
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=64, help="jobs composed by each composer")
    parser.add_argument("--forks", type=int, default=16, help="forks per measurement (the median is shown)")
    parser.add_argument("--json", type=Path, help="write the figures to this JSON file")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "bench"))
    from machine import machine_line

    figures: dict[str, Any] = {"loadavg_before": os.getloadavg()[0], **fork_ms(args.forks)}
    print(machine_line(), flush=True)  # after the forks: it imports torch
    for label in ("hydra", "torch", "torch._dynamo"):
        print(f"fork with {label:14s} imported: {figures[f'fork_ms_with_{label}']:5.1f} ms CPU "
              f"(RSS {figures[f'rss_mb_with_{label}']:.0f} MB)", flush=True)
    figures.update(compose_ms(args.jobs))
    print(f"compose one job: Hydra {figures['hydra_ms']:.1f} ms CPU, sweepit {figures['sweepit_ms']:.1f} ms CPU "
          f"({figures['hydra_ms'] / figures['sweepit_ms']:.1f}x less)")
    figures.update(run_job_ms(args.jobs))
    print(f"a job's Hydra steps around a task that does nothing: Hydra's run_job {figures['hydra_run_job_ms']:.1f} ms "
          f"CPU, sweepit's run_forked_job {figures['sweepit_run_job_ms']:.1f} ms CPU "
          f"({figures['hydra_run_job_ms'] / figures['sweepit_run_job_ms']:.2f}x less)")
    figures.update(job_path_ms(args.jobs))
    print(f"a job's whole path in a process forked for it, around a task that does nothing: Hydra's run_job "
          f"{figures['hydra_job_path_ms']:.1f} ms CPU, sweepit's (session, run_forked_job, record) "
          f"{figures['sweepit_job_path_ms']:.1f} ms CPU; modules a job imported first: Hydra's "
          f"{figures['hydra_job_path_ms_imports'] or 'none'}, sweepit's "
          f"{figures['sweepit_job_path_ms_imports'] or 'none'}")
    figures["loadavg_after"] = os.getloadavg()[0]
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": sys.argv, "figures": figures}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
