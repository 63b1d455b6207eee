"""sweepit's local launcher (`hydra/launcher=local`): each job in its own forked process, a few at a time.

The driver imports Hydra, the app and the `preload` modules once, then forks one process per job, so a
job costs a fork instead of a Python + torch start. A crash, an out-of-memory kill or `os._exit` in a
job ends only that job; the driver records it in the job's `result.json`. Heavy modules are imported in
`launch()` only, so Hydra's plugin scan and `--help` stay fast.
"""

from __future__ import annotations

import gc
import importlib
import logging
import math
import pkgutil
import signal
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobRuntime, JobStatus, configure_log, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from hydra_plugins.sweepit._driver import setup_driver
from hydra_plugins.sweepit.config import DEFAULT_PRELOAD
from sweepit.errors import ConfigError
from sweepit.local._pool import Job, Pool
from sweepit.local._resources import GpuPool, cpu_count, resolve_n_workers, resolve_threads, visible_gpus
from sweepit.local._run import SweepFailed, SweepRun, job_dir
from sweepit.local._worker import ChildSpec, child_main
from sweepit.results._job_files import read_result
from sweepit.results._manifest import FAILED_STATUSES, JobEntry, is_finished, open_manifest, write_manifest
from sweepit.results._progress import Progress
from sweepit.results._summary import summarize

log = logging.getLogger(__name__)
_preloaded: set[str] = set()


def _require(ok: bool, rule: str, value: str, fix: str) -> None:
    if not ok:
        raise ConfigError(f"{rule}, but got {value}. {fix}")


def preload(names: Sequence[str]) -> None:
    """Import each module once in the driver, before any fork: `module`, `module:function` (then called),
    `package.*` (the package and its modules). A module absent here is skipped; other failures are warned."""
    for name in names:
        if name in _preloaded:
            continue
        _preloaded.add(name)
        module, _, function = name.partition(":")
        try:
            if module.endswith(".*"):
                package = importlib.import_module(module[:-2])
                for info in pkgutil.iter_modules(getattr(package, "__path__", [])):
                    importlib.import_module(f"{package.__name__}.{info.name}")
                continue
            loaded = importlib.import_module(module)
            if function:
                getattr(loaded, function)()
        except ModuleNotFoundError as e:
            log.debug(f"hydra.launcher.preload: skipped {name!r}: {e}")
        except Exception as e:
            log.warning(f"hydra.launcher.preload: {name!r} failed ({type(e).__name__}: {e}); each job will import "
                        "it itself. Fix or remove it in hydra.launcher.preload.")


