"""What long-lived workers run on Slurm: each Optuna worker (`hydra.sweeper.workers=N`, `WorkerTask`) runs
`sweepit.search.Worker`'s loop, with a trial's job composed and run as Hydra would run it inside the worker's own
process; each worker of a packed grid (`hydra.launcher.workers=N`, `PackedTask`) runs `sweepit.slurm`'s
`run_worker`, each job composed in the worker and run in a process forked from it, as the local launcher runs jobs.

A trial's config is composed from the sweep's config and the trial's overrides as the driver composes it in
per-trial mode, in a job directory numbered as there (`<num>_<overrides>`, `.hydra/`, result.json, metrics.jsonl),
so that the results table, `sweepit status` and `sweepit report` read worker trials unchanged.

Requeue (time limit, preemption): submitit calls `checkpoint()` on USR2 and raises SystemExit in the running trial;
the worker tells that trial `interrupted` (its parameters enqueued), and the requeued worker asks on.
"""

from __future__ import annotations

import copy
import logging
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from hydra_plugins.sweepit._compose import ComposedConfigs
from hydra_plugins.sweepit._hydra import job_dir, record, record_task, run_hydra_job
from sweepit._signals import interrupt_on_sigterm
from sweepit.local import Job, Reply
from sweepit.results import Status
from sweepit.results._job_files import start_clean
from sweepit.search import Search
from sweepit.search._search import no_env
from sweepit.search._workers import Worker
from sweepit.slurm._pack_worker import PackedWorker, PackSpec, PlannedEntry
from sweepit.slurm._workers import worker_id, write_trial_record
from sweepit.train import _session


def for_workers(search: Search) -> Search:
    """A copy of the driver's search to pickle into the workers: without its study (each worker opens the storage
    itself) and its driver-side hooks."""
    out = copy.copy(search)
    out.study = None
    out.env_overrides = no_env
    return out


class WorkerTask:
    """One worker: a picklable callable that submitit runs as one task of the workers' array."""

    def __init__(self, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig,
                 singleton_state: dict[Any, Any], search: Search, index: int, job_base: int) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config
        self.singleton_state = singleton_state
        self.search, self.index, self.job_base = search, index, job_base
        self._requeueing = False
        self._composer: ComposedConfigs | None = None  # made in the worker (not pickled: see checkpoint)

    def __call__(self) -> int:
        from hydra.core.singleton import Singleton
        from hydra.core.utils import setup_globals

        self._requeueing = False  # this object comes back from the checkpoint pickle
        interrupt_on_sigterm(unless=lambda: self._requeueing)  # scancel: the trial is interrupted, then we exit
        Singleton.set_state({**self.singleton_state, "instances": dict(self.singleton_state["instances"])})
        setup_globals()
        self._composer = ComposedConfigs(self.hydra_context.config_loader)  # a trial's config in ms, not 50
        worker = Worker(self.search, self.index, worker_id(), self.job_base, prepare=self._prepare, run=self._run)
        return worker.run()

    def _prepare(self, num: int, overrides: list[str], env: Mapping[str, str]) -> tuple[DictConfig, Path, list[str]]:
        """The trial's job config (raises when it does not compose: the trial fails, the worker goes on)."""
        assert self._composer is not None, "composed in the worker that __call__ set up"
        config = self._composer.compose(self.config, list(overrides))
        with open_dict(config):
            config.hydra.job.id = num
            config.hydra.job.num = num
            for key, value in env.items():
                config.hydra.job.env_set[key] = value
        return config, job_dir(config, self.search.sweep_dir), list(overrides)

    def _run(self, num: int, prepared: tuple[DictConfig, Path, list[str]], trial_number: int) -> Any:
        """Hydra's run_job around the task in the job's directory, in a session of sweepit's API; its JobReturn."""
        from hydra.core.utils import run_job

        config, jdir, overrides = prepared
        jdir.mkdir(parents=True, exist_ok=True)
        start_clean(jdir)  # a job number claimed again after a crash
        write_trial_record(jdir, num, overrides, trial_number)
        record_task(jdir, 0)
        session = _session.begin(jdir, config)
        try:
            try:
                ret = run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=config,
                              job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
            except BaseException as e:  # SIGTERM (scancel, time limit) or submitit's requeue: interrupted
                session.finish(Status.INTERRUPTED if self._requeueing else _session.status_of(e), error=e)
                raise
            record(session, ret)
        finally:
            _session.end(session)
        return ret

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Called by submitit on USR2 (time limit, preemption): requeue this worker; it asks on when it is back."""
        import submitit

        self._requeueing = True
        fresh = copy.copy(self)
        fresh._composer = None
        fresh.search = for_workers(self.search)  # not the open study (its storage holds locks): reopened when back
        return submitit.helpers.DelayedSubmission(fresh, *args, **kwargs)


class PackedTask:
    """One worker of a packed grid: a picklable callable that submitit runs as one task of the workers' array."""

    def __init__(self, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig,
                 singleton_state: dict[Any, Any], spec: PackSpec) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config
        self.singleton_state = singleton_state
        self.spec = spec
        self._worker: PackedWorker | None = None  # the running loop (not pickled: see checkpoint)
        self._composer: ComposedConfigs | None = None

    def __call__(self) -> int:
        from hydra.core.singleton import Singleton
        from hydra.core.utils import setup_globals

        from sweepit.local._sweep import DEFAULT_PRELOAD, preload

        logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
        Singleton.set_state({**self.singleton_state, "instances": dict(self.singleton_state["instances"])})
        setup_globals()
        preload(DEFAULT_PRELOAD)  # once per worker, so that each job starts warm (see LocalOptions.preload)
        self._composer = ComposedConfigs(self.hydra_context.config_loader)  # a job's config in ms, not 50
        self._worker = PackedWorker(self.spec, worker_id(), compose=self._compose, body=self._body)
        return self._worker.run()

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Called by submitit on USR2 (time limit, preemption): the running jobs stop and are given back (each
        resumes from its last epoch checkpoint wherever it runs next), and this worker is requeued."""
        import submitit

        if self._worker is not None:
            self._worker.stop_for_requeue()
        fresh = copy.copy(self)
        fresh._worker, fresh._composer = None, None
        return submitit.helpers.DelayedSubmission(fresh, *args, **kwargs)

    def _compose(self, job: Job, entry: PlannedEntry) -> None:
        """The job's config as the driver composed it (same overrides, number and environment), and its directory."""
        assert self._composer is not None, "composed in the worker that __call__ set up"
        config = self._composer.compose(self.config, list(entry.overrides))
        with open_dict(config):
            config.hydra.job.id = entry.num
            config.hydra.job.num = entry.num
            for key, value in entry.env.items():
                config.hydra.job.env_set[key] = value
        job.config, job.job_dir = config, job_dir(config, Path(self.spec.sweep_dir))
        if str(job.job_dir) != entry.job_dir:
            raise RuntimeError(f"job {entry.num} composes to directory {job.job_dir} in this worker, but the driver "
                               f"planned {entry.job_dir}: is the app's config the same on this node?")

    def _body(self, job: Job) -> Reply:
        # Slurm's USR2 reaches every process of the allocation: the worker alone answers it (it stops its jobs).
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        return run_hydra_job(self.hydra_context, self.task_function, job.config, job.job_dir)
