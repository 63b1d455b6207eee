"""sweepit's Slurm launcher (`hydra/launcher=slurm` or a cluster profile): every job of the sweep as its own Slurm
job, submitted and followed by the engine, `sweepit.slurm.SlurmSweep`; this class holds only what needs Hydra.
submitit and torch are imported when jobs are submitted, so Hydra's plugin scan stays fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from hydra_plugins.sweepit._launcher import LaunchError, SweepitLauncher, compact_errors, plain_options
from hydra_plugins.sweepit._plan_job import selected
from hydra_plugins.sweepit._runner import (
    SAVED_KEYS,
    SavedConfig,
    SlurmTask,
    job_return,
    promised_config,
    release_config,
)
from hydra_plugins.sweepit._worker_tasks import WorkerTask, for_workers
from hydra_plugins.sweepit.callbacks import preload_report
from sweepit.errors import ConfigError, SweepitError
from sweepit.results import JobOutcome
from sweepit.slurm import (
    ClusterFacts,
    PackSpec,
    PlannedJob,
    SlurmOptions,
    SlurmSweep,
    WorkerSweep,
)


class SlurmLauncher(SweepitLauncher):
    job_type = PlannedJob

    def __init__(self, **params: Any) -> None:
        super().__init__()
        # A bad value is raised at setup(), not here: Hydra wraps whatever a plugin's constructor raises in
        # "Error in call to target ... full_key: hydra.launcher", and the user is to see sweepit's message alone.
        self._bad_options: str | None = None
        try:
            self.options = SlurmOptions.from_params(plain_options(params))
        except ConfigError as e:
            self._bad_options = str(e)
            self.options = SlurmOptions(dry_run=True)  # never used: setup() raises first
        self._sweep: SlurmSweep | None = None    # the run of start()/wait_any()
        self.facts = ClusterFacts()              # Slurm's partition and limits, asked once for the whole sweep

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        if self._bad_options is not None:
            with compact_errors():
                raise LaunchError(self._bad_options)
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def _new_sweep(self) -> SlurmSweep:
        sweep_dir = self.sweep_dir()
        self._hydra = None
        self.options.app_dir = os.path.abspath(sys.path[0]) if sys.path and sys.path[0] != "" else os.getcwd()

        def plan(job: PlannedJob, keys: tuple[str, ...]) -> dict[str, Any]:
            if not self.options.workers:  # the job's task carries its config: composed here, once, before any submit
                job.config, job.job_dir = self.compose_job(job.num, job.overrides, sweep_dir)
                return {key: selected(job.config, key) for key in keys}
            # A packed job is composed by the worker that runs it, and read back from its files when asked for.
            job.job_dir, values = self.plan_job(job.num, job.overrides, sweep_dir, (*keys, *SAVED_KEYS))
            job.config = promised_config(job.job_dir, *(values[key] for key in SAVED_KEYS))
            return values

        sweep = SlurmSweep(self.options, sweep_dir, plan_job=plan, make_task=self._task, lock=self.lock,
                           facts=self.facts, make_worker=self._packed_task)
        config = self.config
        if config is not None:
            sweep.while_jobs_run = lambda: preload_report(config)
        return sweep

    def _task(self, job: PlannedJob) -> SlurmTask:
        """What each Slurm task of the job runs: the job's runner, in the job's directory. The driver's Hydra is the
        same for every task of the sweep: copied (`Singleton.get_state`, as much as a compose) and pickled once."""
        return SlurmTask(self.pickled_hydra(), job.config, str(job.job_dir), job.gate)

    def _packed_task(self, spec: PackSpec) -> WorkerTask:
        """What each worker of a packed sweep runs: jobs composed in the worker, each forked from it."""
        assert self.config is not None
        return WorkerTask(*self._context(), self.config, spec=spec)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        sweep = self._new_sweep()
        jobs = [PlannedJob(num=initial_job_idx + i, overrides=list(o)) for i, o in enumerate(job_overrides)]
        try:
            with compact_errors():
                try:
                    self.check_values(job_overrides, initial_job_idx)
                    if self.options.dry_run:
                        text, refused = sweep.dry_run(jobs)
                        print(text, flush=True)
                        if refused is not None:  # as `sbatch --test-only` fails for a job sbatch would refuse
                            raise LaunchError(refused)
                        self.end_dry_run()
                        return []
                    outcomes = sweep.run(jobs)
                except SweepitError:
                    self.end_dry_run()  # refused before any job: no folder of 0 jobs is left (a failed sweep's stays)
                    raise
        finally:
            self.composed.clear()
        return [self._job_return(j, outcomes[j.num]) for j in jobs]

    def start(self, overrides: Sequence[str], job_num: int) -> None:
        try:
            super().start(overrides, job_num)
        finally:
            self.composed.clear()  # submitted: its config is composed, and none kept is wanted any more

    # -- Optuna worker mode: long-lived workers that run the study themselves --------------------------------------
    def worker_sweep(self, first: Sequence[str]) -> WorkerSweep:
        """The workers' array, planned from the config of the search's first point (its request, checked; the
        sweeper maps the errors)."""
        sweep = WorkerSweep(self._new_sweep())
        try:
            sweep.plan(PlannedJob(num=0, overrides=list(first)))
        finally:
            self.composed.clear()
        return sweep

    def worker_task(self, search: Any, index: int, job_base: int) -> WorkerTask:
        """What worker `index` runs: the search's loop, each trial's job composed and run in the worker."""
        assert self.config is not None
        return WorkerTask(*self._context(), self.config, search=for_workers(search), index=index, job_base=job_base)

    def _job_return(self, job: PlannedJob, outcome: JobOutcome) -> JobReturn:
        if job.config is None or (isinstance(job.config, SavedConfig) and not job.config.saved()):  # never ran
            job.config, _ = self.compose_job(job.num, job.overrides, job.job_dir.parent)  # (its directory is known)
        # A job that ran saved its config: read back only if a sweeper asks for it, rather than taken apart here (a
        # copy of its hydra node each, at the end of the sweep).
        job.config = release_config(job.config, job.job_dir)
        returned = {"returned": outcome.returned} if outcome.has_returned else {}
        return job_return(job.overrides, job.config, job.job_dir, outcome.status, returned)
