"""Worker mode: N long-lived jobs each loop ask -> run -> tell against the study's shared storage, as Optuna's own
docs scale a study over many nodes. Here is the study's side, Hydra-free: the source of work that a worker's engine
(sweepit.slurm's, one for packed grids and studies) takes trials from, and the driver (`drive`).

    source = StudySource(search, index=0, job_base=0)   # for sweepit.slurm's worker engine: take() -> Work

The rules, shared by every worker through the storage alone (no driver needed):
- n_trials counts the whole study (`is_counted`). A worker stops asking once that many are counted; a trial it
  asked past that (two workers asked at once) is told FAIL as `surplus`, which counts nowhere, so the study ends
  with exactly n_trials. It then waits while other trials run, since one of them may come back (below).
- Job numbers are claimed in `<sweep dir>/.workers/jobs/<num>` (an exclusive create, atomic on NFS too), from the
  first number free when the driver submitted the workers: jobs are numbered as the per-trial mode numbers them.
  As its job starts, the claim records the trial, its worker and its job's directory: the driver and `sweepit status`
  adopt the job from it (`started_trials`), and so does the trial, for a worker that takes it over.
- A worker stopped by a signal (scancel, time limit, preemption: SIGTERM or submitit's requeue) stops its trial's
  job, which records itself `interrupted`: the trial is told so (FAIL, its parameters enqueued) before the worker
  exits; another worker, or the requeued one, retries it.
- A worker that dies without a word (SIGKILL, a lost node) leaves its trial RUNNING; its heartbeat file
  (`.workers/<worker_id>.alive`, touched every HEARTBEAT_S) goes stale, and after STALE_S another worker records
  the trial from its result, or interrupts it so it is retried (`recover_trial`, as a resumed driver does). One
  worker does so per trial: it must first create `.workers/reclaimed-<trial id>`.
- Failures: the study's failure rate (`max_failure_rate`) is checked before each ask; over it, workers stop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Container
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sweepit._files import atomic_write
from sweepit._host import now_iso
from sweepit.errors import SweepFailedError
from sweepit.results import WAIT, WORKER_STALE_S, SweepPaths, Work, claim, claimed, silent_s
from sweepit.search._pruning import PRUNER_CLASSES
from sweepit.search._results import write_results
from sweepit.search._samplers import build_sampler, grid_size, short_name
from sweepit.search._search import Search
from sweepit.search._study import STATUS_ATTR, interrupt, is_counted, recover, recover_trial

log = logging.getLogger(__name__)
WORKER_ATTR = "worker"     # trial user attribute: the Slurm id of the worker that runs it
SEED_STRIDE = 100_003      # seeded samplers: each worker its own stream, or they would ask the same points

def total_trials(search: Search) -> int:
    """n_trials, capped at the grid's size for the grid sampler (as Search.run counts)."""
    total = search.options.n_trials
    return min(total, grid_size(search.space)) if search.grid else total


def attach(search: Search, index: int) -> Any:
    """The study of a search opened by the driver, loaded again in a worker with the search's sampler (seeded per
    worker when seeded) and pruner."""
    import optuna

    from sweepit.search._pruning import build_pruner, open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(str(search.info["storage"]))
    study = optuna.load_study(study_name=str(search.info["study_name"]), storage=storage,
                              pruner=build_pruner(search.pruner))
    seed = search.sampler.get("seed")
    n_before = len(study.get_trials(deepcopy=False))
    study.sampler = build_sampler(search.sampler, None if seed is None else int(seed) + n_before
                                  + SEED_STRIDE * (index + 1), search.space)
    search.study = study
    return study


