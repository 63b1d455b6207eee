"""Per-job costs of the local launcher, measured alone: composing a job's config and forking the driver
(in the driver), and running Hydra's job steps around the task (in the forked job).

Run: python bench/bench_job_overhead.py [--jobs 64] [--forks 16] [--json F]
     python bench/bench_job_overhead.py --e2e local|packed [--sizes 8,72] [--repo DIR] [--json F]

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

`--e2e` measures instead the CPU a trivial job costs end to end, beyond its work: the CPU (user + system) of every
process of a sweep (driver, fork server, jobs: `getrusage(RUSAGE_CHILDREN)` of the sweep's process, whose descendants
are all waited for), for two sweep sizes; the difference over the difference in jobs is one job's cost, without the
fixed start-up. `local`: `bench/apps/fixed_work.py -m hydra/launcher=local +work_s=0 +x=range(N)` (a plain Hydra app,
2 workers). `packed`: a packed grid's worker engine (`PackedWorker`, as on a node, without Slurm) over a plan of
`--plan` entries, N of them its own, in a process that has imported torch as a worker preloads it; each job's body
returns at once (no Hydra steps: the engine's and the fork's cost alone). `--repo DIR` runs another checkout's
(its app and, with its own interpreter as `python`, its sweepit): the baseline, alternated with this one by the caller.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
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


@contextlib.contextmanager
def linreg_sweep() -> Iterator[tuple[str, Any, Any, Any]]:
    """(a temporary sweep directory, the multirun's master config of `task=linreg` on the built-in configs, a
    ComposedConfigs on a copy of its loader, a HydraContext whose callbacks do nothing): what both job
    measurements start from."""
    import tempfile

    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import setup_globals
    from hydra.types import HydraContext, RunMode

    from hydra_plugins.sweepit._compose import ComposedConfigs

    class NoCallbacks:
        def on_job_start(self, **_: Any) -> None: ...
        def on_job_end(self, **_: Any) -> None: ...

    setup_globals()
    with tempfile.TemporaryDirectory() as tmp, initialize_config_dir(config_dir=str(REPO / "conf"),
                                                                     version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", ["task=linreg", f"hydra.sweep.dir={tmp}"],
                                           run_mode=RunMode.MULTIRUN)
        context = HydraContext(config_loader=loader, callbacks=NoCallbacks())  # type: ignore[arg-type]
        yield tmp, master, ComposedConfigs(copy.deepcopy(loader)), context


def run_job_ms(n_jobs: int) -> dict[str, float]:
    from hydra.core.utils import run_job
    from omegaconf import open_dict

    from hydra_plugins.sweepit._runner import run_forked_job

    out = {}
    with linreg_sweep() as (_, master, composer, context):
        configs = []
        for i in range(n_jobs):
            config = composer.take(master, [f"seed={i}"])
            with open_dict(config):
                config.hydra.job.num = config.hydra.job.id = i
            configs.append(config)
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
    from hydra.core.utils import run_job
    from omegaconf import open_dict

    from hydra_plugins.sweepit import _runner
    from sweepit.local import preload

    times: dict[str, list[float]] = {"hydra_job_path_ms": [], "sweepit_job_path_ms": []}
    imported: dict[str, set[str]] = {label: set() for label in times}
    with linreg_sweep() as (tmp, master, composer, context):
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


PACKED = """
import json, sys, time
from pathlib import Path
import torch  # as a worker preloads it
from omegaconf import OmegaConf
from sweepit.local import Job, Reply
from sweepit.slurm._pack_worker import PackedWorker, PackSpec, PlannedEntry, write_plan

sweep, n_jobs, n_plan = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
entries = [PlannedEntry(n, [f"x={n}"], str(sweep / f"{n}_x={n}"), 0 if n < n_jobs else 1, {}) for n in range(n_plan)]
write_plan(sweep, 1, entries, ["a", "b"])
del entries  # a worker reads its plan once it runs (a fork server is forked before)

def compose(job, work):
    job.config = OmegaConf.create({"x": work.num})
    job.job_dir = Path(work.job_dir)
    job.job_dir.mkdir(parents=True, exist_ok=True)

def body(job):
    return Reply(status="completed", value=0.0)

assert PackedWorker(PackSpec(str(sweep), 1, 0, 2, 1, 60, 5), "local-1", compose, body).run() == n_jobs
"""


def e2e_cpu_s(mode: str, n_jobs: int, repo: Path, plan: int) -> float:
    """The CPU seconds of one sweep of `n_jobs` trivial jobs, every process of it."""
    import resource
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        if mode == "local":
            cmd = [sys.executable, str(repo / "bench" / "apps" / "fixed_work.py"), "-m", "hydra/launcher=local",
                   "hydra.launcher.n_workers=2", "+work_s=0", f"+x=range({n_jobs})", f"hydra.sweep.dir={tmp}/sweep"]
        else:
            cmd = [sys.executable, "-c", PACKED, f"{tmp}/sweep", str(n_jobs), str(max(plan, n_jobs))]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"{cmd} failed: {done.stderr[-3000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def e2e(mode: str, sizes: list[int], repo: Path, plan: int) -> dict[str, Any]:
    small, large = sizes
    cpu = {n: e2e_cpu_s(mode, n, repo, plan) for n in (small, large)}
    per_job_ms = (cpu[large] - cpu[small]) / (large - small) * 1000
    return {"mode": mode, "repo": str(repo), "sizes": sizes, "cpu_s": cpu, "per_job_ms": per_job_ms,
            "loadavg": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=64, help="jobs composed by each composer")
    parser.add_argument("--forks", type=int, default=16, help="forks per measurement (the median is shown)")
    parser.add_argument("--json", type=Path, help="write the figures to this JSON file")
    parser.add_argument("--e2e", choices=["local", "packed"], help="one trivial job's CPU, end to end (see above)")
    parser.add_argument("--sizes", default="8,72", help="--e2e: the two sweep sizes, in jobs")
    parser.add_argument("--plan", type=int, default=20000, help="--e2e packed: entries in the plan")
    parser.add_argument("--repo", type=Path, default=REPO, help="--e2e: the checkout whose app runs")
    args = parser.parse_args(argv)
    if args.e2e is not None:
        sizes = [int(n) for n in args.sizes.split(",")]
        result = e2e(args.e2e, sizes, args.repo.resolve(), args.plan)
        print(f"{args.e2e} {args.repo}: {result['per_job_ms']:.1f} ms CPU per trivial job (sweeps of {sizes} jobs: "
              f"{result['cpu_s'][sizes[0]]:.2f} s, {result['cpu_s'][sizes[1]]:.2f} s; load {result['loadavg']:.1f})",
              flush=True)
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"command": sys.argv, "figures": result}, indent=1) + "\n")
        return 0
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
