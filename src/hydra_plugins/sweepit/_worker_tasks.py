"""What long-lived workers run on Slurm (`WorkerTask`): sweepit.slurm's worker engine over a packed grid's plan
(`hydra.launcher.workers=N`) or an Optuna study (`hydra.sweeper.workers=N`). Each job runs in a process forked by the
worker's fork server (forked before the worker reads any work), which composes the job as the driver composes it (the
same directory, so every reader of a sweep reads worker jobs unchanged) just before it forks it. Where CUDA was
initialised before that server's fork, a job that uses GPUs starts in a fresh interpreter instead, as the local
launcher's do (`ForkServer.spawn`). On requeue the running jobs are stopped and given back, and the requeued worker
goes on.
"""

from __future__ import annotations

import copy
import logging
import os
import pickle
import signal
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from hydra_plugins.sweepit._compose import ComposedConfigs
from hydra_plugins.sweepit._job_steps import warm_up
from hydra_plugins.sweepit._launcher import job_dir, number, numbered
from hydra_plugins.sweepit._runner import JobRunner, SlurmTask, pickle_hydra, restore_hydra
from sweepit.local import ForkServer, Job
from sweepit.results import JobOutcome, Recorder, Work
from sweepit.search import Search, StudySource
from sweepit.slurm import Engine, PackedWorker, PackSpec, worker_id


def for_workers(search: Search) -> Search:
    """A copy of the driver's search to pickle into the workers: without its study (each worker opens the storage
    itself) and its driver-side hooks."""
    out = copy.copy(search)
    out.study = None
    out.env_overrides = None
    return out


class WorkerTask:
    """One long-lived worker, pickled: submitit runs it as one task of the workers' array."""

    def __init__(self, hydra_context: HydraContext, task_function: TaskFunction, singleton_state: dict[Any, Any],
                 config: DictConfig, spec: PackSpec | None = None, search: Search | None = None,
                 index: int = 0, job_base: int = 0) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config
        self.singleton_state = singleton_state
        self.spec, self.search, self.index, self.job_base = spec, search, index, job_base
        self.sweep_dir = Path(spec.sweep_dir) if spec is not None else Path(search.sweep_dir)  # type: ignore[union-attr]
        self._engine: Engine | None = None  # the running loop (not pickled: see checkpoint)
        self._composer: ComposedConfigs | None = None
        self._hydra: bytes | None = None  # what a job in a fresh interpreter carries of Hydra, pickled once

    def __call__(self) -> int:
        logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
        restore_hydra(self.singleton_state)
        self._composer = ComposedConfigs(self.hydra_context.config_loader)  # composed once per choice of groups
        # Forked now, before the worker reads its work (a grid's plan): each job's fork copies the app and the
        # preloads (imported in the server alone, once, so that each job starts warm: see LocalOptions.preload).
        server = ForkServer(self._body, compose=self._compose, setup=self._warm_up, fresh=self._fresh)
        server.start()
        try:
            if self.spec is not None:
                self._engine = PackedWorker(self.spec, worker_id(), compose=self._plan, body=self._body, server=server)
            else:
                assert self.search is not None
                source = StudySource(self.search, self.index, self.job_base)
                self._engine = Engine(source, worker_id(), self.sweep_dir, self._plan, self._body, server=server,
                                      recorded_by=Recorder.OPTUNA_WORKER, threads=len(os.sched_getaffinity(0)))
            return self._engine.run()
        finally:
            server.close()

    def _warm_up(self) -> None:
        """In the fork server, once, before its first fork (see LocalLauncher._warm_up)."""
        from sweepit.local import DEFAULT_PRELOAD, preload

        preload(DEFAULT_PRELOAD)
        warm_up(self.config)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Called by submitit on USR2 (time limit, preemption): the running jobs stop and are given back (each
        resumes from its last epoch checkpoint wherever it runs next), and this worker is requeued."""
        import submitit

        if self._engine is not None:
            self._engine.stop_for_requeue()
        fresh = copy.copy(self)
        fresh._engine, fresh._composer, fresh._hydra = None, None, None
        if self.search is not None:  # not the open study (its storage holds locks): reopened when back
            fresh.search = for_workers(self.search)
        return submitit.helpers.DelayedSubmission(fresh, *args, **kwargs)

    def _plan(self, job: Job, work: Work) -> None:
        """The job's directory: the driver's planned one (a grid's), else its config's, composed here and let go (a
        study's trial: the worker says where it runs before it runs)."""
        if work.job_dir is not None:
            job.job_dir = Path(work.job_dir)
        else:
            assert self._composer is not None, "composed in the worker that __call__ set up"
            _, job.job_dir = numbered(self._composer.compose(self.config, list(work.overrides)), work.num, work.env,
                                      self.sweep_dir)
        job.job_dir.mkdir(parents=True, exist_ok=True)

    def _compose(self, job: Job) -> None:
        """In the fork server: the job's config as the driver composes it (same overrides, number and environment),
        in the directory the worker planned."""
        assert self._composer is not None, "composed in the worker that __call__ set up"
        job.config = number(self._composer.compose(self.config, list(job.overrides)), job.num, job.job_env)
        composed = job_dir(job.config, self.sweep_dir)
        if composed != job.job_dir:
            raise RuntimeError(f"job {job.num} composes to directory {composed} in this worker, but the driver "
                               f"planned {job.job_dir}: is the app's config the same on this node?")

    def _fresh(self, job: Job) -> bytes:
        """In the worker: the job composed and pickled for a fresh interpreter (its fork server cannot use CUDA:
        `ForkServer.spawn`), as the local launcher's `_fresh` does."""
        self._compose(job)
        if self._hydra is None:
            self._hydra = pickle_hydra(self.hydra_context, self.task_function, self.singleton_state)
        return pickle.dumps(partial(in_worker, SlurmTask(self._hydra, job.config, str(job.job_dir)).reply))

    def _body(self, job: Job) -> JobOutcome:
        return in_worker(partial(JobRunner(self.hydra_context, self.task_function).reply, job.config, job.job_dir))


def in_worker(run: Callable[[], JobOutcome]) -> JobOutcome:
    """A worker's job, forked or in a fresh interpreter. Slurm's USR2 reaches every process of the allocation: the
    worker alone answers it (it stops its jobs)."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    return run()
