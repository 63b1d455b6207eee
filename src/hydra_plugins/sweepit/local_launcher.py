"""sweepit's local launcher (`hydra/launcher=local`): each job in its own process, forked by a fork server that the
launcher forks from the driver at its setup, before any job is composed (the engine: `sweepit.local`), so a job costs
a fork of a small warm process instead of a Python + torch start. The driver plans each job (its directory and
devices) without keeping its config; the server composes it for the job's process. Heavy modules are imported in
`launch()` only, so Hydra's plugin scan and `--help` stay fast.
"""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.sweepit._job_steps import warm_up
from hydra_plugins.sweepit._launcher import SweepitLauncher, compact_errors, number, plain_options
from hydra_plugins.sweepit._runner import SAVED_KEYS, JobRunner, SavedConfig, SlurmTask, job_return, release_config
from hydra_plugins.sweepit.callbacks import ends_with_report
from sweepit.errors import ConfigError, SweepFailedError, SweepitError, with_causes
from sweepit.local import ForkServer, Job, LocalOptions, LocalSweep, preload
from sweepit.results import JobOutcome

log = logging.getLogger(__name__)
THREADS_KEY = "trainer.threads"  # sweepit's training config: a job's own torch threads (0: the launcher's choice)


class LocalLauncher(SweepitLauncher):
    job_type = Job

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.options = LocalOptions(**plain_options(options))  # the schema's keys (LocalOptions'), Hydra-checked
        self._sweep: LocalSweep | None = None    # the run of start()/wait_any()
        self._server: ForkServer | None = None   # forked at setup, kept between launches

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        if self._server is not None:
            self._server.close()
        self._server = ForkServer(self._body, compose=self._compose, setup=self._warm_up, fresh=self._fresh)
        self._server.start()
        atexit.register(self._server.close)  # reaped, not left to init: its CPU time counts in the driver's

    def _warm_up(self) -> None:
        """In the fork server, once, before its first fork: the preloads and what each job's Hydra steps would do
        again."""
        preload(self.options.preload)
        warm_up(self.config)

    def _new_sweep(self) -> LocalSweep:
        sweep_dir = self.sweep_dir()
        # Every job's own torch threads, set once for the sweep (`trainer.threads=1`), are the threads the launcher
        # plans with (its workers, OMP_NUM_THREADS, the launch line): not its own share of the cores, which each
        # job would replace.
        own = OmegaConf.select(self.config, THREADS_KEY, default=None) if self.config is not None else None
        if self.options.threads_per_job == 0 and isinstance(own, int) and not isinstance(own, bool) and own > 0:
            self.options.threads_per_job = own

        keys = (self.options.gpus_key, "device", *SAVED_KEYS)

        def plan(job: Job) -> None:
            t0 = time.perf_counter()
            try:
                job.job_dir, values = self.plan_job(job.num, job.overrides, sweep_dir, keys)
            except Exception as e:  # Hydra's validation composed a sample of the jobs: this one fails, alone
                job.job_dir, _ = self.plan_job(job.num, job.overrides, sweep_dir, ())
                raise ConfigError(f"job {job.num}'s config does not compose: {with_causes(e)}") from e
            job.job_env = self.job_env.pop(job.num, {})
            job.config = OmegaConf.create()
            for key, value in values.items():
                if value is not None or key in SAVED_KEYS:  # None: absent, and the sweep's default applies
                    OmegaConf.update(job.config, key, value, force_add=True)
            log.debug(f"job {job.num} planned in {time.perf_counter() - t0:.3f} s")

        def release(job: Job) -> None:
            job.config = release_config(job.config, job.job_dir)  # read back only if a sweeper asks for it

        assert self._server is not None, "setup() forks the fork server"
        return LocalSweep(self.options, sweep_dir, compose=plan, body=self._body, lock=self.lock, release=release,
                          server=self._server)

    def _compose(self, job: Job) -> None:
        """In the fork server, just before it forks the job: the job's config, as Hydra's own launchers compose it."""
        assert self.config is not None
        job.config = number(self.composed.compose(self.config, job.overrides), job.num, job.job_env)

    def _fresh(self, job: Job) -> bytes:
        """In the driver: the job composed and pickled for a fresh interpreter, as a Slurm job's task is (its fork
        server cannot use CUDA: `ForkServer.spawn`)."""
        import pickle

        self._compose(job)
        return pickle.dumps(SlurmTask(self.pickled_hydra(), job.config, str(job.job_dir)).reply)

    def _body(self, job: Job) -> JobOutcome:
        assert self.hydra_context is not None and self.task_function is not None
        return JobRunner(self.hydra_context, self.task_function).reply(job.config, job.job_dir)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        sweep = self._new_sweep()
        jobs = [Job(num=initial_job_idx + i, overrides=list(o)) for i, o in enumerate(job_overrides)]
        try:
            with compact_errors():
                try:
                    self.check_values(job_overrides, initial_job_idx)
                    statuses = sweep.run(jobs)
                except SweepFailedError:
                    # Hydra skips on_multirun_end when the launcher raises: the report the sweep would end with is
                    # written here instead.
                    if self.config is not None and ends_with_report(self.config):
                        from sweepit.reporting import try_build_report

                        try_build_report(sweep.sweep_dir)
                    raise
                except SweepitError:
                    self.end_dry_run()  # refused before any job: no folder of 0 jobs is left
                    raise
        finally:
            self.composed.clear()
        return [self._job_return(j, statuses.get(j.num)) for j in jobs]

    def _job_return(self, job: Job, status: str | None) -> JobReturn:
        if not isinstance(job.config, SavedConfig):  # its config was not saved (it did not get that far): composed
            self._compose(job)
        reply = job.reply
        if reply is None:
            return job_return(job.overrides, job.config, job.job_dir, status)
        returned = {"returned": reply.returned} if reply.has_returned else {}
        return job_return(job.overrides, job.config, job.job_dir, status, returned, reply.working_dir, reply.task_name)
