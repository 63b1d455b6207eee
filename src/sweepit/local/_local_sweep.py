"""The driver side of a local sweep: workers and GPUs, the manifest, the progress line, each job's record, for a fixed
list of jobs (`run`) or for jobs that come one by one as a sweeper asks (`start`, `wait_any`, `close`)."""

from __future__ import annotations

import logging
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from sweepit._host import now_iso
from sweepit.errors import ConfigError, OutputWriteError, SweepFailedError, SweepStoppedError, is_count, require
from sweepit.local._forkserver import ForkServer
from sweepit.local._pool import Job, Pool
from sweepit.local._resources import (
    DEFAULT_PRELOAD,
    GpuPool,
    cpu_count,
    preload,
    resolve_n_workers,
    resolve_threads,
    visible_gpus,
)
from sweepit.local._worker import end_facts
from sweepit.results import (
    JobOutcome,
    JobState,
    Ledger,
    Progress,
    Recorder,
    SweepLock,
    failure_report,
    is_finished,
    start_clean,
    summarize,
)

log = logging.getLogger(__name__)
_LOOK_S = 1.0  # how often the running jobs' metrics are read for the ETA


@dataclass
class LocalOptions:
    """`hydra.launcher.*` of the local launcher; docs/configuration.md is generated from the comments on its fields."""

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
    # Modules imported in the fork server before it forks any job, so that each job starts warm (DEFAULT_PRELOAD in
    # sweepit/local/_resources.py says why these); the default list only for an app that trains with torch
    # (TORCH_APP); [] imports none.
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
        require(self.n_workers >= 0, "hydra.launcher.n_workers must be 0 (auto) or a positive count, but got "
                f"n_workers={self.n_workers}. Set for example hydra.launcher.n_workers=2.")
        require(self.threads_per_job >= 0, "hydra.launcher.threads_per_job must be 0 (auto) or a positive count, but "
                f"got threads_per_job={self.threads_per_job}. Set for example hydra.launcher.threads_per_job=1.")
        require(self.stderr_tail_lines >= 0, "hydra.launcher.stderr_tail_lines must be >= 0, but got "
                f"stderr_tail_lines={self.stderr_tail_lines}. Set for example hydra.launcher.stderr_tail_lines=20.")
        require(math.isfinite(self.term_grace_s) and self.term_grace_s >= 0, "hydra.launcher.term_grace_s must be "
                f">= 0, but got term_grace_s={self.term_grace_s}. Set for example hydra.launcher.term_grace_s=5.")


