"""Worker mode, the study's side: the source of work of sweepit.slurm's worker engine (`StudySource`) and the driver
(`drive`). Workers share nothing but the storage and `.workers/` (docs/optuna.md): a job's number is claimed in
`.workers/jobs/<num>`, whose record the driver adopts the job from (`started_trials`); a trial of a worker whose
heartbeat went stale is taken over by the one worker that claims `.workers/reclaimed-<trial id>`."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Container
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

from sweepit._files import atomic_write
from sweepit._host import now_iso
from sweepit.errors import SweepFailedError
from sweepit.results import WAIT, WORKER_STALE_S, SweepPaths, Work, claim, claimed, silent_s
from sweepit.search._pruning import trial_env
from sweepit.search._results import write_results
from sweepit.search._search import Search
from sweepit.search._study import STATUS_ATTR, interrupt, is_counted, recover, recover_trial

log = logging.getLogger(__name__)
WORKER_ATTR = "worker"     # trial user attribute: the Slurm id of the worker that runs it


class StudySource:
    """A study's work for one worker's engine: each job a trial asked from the study, with a job number claimed."""

    ahead = 0  # a trial is asked once a slot is free: the sampler sees every result told before it

    def __init__(self, search: Search, index: int, job_base: int, stale_s: float = WORKER_STALE_S) -> None:
        self.search, self.index, self.next_job, self.stale_s = search, index, job_base, stale_s
        self.paths = SweepPaths(search.sweep_dir)
        self.worker = ""

    def open(self, worker: str) -> None:
        self.worker = worker
        self.search.attach(self.index)

    def take(self) -> Work | str | None:
        """The next trial's job; WAIT while n_trials count but some still run (one of them may come back); None
        when the study is done or its failure budget is spent."""
        search, study = self.search, self.search.study
        while True:
            self._reclaim()
            stop = search.failure_stop()
            if stop is not None:
                log.warning(f"worker {self.worker}: {stop}")
                return None
            trials = study.get_trials(deepcopy=False)
            if sum(is_counted(t) for t in trials) >= search.total_trials():
                return WAIT if any(t.state.name == "RUNNING" for t in trials) else None
            trial = study.ask(search.space.distributions)
            if self._surplus(trial):
                continue
            trial.set_user_attr(WORKER_ATTR, self.worker)
            job = self._claim_job()
            overrides = search.prepare(trial, job)
            if overrides is None:
                continue
            log.info(f"worker {self.worker}: trial {trial.number} -> job {job}: {' '.join(overrides)}")
            return Work(job, overrides, trial_env(search.info, trial.number), token=trial)

    def refused(self, work: Work, error: Exception) -> bool:
        """Its job's config cannot be made: the trial fails, the worker goes on."""
        def fail(trial: Any) -> None:
            raise error

        self.search.before_start(fail, work.token, "config")
        return True

    def started(self, work: Work) -> None:
        trial = work.token
        trial.set_user_attr("job_dir", work.job_dir)
        record = {"worker": self.worker, "trial": trial.number, "overrides": work.overrides, "job_dir": work.job_dir,
                  "started_at": now_iso()}
        atomic_write(self.paths.trial_claims / str(work.num), json.dumps(record) + "\n", fsync=False)

    def ended(self, work: Work, returned: Any) -> None:
        self.search.tell_job(work.token, Path(str(work.job_dir)), SimpleNamespace(return_value=returned))

    def give_back(self, work: Work) -> None:
        """Stopped (a signal, a requeue): the trial is interrupted, its parameters enqueued for another worker."""
        with contextlib.suppress(Exception):
            interrupt(self.search.study, work.token.number, work.token._trial_id)

    def _claim_job(self) -> int:
        while not claim(self.paths.trial_claims / str(self.next_job)):
            self.next_job += 1
        self.next_job += 1
        return self.next_job - 1

    def _surplus(self, trial: Any) -> bool:
        """True (and the trial told FAIL as `surplus`) when n_trials counted trials were asked before it."""
        study = self.search.study
        before = [t for t in study.get_trials(deepcopy=False) if t.number < trial.number and is_counted(t)]
        if len(before) < self.search.total_trials():
            return False
        from optuna.trial import TrialState

        trial.set_user_attr(STATUS_ATTR, "surplus")
        study.tell(trial.number, state=TrialState.FAIL)
        return True

    def _reclaim(self) -> None:
        """RUNNING trials of workers whose heartbeat went stale: recorded from their result, or retried."""
        now, search = time.time(), self.search
        for trial in search.study.get_trials(deepcopy=False):
            if trial.state.name != "RUNNING" or trial.datetime_start is None:
                continue
            owner = trial.user_attrs.get(WORKER_ATTR)
            if owner == self.worker or now - trial.datetime_start.timestamp() < self.stale_s:
                continue
            silent = silent_s(self.paths.heartbeat(str(owner)))
            if silent < self.stale_s or not claim(self.paths.workers / f"reclaimed-{trial._trial_id}"):
                continue
            status = recover_trial(search.study, trial, search.sweep_dir, search.options.diverged_value,
                                   search.options.metrics)
            log.warning(f"worker {self.worker}: trial {trial.number} of worker {owner} (silent for "
                        f"{silent:.0f} s) recorded as {status}")