class StudySource:
    """A study's work for one worker's engine (`sweepit.slurm`'s): each job a trial asked from the study, with a job
    number claimed for it; see the module's docstring for the rules."""

    ahead = 0  # a trial is asked once a slot is free: the sampler sees every result told before it

    def __init__(self, search: Search, index: int, job_base: int, stale_s: float = WORKER_STALE_S) -> None:
        self.search, self.index, self.next_job, self.stale_s = search, index, job_base, stale_s
        self.dir = SweepPaths(search.sweep_dir).workers
        self.worker, self.total = "", 0
        self.study: Any = None
        self.n_run = 0

    def open(self, worker: str) -> None:
        self.worker = worker
        self.study = attach(self.search, self.index)
        self.total = total_trials(self.search)

    def take(self) -> Work | str | None:
        """The next trial's job; WAIT while n_trials count but some still run (one of them may come back); None
        when the study is done or its failure budget is spent."""
        search, study = self.search, self.study
        while True:
            self._reclaim()
            stop = search.failure_stop()
            if stop is not None:
                log.warning(f"worker {self.worker}: {stop}")
                return None
            trials = study.get_trials(deepcopy=False)
            if sum(is_counted(t) for t in trials) >= self.total:
                return WAIT if any(t.state.name == "RUNNING" for t in trials) else None
            trial = study.ask(search.space.distributions)
            if self._surplus(trial):
                continue
            job = self._claim_job()
            trial.set_user_attr("job_num", job)
            trial.set_user_attr(WORKER_ATTR, self.worker)
            if search.extend is not None and not search.before_start(search.extend, trial, "custom_search_space"):
                continue
            overrides = search.space.overrides(trial.params)
            trial.set_user_attr("overrides", overrides)
            log.info(f"worker {self.worker}: trial {trial.number} -> job {job}: {' '.join(overrides)}")
            return Work(job, overrides, search.trial_env(trial.number), token=trial)

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
        atomic_write(SweepPaths(self.search.sweep_dir).trial_claims / str(work.num), json.dumps(record) + "\n",
                     fsync=False)

    def ended(self, work: Work, returned: Any) -> None:
        self.n_run += 1
        self.search.tell_job(work.token, Path(str(work.job_dir)), _Returned(returned))

    def give_back(self, work: Work) -> None:
        """Stopped (a signal, a requeue): the trial is interrupted, its parameters enqueued for another worker."""
        trial = work.token
        with contextlib.suppress(Exception):
            interrupt(self.study, trial.number, trial._trial_id)

    def _claim_job(self) -> int:
        while not claim(SweepPaths(self.search.sweep_dir).trial_claims / str(self.next_job)):
            self.next_job += 1
        self.next_job += 1
        return self.next_job - 1

    def _surplus(self, trial: Any) -> bool:
        """True (and the trial told FAIL as `surplus`) when n_trials counted trials were asked before it."""
        before = [t for t in self.study.get_trials(deepcopy=False) if t.number < trial.number and is_counted(t)]
        if len(before) < self.total:
            return False
        from optuna.trial import TrialState

        trial.set_user_attr(STATUS_ATTR, "surplus")
        self.study.tell(trial.number, state=TrialState.FAIL)
        return True

    def _reclaim(self) -> None:
        """RUNNING trials of workers whose heartbeat went stale: recorded from their result, or retried."""
        now, study = time.time(), self.study
        for trial in study.get_trials(deepcopy=False):
            if trial.state.name != "RUNNING" or trial.datetime_start is None:
                continue
            owner = trial.user_attrs.get(WORKER_ATTR)
            if owner == self.worker or now - trial.datetime_start.timestamp() < self.stale_s:
                continue
            silent = silent_s(self.search.sweep_dir, str(owner))
            if silent < self.stale_s or not claim(self.dir / f"reclaimed-{trial._trial_id}"):
                continue
            status = recover_trial(study, trial, self.search.sweep_dir, self.search.options.diverged_value,
                                   self.search.options.metrics)
            log.warning(f"worker {self.worker}: trial {trial.number} of worker {owner} (silent for "
                        f"{silent:.0f} s) recorded as {status}")


def started_trials(sweep_dir: Path, known: Container[int] = ()) -> dict[int, dict[str, Any]]:
    """The jobs that workers started trials in, but those in `known`: job number -> its claim's record (`worker`,
    `trial`, `overrides`, `job_dir`, `started_at`). A claim whose job has not started yet, or whose content this node
    does not see yet, is left for the next look."""
    folder = SweepPaths(sweep_dir).trial_claims
    out: dict[int, dict[str, Any]] = {}
    for num in sorted(claimed(folder)):
        if num in known:
            continue
        try:
            record = json.loads((folder / str(num)).read_text())
        except (OSError, ValueError):
            continue
        out[num] = record
    return out


@dataclass
class _Returned:
    """What the trial's job returned, as `Search.tell_job` reads a launcher's return (`return_value`)."""

    return_value: Any


# -- the driver's side -------------------------------------------------------------------------------------------
class WorkerArray(Protocol):
    """What `drive` needs of the backend (sweepit.slurm's WorkerSweep): open the sweep (True: workers of an earlier
    driver still alive), submit the workers, follow them to their end (a stop message when told to stop early)."""

    @property
    def waits(self) -> bool: ...  # False: submit and leave (hydra.launcher.wait=false)

    def open(self) -> bool: ...

    def submit(self, tasks: list[Any]) -> list[str]: ...

    def follow(self) -> str | None: ...


def drive(search: Search, array: WorkerArray, n_workers: int, make_task: Callable[[int], Any]) -> None:
    """The driver of worker mode: recover what an earlier run left, submit `n_workers` (fewer when fewer trials are
    left), follow them, and write the study's result files. Raises SweepFailedError as Search.run does."""
    study, total = search.study, total_trials(search)
    assert study is not None, "open() the search before drive()"
    alive = array.open()
    n_recovered = 0 if alive else recover(study, search.sweep_dir, search.options.diverged_value,
                                          search.options.metrics)
    n_counted = sum(is_counted(t) for t in study.get_trials(deepcopy=False))
    n_new = 0 if alive else max(0, min(n_workers, total - n_counted))
    log.info(f"Optuna study {search.info['study_name']!r} ({search.objectives()}) in {search.info['storage']}: "
             f"{n_counted} of {total} trials done before" + (f", {n_recovered} recovered" if n_recovered else "")
             + f"; sampler {short_name(search.sampler)}, pruner {short_name(search.pruner, PRUNER_CLASSES)}; "
             + ("following the workers still running from before" if alive else
                f"{n_new} worker(s), each asking trials from the study's storage until {total} are done")
             + f"; space {search.space.describe()}")
    if n_new:
        array.submit([make_task(i) for i in range(n_new)])
    stopped = array.follow()
    if not array.waits:
        return
    if stopped is None:  # every worker has ended: a trial still RUNNING lost its worker (killed without a word)
        recover(study, search.sweep_dir, search.options.diverged_value, search.options.metrics)
    write_results(search.sweep_dir, study, search.info)
    if stopped is not None:
        raise SweepFailedError(stopped)
    search.print_end()
    stop = search.failure_stop()
    n_counted = sum(is_counted(t) for t in study.get_trials(deepcopy=False))
    if stop is None and n_counted < total:
        stop = (f"the Optuna workers ended with {n_counted} of {total} trials done (trials whose worker was stopped "
                f"are retried): run the same command again on hydra.sweep.dir={search.sweep_dir} (or `sweepit resume "
                f"{search.sweep_dir}`) to finish the study.")
    if stop is not None:
        raise SweepFailedError(stop)