class LocalSweep:
    """One sweep directory's local run, and the pool's hooks around each of its jobs. `compose(job)` fills in the
    job's directory and what the driver plans it with (`job.config`: its gpus_key and device); `body(job)` runs in the
    forked process; `release(job)` lets go of an ended job's config. `server`: a fork server of the caller's (kept
    between runs, its body the same), else one of this run's, forked before the run holds its jobs."""

    def __init__(self, options: LocalOptions, sweep_dir: Path, compose: Callable[[Job], None],
                 body: Callable[[Job], JobOutcome], lock: SweepLock | None = None,
                 release: Callable[[Job], None] = lambda job: None, server: ForkServer | None = None) -> None:
        self.options = options
        self.sweep_dir = sweep_dir
        self.compose = compose
        self.body = body
        self.release = release
        self.own_server = server is None
        self.server = ForkServer(body, setup=lambda: preload(options.preload)) if server is None else server
        # One driver per sweep directory: a lock of the caller's (held for the whole sweep), or one per run.
        self.own_lock = lock is None
        self.lock = SweepLock(sweep_dir) if lock is None else lock
        self.pool: Pool | None = None          # set up by run() or the first start(), until the run ends
        self.skipped: set[int] = set()         # finished before (resume)
        self._started: dict[int, Job] = {}     # started by start(), not yet returned by wait_any()
        self._looked = 0.0

    # -- a fixed list of jobs ----------------------------------------------------------------------------------
    def run(self, jobs: list[Job]) -> dict[int, str]:
        """Run `jobs` to their end (or to a stop signal): each one's state. Raises SweepFailedError when jobs failed
        (and `fail_on_error`) or the sweep was stopped."""
        o = self.options
        pool = self._set_up(len(jobs))
        recorded = bool(self.manifest.jobs)
        for j in jobs:  # a resume keeps the record of finished jobs; the others are queued again
            entry = self.manifest.jobs.get(j.num)
            if not (o.resume and entry):
                self.manifest.plan(j.num, j.overrides)
            elif not JobState.is_success(entry.state):
                self.manifest.move(j.num, JobState.QUEUED, again=True, started_at=None, ended_at=None)
        self.manifest.write()
        if o.resume and not recorded and not any(is_finished(p) for p in self.sweep_dir.iterdir() if p.is_dir()):
            # (A sweep stopped before any job finished is resumed without a word: its sweep.json says so.)
            log.warning(f"hydra.launcher.resume=true, but {self.sweep_dir} holds no record of a sweep (sweep.json) "
                        "and no finished job: is hydra.sweep.dir the directory of the sweep to resume?")
        self.progress.queued = len(jobs)
        log.info(f"Launching {len(jobs)} jobs on {pool.n_workers} local worker(s), {pool.threads} torch "
                 f"thread(s) each{f', GPUs {self.gpus}' if self.gpus else ''}{', resuming' if o.resume else ''}; "
                 f"sweep dir {self.sweep_dir}")
        stopped = True
        try:
            self.progress.draw()
            pool.run(jobs)
            stopped = False
        except OutputWriteError as e:  # a full disk, a read-only folder: no point in starting more jobs
            raise OutputWriteError(e.errno, f"{e.strerror}. The sweep stopped there and its running jobs with it; "
                                   "results, metrics and checkpoints written before are intact, and `sweepit "
                                   f"resume {self.sweep_dir}` runs the unfinished jobs again.") from e
        finally:
            self._end(failing=stopped)
        if o.print_summary:
            print(summarize(self.sweep_dir), flush=True)
        report = failure_report(self.manifest, jobs, self.skipped, pool.stop_signal, o.fail_on_error)
        if report is not None:  # the launcher writes the sweep's report first (Hydra's callback will not)
            raise (SweepFailedError if pool.stop_signal is None else SweepStoppedError)(report)
        return {j.num: self.manifest.jobs[j.num].state for j in jobs}

    # -- jobs one by one, as a sweeper asks (the Optuna sweeper's AsyncLauncher protocol) ---------------------
    def start(self, job: Job) -> None:
        """Queue `job`; it starts as soon as a worker is free, while `wait_any` drives the pool."""
        pool = self.pool
        if pool is None:
            pool = self._set_up(None)
            log.info(f"Running jobs as the sweeper asks, on {pool.n_workers} local worker(s), {pool.threads} "
                     f"torch thread(s) each{f', GPUs {self.gpus}' if self.gpus else ''}; sweep dir {self.sweep_dir}")
            pool.open()
        entry = self.manifest.jobs.get(job.num)
        if entry is not None and entry.state == JobState.PAUSED:  # promoted by the halving sweeper: a new attempt
            self.manifest.move(job.num, JobState.QUEUED, again=True, pid=None, started_at=None, ended_at=None)
        else:
            self.manifest.plan(job.num, job.overrides)
        self.manifest.write([job.num])
        self.progress.queued += 1
        self._started[job.num] = job
        pool.submit(job)

    def wait_any(self) -> list[tuple[Job, str | None]]:
        """Run the pool until a started job ends. After a stop signal the running jobs are stopped and returned,
        and the next call raises KeyboardInterrupt."""
        pool = self.pool
        assert pool is not None, "start() a job before wait_any()"
        while True:
            ended = [n for n in self._started if JobState.is_ended(self.manifest.jobs[n].state)]
            if ended:
                break
            if pool.stop_signal is not None and not pool.running:
                raise KeyboardInterrupt(f"sweep stopped by {signal.Signals(pool.stop_signal).name}")
            if not pool.busy():
                break
            pool.step()
        return [(self._started.pop(n), self.manifest.jobs[n].state) for n in ended]

    def close(self) -> None:
        """End the run of start()/wait_any(): jobs still running are killed, the manifest is written."""
        if self.pool is not None:
            try:
                self.pool.close()
            finally:
                self._end()

    # -- shared -------------------------------------------------------------------------------------------------
    def _set_up(self, n_jobs: int | None) -> Pool:
        """Preloads, GPUs, workers and threads (`n_jobs`: None when jobs come one by one), the manifest, the pool."""
        o = self.options
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        self.lock.acquire()  # one driver per sweep directory; released by _end()
        if not self.server.alive:
            self.server.start()  # before the manifest and the jobs: a job's fork copies none of them
        self.gpus = visible_gpus()
        n_workers = resolve_n_workers(o.n_workers, o.threads_per_job, len(self.gpus), cpu_count(), n_jobs)
        threads = resolve_threads(o.threads_per_job, n_workers, cpu_count())
        self.manifest = Ledger.open(self.sweep_dir, "local", self.lock)
        self.progress = Progress(0)
        self.pool = Pool(n_workers, GpuPool(self.gpus), threads=threads, echo=n_workers == 1,
                         term_grace_s=o.term_grace_s, server=self.server, hooks=self, clock_ticks=self.progress.live)
        return self.pool

    def _end(self, failing: bool = False) -> None:
        """Record the sweep's end; `failing`: an error is on its way, which a failed write here must not hide."""
        self.pool = None
        self._started.clear()
        if self.own_server:
            self.server.close()
        self.progress.close()
        self.manifest.stop_queued()  # the sweep was stopped first
        try:
            self.manifest.write()
        except OutputWriteError:
            if not failing:
                raise
        finally:
            if self.own_lock:
                self.lock.release()

    # -- the pool's hooks ---------------------------------------------------------------------------------------
    def prepare(self, job: Job) -> bool:
        """Plan the job and size it: its GPUs (one per rank), or on CPU its worker slots (its ranks are processes).
        False when it is not to run: finished before (resume), or refused (recorded as failed)."""
        o = self.options
        assert self.pool is not None
        entry = self.manifest.jobs[job.num]
        try:
            self.compose(job)
        except ConfigError as e:  # its config does not compose (a sweeper validates a sample of the jobs)
            entry.job_dir = str(job.job_dir)
            return self._refuse(job, e)
        entry.job_dir = str(job.job_dir)
        if o.resume and self.manifest.skip_finished(job.num, job.overrides, job.job_dir):
            self.manifest.write([job.num])
            self.skipped.add(job.num)
            self.progress.skip()
            return False
        need = OmegaConf.select(job.config, o.gpus_key, default=1)
        try:
            require(is_count(need, 0), f"{o.gpus_key} must be an integer >= 0, but got {o.gpus_key}={need!r} in job "
                    f"{job.num}. Set for example {o.gpus_key}=1.")
            if self.gpus and str(OmegaConf.select(job.config, "device", default="auto")) != "cpu":
                job.n_gpus = int(need)
                self.pool.gpu_pool.check(job.num, job.n_gpus, o.gpus_key)
            else:
                job.n_slots = min(max(int(need), 1), self.pool.n_workers)
        except ConfigError as e:
            return self._refuse(job, e)
        return True

    def _refuse(self, job: Job, error: ConfigError) -> bool:
        """A job that is not to run: recorded as failed, with the error."""
        self.manifest.fail(job.num, str(error), Recorder.LOCAL)
        self.manifest.write([job.num])
        self.progress.start()
        self.progress.finish(job.num, JobState.FAILED, None)
        return False

    def before_fork(self, job: Job) -> None:
        # A rerun (resume) starts clean: a stale failed result must not stand for this attempt.
        start_clean(job.job_dir)

    def started(self, job: Job) -> None:
        self.manifest.move(job.num, JobState.RUNNING, again=True, pid=job.pid, started_at=now_iso(), ended_at=None,
                           extra={"gpus": job.gpus} if job.gpus else {})
        self.manifest.write([job.num])
        self.progress.start()

    def retried(self, job: Job) -> None:
        self.manifest.move(job.num, JobState.QUEUED, pid=None)
        self.manifest.write([job.num])
        self.progress.running -= 1
        self.progress.queued += 1

    def ended(self, job: Job) -> None:
        entry = self.manifest.jobs[job.num]
        # The job's own result.json is kept; one is written for a job that left none.
        seen, stderr_tail, facts = end_facts(job, entry.started_at, self.options.stderr_tail_lines)
        status = self.manifest.end(job.num, seen, Recorder.LOCAL, stderr_tail=stderr_tail, **facts)
        self.release(job)
        entry.extra["exit_code"] = job.exit_code
        self.manifest.write([job.num])
        self.progress.finish(job.num, status, job.wall_time_s)

    def tick(self) -> None:
        if self.progress.done == 0 and time.monotonic() - self._looked >= _LOOK_S:
            self._looked = time.monotonic()
            self.progress.early_eta(e.job_dir for e in self.manifest.jobs.values() if e.state == JobState.RUNNING)
        self.progress.draw()
        self.lock.touch()  # keeps the sweep lock fresh

    def before_echo(self) -> None:
        self.progress.clear()
