"""sweepit's local launcher (`hydra/launcher=local`): each job in its own forked process, a few at a time.

The driver imports Hydra, the app and the `preload` modules once, then forks one process per job, so a
job costs a fork instead of a Python + torch start (the engine: `sweepit.local`). Heavy modules are imported
in `launch()` only, so Hydra's plugin scan and `--help` stay fast.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, configure_log, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from hydra_plugins.sweepit._hydra import SweepFailed, job_dir, job_return, run_hydra_job, setup_driver
from hydra_plugins.sweepit.config import DEFAULT_PRELOAD
from sweepit.errors import SweepFailedError
from sweepit.local import Job, LocalOptions, LocalSweep, Reply

log = logging.getLogger(__name__)


class LocalLauncher(Launcher):
    def __init__(self, n_workers: int = 0, threads_per_job: int = 0, fail_on_error: bool = True,
                 resume: bool = False, preload: Sequence[str] | None = None, stderr_tail_lines: int = 50,
                 term_grace_s: float = 5.0, gpus_key: str = "trainer.gpus", print_summary: bool = True) -> None:
        self.options = LocalOptions(
            n_workers=n_workers, threads_per_job=threads_per_job, fail_on_error=fail_on_error, resume=resume,
            preload=list(DEFAULT_PRELOAD if preload is None else preload), stderr_tail_lines=stderr_tail_lines,
            term_grace_s=term_grace_s, gpus_key=gpus_key, print_summary=print_summary)
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None
        self._sweep: LocalSweep | None = None    # the run of start()/wait_any()
        self._current: LocalSweep | None = None  # the sweep whose jobs are being composed

    # Knobs a sweeper may switch off (sweepit's Optuna sweeper does: failed trials are its business).
    @property
    def fail_on_error(self) -> bool:
        return self.options.fail_on_error

    @fail_on_error.setter
    def fail_on_error(self, value: bool) -> None:
        self.options.fail_on_error = value

    @property
    def print_summary(self) -> bool:
        return self.options.print_summary

    @print_summary.setter
    def print_summary(self, value: bool) -> None:
        self.options.print_summary = value

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function
        # The sweeper shares this context: the configs it composes to validate a batch are kept for launch().
        self.composed = setup_driver(hydra_context)

    def _new_sweep(self) -> LocalSweep:
        """Hydra's logging in the driver, and the engine for this sweep directory."""
        assert self.config is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        return LocalSweep(self.options, sweep_dir, compose=self._compose, body=self._body)

    def _compose(self, job: Job) -> None:
        """The job's full config, as Hydra's own launchers compose it, and the directory it will run in."""
        assert self.config is not None and self._current is not None
        t0 = time.perf_counter()
        config = self.composed.take(self.config, job.overrides)
        with open_dict(config):
            config.hydra.job.id = job.num
            config.hydra.job.num = job.num
        job.config, job.job_dir = config, job_dir(config, self._current.sweep_dir)
        log.debug(f"job {job.num} config ready in {time.perf_counter() - t0:.3f} s")

    def _body(self, job: Job) -> Reply:
        assert self.hydra_context is not None and self.task_function is not None
        return run_hydra_job(self.hydra_context, self.task_function, job.config, job.job_dir)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        self._current = self._new_sweep()
        jobs = [Job(num=initial_job_idx + i, overrides=list(o)) for i, o in enumerate(job_overrides)]
        try:
            statuses = self._current.run(jobs)
        except SweepFailedError as e:
            raise SweepFailed(str(e)) from None
        finally:
            self.composed.clear()
        return [self._job_return(j, statuses.get(j.num)) for j in jobs]

    # -- one job at a time, as a sweeper asks: the Optuna sweeper's AsyncLauncher protocol ---------------------
    def start(self, overrides: Sequence[str], job_num: int) -> None:
        """Queue the job `job_num`; it starts as soon as a worker is free, while `wait_any` drives the pool."""
        if self._sweep is None:
            self._sweep = self._current = self._new_sweep()
        self._sweep.start(Job(num=job_num, overrides=list(overrides)))

    def wait_any(self, timeout_s: float | None = None) -> list[tuple[int, JobReturn]]:
        """Run the pool until a started job ends (see LocalSweep.wait_any); `(job_num, JobReturn)` of each."""
        assert self._sweep is not None, "start() a job before wait_any()"
        return [(job.num, self._job_return(job, status)) for job, status in self._sweep.wait_any(timeout_s)]

    def close(self) -> None:
        """End the run of start()/wait_any(): jobs still running are killed, the manifest is written."""
        if self._sweep is None:
            return
        try:
            self._sweep.close()
        finally:
            self._sweep = None
            self.composed.clear()

    def _job_return(self, job: Job, status: str | None) -> JobReturn:
        reply = job.reply
        returned: dict[str, Any] = {}
        if reply is not None and reply.status == "completed":
            returned = {"returned": reply.value, "has_returned": True}
        return job_return(job.overrides, job.config, job.job_dir, status,
                          working_dir=reply.working_dir if reply else None,
                          task_name=reply.task_name if reply else None, **returned)
