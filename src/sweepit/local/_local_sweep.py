"""The driver side of a local sweep: workers and GPUs, the manifest, the progress line, the results.

The launcher says how to prepare a job (compose its config, name its directory) and what a forked job
runs; this module does the rest, for a fixed list of jobs (`run`) or for jobs that come one by one as a
sweeper asks (`start`, `wait_any`, `close`).
"""

from __future__ import annotations

import gc
import importlib
import logging
import math
import pkgutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from omegaconf import OmegaConf

from sweepit.errors import ConfigError, OutputWriteError, SweepFailedError, SweepStoppedError
from sweepit.local._pool import Job, Pool
from sweepit.local._resources import GpuPool, cpu_count, resolve_n_workers, resolve_threads, visible_gpus
from sweepit.local._run import SweepRun
from sweepit.local._worker import ChildSpec, Reply, child_main
from sweepit.results import (
    JobEntry,
    Manifest,
    Progress,
    State,
    SweepLock,
    is_finished,
    open_manifest,
    summarize,
    write_manifest,
)

log = logging.getLogger(__name__)
_preloaded: set[str] = set()


def _require(ok: bool, rule: str, value: str, fix: str) -> None:
    if not ok:
        raise ConfigError(f"{rule}, but got {value}. {fix}")


# Imported once in the driver before any job is forked, so each job starts warm. `module:function` also
# calls a function with no arguments; `package.*` imports the package's modules too. Nothing here may run
# torch compute: OpenMP thread pools do not survive fork. torch._dynamo is what torch's optimizers import
# on first use (a slow import); the private torch modules and sweepit's data modules are imported lazily
# by a first training step, which each job would otherwise pay for (and compile, where Python writes no
# bytecode cache). An entry missing from this environment is skipped. The list warms torch training, so it is
# imported only where the app has imported torch, or sweepit's own job (`sweepit.train.run_job`, which imports torch
# as it runs), by the time it launches (TORCH_APP): an app without torch starts none (torch's import costs each
# driver or packed worker CPU time and memory); a list set in hydra.launcher.preload is imported as given.
DEFAULT_PRELOAD = [
    "torch", "torch.optim", "torch._dynamo", "torch.profiler._cupti_monitor", "torch.utils.serialization.config",
    "sweepit.train._loop", "sweepit.train.data.*", "sweepit.train._job:code_version",
]
# What every job's session imports when the job ends (its trackers, sweepit.train._session): light, and imported
# before any fork whatever the list above, so that no job of any app pays it again.
JOB_MODULES = ("sweepit.trackers",)
TORCH_APP = ("torch", "sweepit.train._entry")  # an app that has imported one of these trains with torch


@dataclass
class LocalOptions:
    """The local launcher's options, `hydra.launcher.*`: the plugin's Hydra schema is this class with a
    `_target_` (hydra_plugins/sweepit/config.py); the configuration reference (docs/configuration.md) is generated
    from the comments on its fields."""

    # Worker processes at once. 0 = auto: one per GPU when there are GPUs, else CPU cores // threads_per_job
    # (every core with auto threads), and on CPU at most the launch's job count. A job with gpus_key=N takes
    # N GPUs (through CUDA_VISIBLE_DEVICES), or on CPU N workers (its N ranks).
    n_workers: int = 0
    # torch CPU threads per job (torch.set_num_threads). 0 = auto: CPU cores // workers, so that 32 jobs on
    # 16 cores get 1 thread each and 2 jobs get 8; or trainer.threads when the sweep sets it (> 0) for every job.
    # A job's own trainer.threads > 0 wins.
    threads_per_job: int = 0
    # true: the sweep exits with status 1 when any job failed or was interrupted. false: exit 0; such
    # jobs reach the sweeper as COMPLETED with return value None (result.json keeps the real status).
    fail_on_error: bool = True
    # Skip jobs whose result.json in hydra.sweep.dir says completed (or diverged); rerun the others.
    # Set hydra.sweep.dir to the sweep to resume; job numbers and directories stay the same.
    resume: bool = False
    # Modules imported in the driver before forking, so that each job starts warm (DEFAULT_PRELOAD above says
    # why these); the default list only for an app that trains with torch (TORCH_APP); [] imports none.
    preload: list[str] = field(default_factory=lambda: list(DEFAULT_PRELOAD))
    # Last lines of a failed job's stderr.log copied into its result.json (a segfault's Python stack
    # from faulthandler takes about 30).
    stderr_tail_lines: int = 50
    # Seconds between the stop signal and SIGKILL when running jobs are stopped (Ctrl-C, SIGTERM to the driver).
    term_grace_s: float = 5.0
    # Config key holding the devices (ranks) of one job: GPUs to give it, or workers it occupies on CPU.
    gpus_key: str = "trainer.gpus"
    # Print the results table after the jobs of each launch; sweepers launching many small batches may
    # turn it off.
    print_summary: bool = True

    def __post_init__(self) -> None:
        _require(self.n_workers >= 0, "hydra.launcher.n_workers must be 0 (auto) or a positive count",
                 f"n_workers={self.n_workers}", "Set for example hydra.launcher.n_workers=2.")
        _require(self.threads_per_job >= 0, "hydra.launcher.threads_per_job must be 0 (auto) or a positive count",
                 f"threads_per_job={self.threads_per_job}", "Set for example hydra.launcher.threads_per_job=1.")
        _require(self.stderr_tail_lines >= 0, "hydra.launcher.stderr_tail_lines must be >= 0",
                 f"stderr_tail_lines={self.stderr_tail_lines}", "Set for example hydra.launcher.stderr_tail_lines=20.")
        _require(math.isfinite(self.term_grace_s) and self.term_grace_s >= 0,
                 "hydra.launcher.term_grace_s must be >= 0", f"term_grace_s={self.term_grace_s}",
                 "Set for example hydra.launcher.term_grace_s=5.")