class LocalLauncher(Launcher):
    def __init__(self, n_workers: int = 0, threads_per_job: int = 0, fail_on_error: bool = True,
                 resume: bool = False, preload: Sequence[str] | None = None, stderr_tail_lines: int = 50,
                 term_grace_s: float = 5.0, gpus_key: str = "trainer.gpus", print_summary: bool = True) -> None:
        _require(n_workers >= 0, "hydra.launcher.n_workers must be 0 (auto) or a positive count",
                 f"n_workers={n_workers}", "Set for example hydra.launcher.n_workers=2.")
        _require(threads_per_job >= 0, "hydra.launcher.threads_per_job must be 0 (auto) or a positive count",
                 f"threads_per_job={threads_per_job}", "Set for example hydra.launcher.threads_per_job=1.")
        _require(stderr_tail_lines >= 0, "hydra.launcher.stderr_tail_lines must be >= 0",
                 f"stderr_tail_lines={stderr_tail_lines}", "Set for example hydra.launcher.stderr_tail_lines=20.")
        _require(math.isfinite(term_grace_s) and term_grace_s >= 0, "hydra.launcher.term_grace_s must be >= 0",
                 f"term_grace_s={term_grace_s}", "Set for example hydra.launcher.term_grace_s=5.")
        self.n_workers = n_workers
        self.threads_per_job = threads_per_job
        self.fail_on_error = fail_on_error
        self.resume = resume
        self.preload = list(DEFAULT_PRELOAD if preload is None else preload)
        self.stderr_tail_lines = stderr_tail_lines
        self.term_grace_s = term_grace_s
        self.gpus_key = gpus_key
        self.print_summary = print_summary
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None
        self._sweep_dir = Path()
        self._open: tuple[Pool, SweepRun, Any, Progress] | None = None  # the run of start()/wait_any()
        self._started: dict[int, Job] = {}

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function
        # The sweeper shares this context: the configs it composes to validate a batch are kept for launch().
        self.composed = setup_driver(hydra_context)

    def _compose(self, job: Job) -> None:
        """The job's full config, as Hydra's own launchers compose it, and the directory it will run in."""
        assert self.hydra_context is not None and self.config is not None
        t0 = time.perf_counter()
        config = self.composed.take(self.config, job.overrides)
        with open_dict(config):
            config.hydra.job.id = job.num
            config.hydra.job.num = job.num
        job.config, job.job_dir = config, job_dir(config, self._sweep_dir)
        log.debug(f"job {job.num} config ready in {time.perf_counter() - t0:.3f} s")

    def _child(self, job: Job, spec: ChildSpec, conn: Connection) -> None:
        assert self.hydra_context is not None and self.task_function is not None
        child_main(spec, conn, self.hydra_context, self.task_function)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and self.hydra_context is not None
        sweep_dir, gpus, gpu_pool, n_workers, threads, check = self._prepare(len(job_overrides))
        jobs = [Job(num=initial_job_idx + i, overrides=list(o)) for i, o in enumerate(job_overrides)]
        manifest = open_manifest(sweep_dir, launcher="local")
        for j in jobs:
            if not (self.resume and j.num in manifest.jobs):  # a resume keeps the record of finished jobs
                manifest.jobs[j.num] = JobEntry(num=j.num, overrides=j.overrides, job_dir="")
        write_manifest(manifest)
        if self.resume and not any(is_finished(p) for p in sweep_dir.iterdir() if p.is_dir()):
            log.warning(f"hydra.launcher.resume=true, but {sweep_dir} holds no finished job: is hydra.sweep.dir "
                        "the directory of the sweep to resume?")
        progress = Progress(len(jobs))
        run = SweepRun(manifest, progress, compose=self._compose, resume=self.resume, check=check,
                       stderr_tail_lines=self.stderr_tail_lines)
        log.info(f"Launching {len(jobs)} jobs on {n_workers} local worker(s), {threads} torch "
                 f"thread(s) each{f', GPUs {gpus}' if gpus else ''}{', resuming' if self.resume else ''}; "
                 f"sweep dir {sweep_dir}")
        pool = Pool(n_workers, gpu_pool, use_gpus=bool(gpus), threads=threads, echo=n_workers == 1,
                    term_grace_s=self.term_grace_s, child=self._child, hooks=run, clock_ticks=progress.live)
        # Objects the driver made so far move out of the collector's reach, so that no job's garbage
        # collection writes to (and so copies) the memory pages it shares with the driver. Only the young
        # generations are collected first: a full collection of torch's ~300,000 objects costs 0.2 s.
        gc.collect(1)
        gc.freeze()
        try:
            progress.draw()
            pool.run(jobs)
        finally:
            gc.unfreeze()
            progress.close()
            for entry in manifest.jobs.values():
                if entry.state == "queued":
                    entry.state = "not started"  # the sweep was stopped first
            write_manifest(manifest)
            self.composed.clear()
        if self.print_summary:
            print(summarize(sweep_dir), flush=True)
        report = run.failure_report(jobs, pool.stop_signal, self.fail_on_error)
        if report is not None:
            # Hydra skips on_multirun_end when the launcher raises: the report is written here instead.
            from sweepit.results.report import try_build_report

            try_build_report(sweep_dir)
            raise SweepFailed(report)
        return [self._job_return(j, run.statuses.get(j.num)) for j in jobs]

    # -- one job at a time, as a sweeper asks: the Optuna sweeper's AsyncLauncher protocol ---------------------
    def start(self, overrides: Sequence[str], job_num: int) -> None:
        """Queue the job `job_num`; it starts as soon as a worker is free, while `wait_any` drives the pool."""
        if self._open is None:
            self._open = self._open_run()
        pool, _, manifest, progress = self._open
        job = Job(num=job_num, overrides=list(overrides))
        manifest.jobs[job_num] = JobEntry(num=job_num, overrides=job.overrides, job_dir="")
        write_manifest(manifest)
        progress.queued += 1
        self._started[job_num] = job
        pool.submit(job)

    def wait_any(self, timeout_s: float | None = None) -> list[tuple[int, JobReturn]]:
        """Run the pool until a started job ends; `timeout_s` is checked between the pool's wake-ups. After a
        stop signal the running jobs are stopped and returned, and the next call raises KeyboardInterrupt."""
        assert self._open is not None, "start() a job before wait_any()"
        pool, run, _, _ = self._open
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            ended = [n for n in self._started if n in run.statuses or n in run.skipped]
            if ended or (deadline is not None and time.monotonic() >= deadline):
                break
            if pool.stop_signal is not None and not pool.running:
                raise KeyboardInterrupt(f"sweep stopped by {signal.Signals(pool.stop_signal).name}")
            if not pool.busy():
                break
            pool.step()
        return [(n, self._job_return(self._started.pop(n), run.statuses.get(n))) for n in ended]

    def close(self) -> None:
        """End the run of start()/wait_any(): jobs still running are killed, the manifest is written."""
        if self._open is None:
            return
        pool, _, manifest, progress = self._open
        self._open = None
        try:
            pool.close()
        finally:
            gc.unfreeze()
            progress.close()
            for entry in manifest.jobs.values():
                if entry.state == "queued":
                    entry.state = "not started"
            write_manifest(manifest)
            self.composed.clear()
            self._started.clear()

    def _open_run(self) -> tuple[Pool, SweepRun, Any, Progress]:
        """What launch() sets up, for jobs that come one by one."""
        sweep_dir, gpus, gpu_pool, n_workers, threads, check = self._prepare(None)
        manifest = open_manifest(sweep_dir, launcher="local")
        progress = Progress(0)
        run = SweepRun(manifest, progress, compose=self._compose, resume=self.resume, check=check,
                       stderr_tail_lines=self.stderr_tail_lines)
        log.info(f"Running jobs as the sweeper asks, on {n_workers} local worker(s), {threads} torch "
                 f"thread(s) each{f', GPUs {gpus}' if gpus else ''}; sweep dir {sweep_dir}")
        pool = Pool(n_workers, gpu_pool, use_gpus=bool(gpus), threads=threads, echo=n_workers == 1,
                    term_grace_s=self.term_grace_s, child=self._child, hooks=run, clock_ticks=progress.live)
        gc.collect(1)
        gc.freeze()  # as in launch(): jobs do not copy the driver's memory pages
        pool.open()
        return pool, run, manifest, progress

    def _prepare(self, n_jobs: int | None) -> tuple[Path, list[str], GpuPool, int, int, Callable[[Job], None]]:
        """Set-up shared by launch() and start(): logging, the sweep dir, preloads, GPUs, workers and threads
        (`n_jobs`: the launch's job count, None when jobs come one by one), and the check that gives each job
        its GPUs (one per rank) or its CPU worker slots (its ranks are processes)."""
        assert self.config is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = self._sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        preload(self.preload)
        log.debug(f"preloaded {self.preload} in {time.perf_counter() - t0:.2f} s")
        gpus = visible_gpus()
        gpu_pool = GpuPool(gpus)
        n_workers = resolve_n_workers(self.n_workers, self.threads_per_job, len(gpus), cpu_count(), n_jobs)
        threads = resolve_threads(self.threads_per_job, n_workers, cpu_count())

        def check(job: Job) -> None:
            ranks = self._ranks(job)
            if gpus and str(OmegaConf.select(job.config, "device", default="auto")) != "cpu":
                job.n_gpus = ranks
                gpu_pool.check(job.num, job.n_gpus, self.gpus_key)
            else:
                job.n_slots = min(max(ranks, 1), n_workers)

        return sweep_dir, gpus, gpu_pool, n_workers, threads, check

    def _ranks(self, job: Job) -> int:
        need = OmegaConf.select(job.config, self.gpus_key, default=1)
        _require(isinstance(need, int) and not isinstance(need, bool) and need >= 0,
                 f"{self.gpus_key} must be an integer >= 0", f"{self.gpus_key}={need!r} in job {job.num}",
                 f"Set for example {self.gpus_key}=1.")
        return int(need)

    def _job_return(self, job: Job, status: str | None) -> JobReturn:
        """What Hydra's sweeper gets: failed jobs as COMPLETED with None (reached only with fail_on_error=false,
        because Hydra's BasicSweeper re-raises the error of any FAILED job)."""
        result = read_result(job.job_dir) or {}
        status = status or str(result.get("status"))
        value: Any = None
        if job.reply is not None and job.reply.status == "completed":
            value = job.reply.value
        elif status == "completed":
            value = result.get("objective")
        elif status == "diverged":  # what sweepit.train._job returns for a diverged job
            value = -math.inf if result.get("direction") == "maximize" else math.inf
        # cfg is the job's whole composed config (hydra node included) and hydra_cfg is None, where Hydra's
        # run_job gives copies split in two: the copies cost 40 ms a job, and no sweeper reads them.
        ret = JobReturn(overrides=job.overrides, cfg=job.config, hydra_cfg=None,
                        working_dir=(job.reply.working_dir if job.reply else None) or str(Path.cwd()),
                        task_name=(job.reply.task_name if job.reply else None) or JobRuntime.instance().get("name"),
                        status=JobStatus.COMPLETED)
        ret.return_value = None if status in FAILED_STATUSES else value
        return ret