def started_trials(sweep_dir: Path, known: Container[int] = ()) -> dict[int, dict[str, Any]]:
    """Job number -> its claim's record (`StudySource.started`), but those in `known`. A claim whose job has not
    started yet, or whose content this node does not see yet, is left for the next look."""
    folder = SweepPaths(sweep_dir).trial_claims
    out: dict[int, dict[str, Any]] = {}
    for num in sorted(claimed(folder)):
        if num in known:
            continue
        with contextlib.suppress(OSError, ValueError):
            out[num] = json.loads((folder / str(num)).read_text())
    return out


class WorkerArray(Protocol):
    """What `drive` needs of the backend (sweepit.slurm's WorkerSweep)."""

    @property
    def waits(self) -> bool: ...  # False: submit and leave (hydra.launcher.wait=false)

    def open(self) -> bool: ...  # True: workers of an earlier driver are still alive

    def submit(self, tasks: list[Any]) -> list[str]: ...

    def follow(self) -> str | None: ...  # a stop message when told to stop early


def drive(search: Search, array: WorkerArray, n_workers: int, make_task: Callable[[int], Any]) -> None:
    """The driver of worker mode: recover what an earlier run left, submit `n_workers` (fewer when fewer trials are
    left), follow them, write the study's result files; raises SweepFailedError as Search.run does."""
    study, total, options = search.study, search.total_trials(), search.options
    assert study is not None, "open() the search before drive()"
    alive = array.open()
    n_recovered = 0 if alive else recover(study, search.sweep_dir, options.diverged_value, options.metrics)
    n_new = 0 if alive else max(0, min(n_workers, total - search.n_counted()))
    log.info(search.opening(n_recovered, "following the workers still running from before" if alive else
                            f"{n_new} worker(s), each asking trials from the study's storage until {total} are done"))
    if not alive and (done := search.nothing_left()) is not None:
        log.info(done)
    if n_new:
        array.submit([make_task(i) for i in range(n_new)])
    stopped = array.follow()
    if not array.waits:
        return
    if stopped is None:  # every worker has ended: a trial still RUNNING lost its worker (killed without a word)
        recover(study, search.sweep_dir, options.diverged_value, options.metrics)
    write_results(search.sweep_dir, study, search.info)
    if stopped is not None:
        raise SweepFailedError(stopped)
    search.print_end()
    stop = search.failure_stop()
    n_counted = search.n_counted()
    if stop is None and n_counted < total:
        stop = (f"the Optuna workers ended with {n_counted} of {total} trials done (trials whose worker was stopped "
                f"are retried): run the same command again on hydra.sweep.dir={search.sweep_dir} (or `sweepit resume "
                f"{search.sweep_dir}`) to finish the study.")
    if stop is not None:
        raise SweepFailedError(stop)
