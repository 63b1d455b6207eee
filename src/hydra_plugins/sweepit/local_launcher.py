"""sweepit's local launcher (`hydra/launcher=local`): each job in its own process forked from the driver (the
engine: `sweepit.local`), so a job costs a fork instead of a Python + torch start. Heavy modules are imported in
`launch()` only, so Hydra's plugin scan and `--help` stay fast.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from omegaconf import OmegaConf

from hydra_plugins.sweepit._launcher import SweepitLauncher, compact_errors, plain_options
from hydra_plugins.sweepit._runner import JobRunner, job_return, release_config
from sweepit.errors import ConfigError, SweepFailedError, with_causes
from sweepit.local import Job, LocalOptions, LocalSweep, Reply
from sweepit.results import Status

log = logging.getLogger(__name__)
THREADS_KEY = "trainer.threads"  # sweepit's training config: a job's own torch threads (0: the launcher's choice)


class LocalLauncher(SweepitLauncher):
    job_type = Job

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.options = LocalOptions(**plain_options(options))  # the schema's keys (LocalOptions'), Hydra-checked
        self._sweep: LocalSweep | None = None    # the run of start()/wait_any()

    def _new_sweep(self) -> LocalSweep:
        sweep_dir = self.sweep_dir()
        # Every job's own torch threads, set once for the sweep (`trainer.threads=1`), are the threads the launcher
        # plans with (its workers, OMP_NUM_THREADS, the launch line): not its own share of the cores, which each
        # job would replace.
        own = OmegaConf.select(self.config, THREADS_KEY, default=None) if self.config is not None else None
        if self.options.threads_per_job == 0 and isinstance(own, int) and not isinstance(own, bool) and own > 0:
            self.options.threads_per_job = own

        def compose(job: Job) -> None:
            t0 = time.perf_counter()
            try:
                job.config, job.job_dir = self.compose_job(job.num, job.overrides, sweep_dir)
            except Exception as e:  # Hydra's validation composed a sample of the jobs: this one fails, alone
                job.job_dir, _ = self.plan_job(job.num, job.overrides, sweep_dir, ())
                raise ConfigError(f"job {job.num}'s config does not compose: {with_causes(e)}") from e
            log.debug(f"job {job.num} config ready in {time.perf_counter() - t0:.3f} s")

        def release(job: Job) -> None:
            job.config = release_config(job.config, job.job_dir)  # read back only if a sweeper asks for it

        return LocalSweep(self.options, sweep_dir, compose=compose, body=self._body, lock=self.lock, release=release)

    def _body(self, job: Job) -> Reply:
        assert self.hydra_context is not None and self.task_function is not None
        return JobRunner(self.hydra_context, self.task_function).reply(job.config, job.job_dir)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        sweep = self._new_sweep()
        jobs = [Job(num=initial_job_idx + i, overrides=list(o)) for i, o in enumerate(job_overrides)]
        try:
            with compact_errors():
                try:
                    statuses = sweep.run(jobs)
                except SweepFailedError:
                    # Hydra skips on_multirun_end when the launcher raises: the report is written here instead.
                    from sweepit.reporting import try_build_report

                    try_build_report(sweep.sweep_dir)
                    raise
        finally:
            self.composed.clear()
        return [self._job_return(j, statuses.get(j.num)) for j in jobs]

    def _job_return(self, job: Job, status: str | None) -> JobReturn:
        reply = job.reply
        if reply is None:
            return job_return(job.overrides, job.config, job.job_dir, status)
        returned = {"returned": reply.value} if reply.status == Status.COMPLETED else {}
        return job_return(job.overrides, job.config, job.job_dir, status, returned, reply.working_dir, reply.task_name)
