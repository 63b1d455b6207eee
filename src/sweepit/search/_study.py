"""What the study is told of each trial's job (docs/optuna.md): its Optuna state and `sweepit_status`, which trials
count towards n_trials and max_failure_rate, and trials whose runner is gone. An interrupted trial (cut short by a
stopped driver or worker) is FAIL, counted nowhere, and its parameters are enqueued again."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from sweepit.results import JobRecord, JobState, read_record
from sweepit.search._trials import find_job_dir, read_trial

log = logging.getLogger(__name__)

STATUS_ATTR = "sweepit_status"
# FAIL trials that count nowhere: cut short by a stopped driver or worker (retried), or asked by a worker after
# n_trials were (worker mode: two workers asked at once).
NOT_COUNTED = (JobState.INTERRUPTED, "surplus")


def _trial_state() -> Any:
    from optuna.trial import TrialState

    return TrialState


def is_counted(trial: Any) -> bool:
    """Trials that count towards `n_trials`: finished or running ones, not interrupted or waiting ones."""
    ts = _trial_state()
    if trial.state == ts.WAITING:
        return False
    return not (trial.state == ts.FAIL and trial.user_attrs.get(STATUS_ATTR) in NOT_COUNTED)


def failure_rate(study: Any) -> tuple[int, int]:
    """(failed, finished) over the whole study; diverged trials are results, not failures."""
    finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished() and is_counted(t)]
    fail = _trial_state().FAIL
    return sum(t.state == fail and t.user_attrs.get(STATUS_ATTR) != JobState.DIVERGED for t in finished), len(finished)


def tell(study: Any, trial: Any, record: JobRecord, values: list[float] | None, diverged_value: float | None,
         job_dir: Path | None = None) -> str:
    """Tell Optuna how the trial's job ended (`read_trial`); the Optuna state's name. With several objectives a trial
    has all its values or FAILs (a diverged one too)."""
    import optuna

    told = optuna.trial.Trial(study, trial._trial_id)
    told.set_user_attr(STATUS_ATTR, record.status)
    if job_dir is not None:
        told.set_user_attr("job_dir", str(job_dir))
    if record.error:
        told.set_user_attr("error", record.error[:500])
    if record.status == JobState.INTERRUPTED:
        interrupt(study, trial.number, trial._trial_id)
        return "FAIL"
    if record.status == JobState.PRUNED:
        return str(study.tell(trial.number, state=_trial_state().PRUNED).state.name)
    multi = len(study.directions) > 1
    if record.status == JobState.DIVERGED and not multi and diverged_value is not None:
        values = [diverged_value]
    elif record.status != JobState.COMPLETED:
        values = None
    if values is None or not all(math.isfinite(v) for v in values):
        return str(study.tell(trial.number, state=_trial_state().FAIL).state.name)
    return str(study.tell(trial.number, values if multi else values[0]).state.name)


def interrupt(study: Any, trial_number: int, trial_id: int) -> None:
    """The trial was cut short by the driver, not by its parameters: FAIL it and enqueue its parameters."""
    import optuna

    frozen = study._storage.get_trial(trial_id)
    if frozen.state.is_finished():
        return
    optuna.trial.Trial(study, trial_id).set_user_attr(STATUS_ATTR, JobState.INTERRUPTED)
    study.tell(trial_number, state=_trial_state().FAIL)
    if frozen.params:
        study.enqueue_trial(dict(frozen.params), user_attrs={"retry_of": trial_number})


def recover(study: Any, sweep_dir: Path, diverged_value: float | None, metrics: list[str] | None = None) -> int:
    """Trials left RUNNING by an earlier driver that stopped (killed, lost node), each as `recover_trial`; how many."""
    running = study.get_trials(deepcopy=False, states=(_trial_state().RUNNING,))
    for trial in running:
        recover_trial(study, trial, sweep_dir, diverged_value, metrics)
    return len(running)


def recover_trial(study: Any, trial: Any, sweep_dir: Path, diverged_value: float | None,
                  metrics: list[str] | None = None) -> str:
    """One RUNNING trial whose runner is gone: its job's result when it wrote one, else interrupted (tried again)."""
    job_dir = trial.user_attrs.get("job_dir")
    if not job_dir and isinstance(trial.user_attrs.get("job_num"), int):
        job_dir = find_job_dir(sweep_dir, trial.user_attrs["job_num"])
    job_dir = Path(job_dir) if job_dir else None
    status = read_record(job_dir).status
    if JobState.is_success(status) or status == JobState.FAILED:
        tell(study, trial, *read_trial(job_dir, None, metrics, len(study.directions)), diverged_value, job_dir)
        log.info(f"trial {trial.number}: recorded its finished job ({status}) from {job_dir}")
        return str(status)
    interrupt(study, trial.number, trial._trial_id)
    log.info(f"trial {trial.number}: interrupted by the earlier run; its parameters will be tried again")
    return JobState.INTERRUPTED