def preload(names: Sequence[str]) -> None:
    """Import each module once in the driver, before any fork: `module`, `module:function` (then called),
    `package.*` (the package and its modules). A module absent here is skipped; other failures are warned. The
    default list is skipped whole for an app that does not train with torch (see DEFAULT_PRELOAD); JOB_MODULES are
    imported always."""
    for name in JOB_MODULES:
        importlib.import_module(name)
    if list(names) == DEFAULT_PRELOAD and not any(name in sys.modules for name in TORCH_APP):
        log.debug("hydra.launcher.preload: the app has not imported torch nor sweepit.train.run_job, so the default "
                  "list is not imported")
        return
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


class LocalSweep:
    """One sweep directory's local run. `compose(job)` fills in the job's config and directory; `body(job)`
    runs in the forked process and returns its Reply."""

    def __init__(self, options: LocalOptions, sweep_dir: Path, compose: Callable[[Job], None],
                 body: Callable[[Job], Reply], lock: SweepLock | None = None,
                 release: Callable[[Job], None] = lambda job: None) -> None:
        self.options = options
        self.sweep_dir = sweep_dir
        self.compose = compose
        self.body = body
        self.release = release  # lets go of what the driver no longer needs of an ended job (its config)
        self._open: tuple[Pool, SweepRun, Manifest, Progress] | None = None  # the run of start()/wait_any()
        # One driver per sweep directory: a lock of the caller's (held for the whole sweep), or one per run.
        self.own_lock = lock is None
        self.lock = SweepLock(sweep_dir) if lock is None else lock
        self._started: dict[int, Job] = {}

    # -- a fixed list of jobs ----------------------------------------------------------------------------------
    def run(self, jobs: list[Job]) -> dict[int, str]:
        """Run `jobs` to their end (or to a stop signal) and return each one's status. Raises SweepFailedError,
        after writing the report, when jobs failed (and `fail_on_error`) or the sweep was stopped."""
        o = self.options
        gpus, pool, run, manifest, progress = self._set_up(len(jobs))
        recorded = bool(manifest.jobs)
        for j in jobs:
            if not (o.resume and j.num in manifest.jobs):  # a resume keeps the record of finished jobs
                manifest.jobs[j.num] = JobEntry(num=j.num, overrides=j.overrides, job_dir="")
        write_manifest(manifest)
        if o.resume and not recorded and not any(is_finished(p) for p in self.sweep_dir.iterdir() if p.is_dir()):
            # (A sweep stopped before any job finished is resumed without a word: its sweep.json says so.)
            log.warning(f"hydra.launcher.resume=true, but {self.sweep_dir} holds no record of a sweep (sweep.json) "
                        "and no finished job: is hydra.sweep.dir the directory of the sweep to resume?")
        progress.queued = len(jobs)
        log.info(f"Launching {len(jobs)} jobs on {pool.n_workers} local worker(s), {pool.threads} torch "
                 f"thread(s) each{f', GPUs {gpus}' if gpus else ''}{', resuming' if o.resume else ''}; "
                 f"sweep dir {self.sweep_dir}")
        stopped = True
        try:
            progress.draw()
            pool.run(jobs)
            stopped = False
        except OutputWriteError as e:  # a full disk, a read-only folder: no point in starting more jobs
            raise OutputWriteError(e.errno, f"{e.strerror}. The sweep stopped there and its running jobs with it; "
                                   "results, metrics and checkpoints written before are intact, and `sweepit "
                                   f"resume {self.sweep_dir}` runs the unfinished jobs again.") from e
        finally:
            self._end(manifest, progress, failing=stopped)
        if o.print_summary:
            print(summarize(self.sweep_dir), flush=True)
        report = run.failure_report(jobs, pool.stop_signal, o.fail_on_error)
        if report is not None:  # the launcher writes the sweep's report first (Hydra's callback will not)
            raise (SweepFailedError if pool.stop_signal is None else SweepStoppedError)(report)
        return dict(run.statuses)

    # -- jobs one by one, as a sweeper asks (the Optuna sweeper's AsyncLauncher protocol) ---------------------
    def start(self, job: Job) -> None:
        """Queue `job`; it starts as soon as a worker is free, while `wait_any` drives the pool."""
        if self._open is None:
            gpus, pool, run, manifest, progress = self._set_up(None)
            log.info(f"Running jobs as the sweeper asks, on {pool.n_workers} local worker(s), {pool.threads} "
                     f"torch thread(s) each{f', GPUs {gpus}' if gpus else ''}; sweep dir {self.sweep_dir}")
            pool.open()
            self._open = pool, run, manifest, progress
        pool, _, manifest, progress = self._open
        manifest.jobs[job.num] = JobEntry(num=job.num, overrides=job.overrides, job_dir="")
        write_manifest(manifest, [job.num])
        progress.queued += 1
        self._started[job.num] = job
        pool.submit(job)

    def wait_any(self, timeout_s: float | None = None) -> list[tuple[Job, str | None]]:
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
        return [(self._started.pop(n), run.statuses.get(n)) for n in ended]

    def close(self) -> None:
        """End the run of start()/wait_any(): jobs still running are killed, the manifest is written."""
        if self._open is None:
            return
        pool, _, manifest, progress = self._open
        self._open = None
        try:
            pool.close()
        finally:
            self._end(manifest, progress)
            self._started.clear()

    # -- shared -------------------------------------------------------------------------------------------------
    def _set_up(self, n_jobs: int | None) -> tuple[list[str], Pool, SweepRun, Manifest, Progress]:
        """Preloads, GPUs, workers and threads (`n_jobs`: the launch's job count, None when jobs come one by
        one), the manifest, the progress line, and the pool with its hooks."""
        o = self.options
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        self.lock.acquire()  # one driver per sweep directory; released by _end()
        t0 = time.perf_counter()
        preload(o.preload)
        log.debug(f"preloaded {o.preload} in {time.perf_counter() - t0:.2f} s")
        gpus = visible_gpus()
        gpu_pool = GpuPool(gpus)
        n_workers = resolve_n_workers(o.n_workers, o.threads_per_job, len(gpus), cpu_count(), n_jobs)
        threads = resolve_threads(o.threads_per_job, n_workers, cpu_count())

        def check(job: Job) -> None:
            """Each job its GPUs (one per rank), or on CPU its worker slots (its ranks are processes)."""
            need = OmegaConf.select(job.config, o.gpus_key, default=1)
            _require(isinstance(need, int) and not isinstance(need, bool) and need >= 0,
                     f"{o.gpus_key} must be an integer >= 0", f"{o.gpus_key}={need!r} in job {job.num}",
                     f"Set for example {o.gpus_key}=1.")
            if gpus and str(OmegaConf.select(job.config, "device", default="auto")) != "cpu":
                job.n_gpus = int(need)
                gpu_pool.check(job.num, job.n_gpus, o.gpus_key)
            else:
                job.n_slots = min(max(int(need), 1), n_workers)

        def child(job: Job, spec: ChildSpec, conn: Connection) -> None:
            child_main(spec, conn, lambda: self.body(job))

        manifest = open_manifest(self.sweep_dir, launcher="local")
        progress = Progress(0)
        run = SweepRun(manifest, progress, compose=self.compose, release=self.release, resume=o.resume, check=check,
                       stderr_tail_lines=o.stderr_tail_lines, heartbeat=self.lock.touch)
        pool = Pool(n_workers, gpu_pool, use_gpus=bool(gpus), threads=threads, echo=n_workers == 1,
                    term_grace_s=o.term_grace_s, child=child, hooks=run, clock_ticks=progress.live)
        # Objects the driver made so far move out of the collector's reach, so that no job's garbage
        # collection writes to (and so copies) the memory pages it shares with the driver. Only the young
        # generations are collected first: a full collection over torch's many objects is slow.
        gc.collect(1)
        gc.freeze()
        return gpus, pool, run, manifest, progress

    def _end(self, manifest: Manifest, progress: Progress, failing: bool = False) -> None:
        """Record the sweep's end; `failing`: an error is on its way, which a failed write here must not hide."""
        gc.unfreeze()
        progress.close()
        for entry in manifest.jobs.values():
            if entry.state == State.QUEUED:
                entry.state = State.NOT_STARTED  # the sweep was stopped first
        try:
            write_manifest(manifest)
        except OutputWriteError:
            if not failing:
                raise
        finally:
            if self.own_lock:
                self.lock.release()
