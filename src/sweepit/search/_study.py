"""The study's bookkeeping: outcomes told to Optuna, trials counted, the failure policy, and recovery on resume.

Each trial carries user attributes: `job_num`, `job_dir`, `overrides` (the job's command-line overrides),
`sweepit_status` (the job's result status: completed, pruned, diverged, failed, interrupted) and `error`.

- completed: COMPLETE with the objective (FAIL when it is not a finite number).
- pruned: PRUNED (Optuna takes the last reported epoch's value).
- diverged: FAIL, or COMPLETE with `diverged_value` when set; never a failure for `max_failure_rate`.
- failed: FAIL, counted by `max_failure_rate`.
- interrupted (the driver stopped while the trial ran): FAIL, not counted anywhere, and its parameters
  are enqueued so that the next run of the study tries them again under a new trial number.
- surplus (worker mode: asked after n_trials were, by a worker that raced another): FAIL, counted nowhere.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from sweepit.results import Status, read_record
from sweepit.search._trials import Outcome, find_job_dir, read_outcome

log = logging.getLogger(__name__)

STATUS_ATTR = "sweepit_status"
# FAIL trials that count nowhere: cut short by a stopped driver or worker (retried), or asked by a worker after
# n_trials were (worker mode: two workers asked at once).
NOT_COUNTED = (Status.INTERRUPTED, "surplus")


def _trial_state() -> Any:
    from optuna.trial import TrialState

    return TrialState


def is_counted(trial: Any) -> bool:
    """Trials that count towards `n_trials`: finished or running ones, not interrupted or waiting ones."""
    ts = _trial_state()
    if trial.state == ts.WAITING:
        return False
    return not (trial.state == ts.FAIL and trial.user_attrs.get(STATUS_ATTR) in NOT_COUNTED)


def is_failure(trial: Any) -> bool:
    """FAIL trials that count against `max_failure_rate`: not diverged, not interrupted."""
    return trial.state == _trial_state().FAIL and trial.user_attrs.get(STATUS_ATTR) not in (Status.DIVERGED,
                                                                                             *NOT_COUNTED)


def failure_rate(study: Any) -> tuple[int, int]:
    """(failed, finished) over the whole study."""
    ts = _trial_state()
    finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished() and is_counted(t)
                and t.state != ts.WAITING]
    return sum(is_failure(t) for t in finished), len(finished)


def tell(study: Any, trial_number: int, trial_id: int, outcome: Outcome, diverged_value: float | None) -> str:
    """Tell Optuna the job's outcome; returns the Optuna state's name."""
    import optuna

    ts = _trial_state()
    trial = optuna.trial.Trial(study, trial_id)
    trial.set_user_attr(STATUS_ATTR, outcome.status)
    if outcome.job_dir is not None:
        trial.set_user_attr("job_dir", str(outcome.job_dir))
    if outcome.error:
        trial.set_user_attr("error", outcome.error[:500])
    value = outcome.value
    finite = value is not None and math.isfinite(value)
    if len(study.directions) > 1:  # several objectives: the values, all of them, or FAIL (diverged too)
        if outcome.status == Status.COMPLETED and outcome.values is not None:
            study.tell(trial_number, outcome.values)
            return "COMPLETE"
        if outcome.status == Status.COMPLETED and outcome.error:
            trial.set_user_attr("error", outcome.error[:500])
        finite = False
        diverged_value = None
    if outcome.status == Status.COMPLETED and finite:
        study.tell(trial_number, value)
        return "COMPLETE"
    if outcome.status == Status.PRUNED:
        study.tell(trial_number, state=ts.PRUNED)
        return "PRUNED"
    if outcome.status == Status.DIVERGED and diverged_value is not None:
        study.tell(trial_number, float(diverged_value))
        return "COMPLETE"
    if outcome.status == Status.INTERRUPTED:
        interrupt(study, trial_number, trial_id)
        return "FAIL"
    study.tell(trial_number, state=ts.FAIL)
    return "FAIL"


def interrupt(study: Any, trial_number: int, trial_id: int) -> None:
    """The trial was cut short by the driver, not by its parameters: FAIL it and enqueue its parameters."""
    import optuna

    ts = _trial_state()
    frozen = study._storage.get_trial(trial_id)
    if frozen.state.is_finished():
        return
    optuna.trial.Trial(study, trial_id).set_user_attr(STATUS_ATTR, Status.INTERRUPTED)
    study.tell(trial_number, state=ts.FAIL)
    if frozen.params:
        study.enqueue_trial(dict(frozen.params), user_attrs={"retry_of": trial_number})


def recover(study: Any, sweep_dir: Path, diverged_value: float | None, metrics: list[str] | None = None) -> int:
    """Trials left RUNNING by an earlier driver that stopped (killed, lost node): tell what their result says,
    or interrupt them so that they are retried. Returns how many were recovered."""
    ts = _trial_state()
    n = 0
    for trial in study.get_trials(deepcopy=False, states=(ts.RUNNING,)):
        n += 1
        recover_trial(study, trial, sweep_dir, diverged_value, metrics)
    return n


def recover_trial(study: Any, trial: Any, sweep_dir: Path, diverged_value: float | None,
                  metrics: list[str] | None = None) -> str:
    """One RUNNING trial whose runner is gone: its result when its job wrote one, else interrupted (FAIL, and its
    parameters enqueued to be tried again). Returns the job's status, or `interrupted`."""
    job_dir = trial.user_attrs.get("job_dir")
    if not job_dir and isinstance(trial.user_attrs.get("job_num"), int):
        job_dir = find_job_dir(sweep_dir, trial.user_attrs["job_num"])
    record = read_record(job_dir or None)
    status = record.status or ""
    if status in (Status.COMPLETED, Status.PRUNED, Status.DIVERGED, Status.FAILED):
        outcome = Outcome(status, record.objective, Path(str(job_dir)))
        if metrics or len(study.directions) > 1:
            outcome = read_outcome(Path(str(job_dir)), None, metrics, len(study.directions))
        tell(study, trial.number, trial._trial_id, outcome, diverged_value)
        log.info(f"trial {trial.number}: recorded its finished job ({status}) from {job_dir}")
        return status
    interrupt(study, trial.number, trial._trial_id)
    log.info(f"trial {trial.number}: interrupted by the earlier run; its parameters will be tried again")
    return Status.INTERRUPTED
