"""How trials run: one by one on a launcher that can (`AsyncLauncher`: sweepit's, so a slow trial never holds the
others back), else in batches of `n_jobs` through Hydra's `launch()`; and what became of each trial's job."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from sweepit.results import (
    JobRecord,
    JobState,
    Recorder,
    job_folders,
    objective_values,
    read_record,
    record_end,
    returned_fields,
)

log = logging.getLogger(__name__)


@runtime_checkable
class AsyncLauncher(Protocol):
    """A launcher that runs jobs one by one, as they are asked for: the sweeper calls `start` for each job (at most
    `n_jobs` in flight; a launcher with fewer workers queues the rest), `wait_any` whenever it has nothing to start,
    and `close` once, at the end or on an error. After Ctrl-C the launcher stops its running jobs, returns them from
    `wait_any`, and then raises KeyboardInterrupt from the next `wait_any`."""

    def start(self, overrides: Sequence[str], job_num: int) -> None: ...  # returns at once

    def wait_any(self) -> list[tuple[int, Any]]:
        """Block until at least one job ended: `(job_num, JobReturn)` of each since the last call."""

    def close(self) -> None: ...  # stop jobs still running, write the launcher's records, release resources


class BatchLauncher:
    """`AsyncLauncher` over Hydra's batch API: `wait_any` launches every job started since the last call
    together and returns when the slowest of them ends. A job whose return is lost (the launcher raised
    on failed jobs) comes back as None; its `result.json` tells the rest."""

    def __init__(self, launcher: Any) -> None:
        self.launcher = launcher
        self.pending: list[tuple[int, list[str]]] = []

    def start(self, overrides: Sequence[str], job_num: int) -> None:
        self.pending.append((job_num, list(overrides)))

    def wait_any(self) -> list[tuple[int, Any]]:
        pending, self.pending = sorted(self.pending), []
        out: list[tuple[int, Any]] = []
        # A batch `launch()` numbers its jobs from `initial_job_idx` on: one launch per run of consecutive numbers.
        for _, group in itertools.groupby(enumerate(pending), key=lambda item: item[1][0] - item[0]):
            run = [job for _, job in group]
            first = run[0][0]
            try:
                returns = list(self.launcher.launch([o for _, o in run], initial_job_idx=first))
            except Exception as e:  # e.g. a launcher that raises when any job of the batch failed
                log.warning(f"the launcher raised {type(e).__name__} for jobs {first}-{run[-1][0]}: "
                            f"{str(e).splitlines()[0] if str(e) else ''}; reading their results from their "
                            "directories")
                returns = [None] * len(run)
            out += [(num, ret) for (num, _), ret in zip(run, returns, strict=False)]
        return out

    def close(self) -> None:
        return None


def as_runner(launcher: Any, n_jobs: int) -> AsyncLauncher:
    if isinstance(launcher, AsyncLauncher):
        return launcher
    log.info(f"{type(launcher).__name__} only offers Hydra's batch launch(): trials run in batches of {n_jobs}, "
             "each batch waiting for its slowest trial")
    return BatchLauncher(launcher)


def find_job_dir(sweep_dir: Path, num: int, ret: Any = None) -> Path | None:
    """The job's directory: its JobReturn's config's, else the sweep directory's `<num>_*`."""
    for cfg in (getattr(ret, "hydra_cfg", None), getattr(ret, "cfg", None)):
        with contextlib.suppress(Exception):
            if cfg is not None and cfg.hydra.runtime.output_dir:
                return Path(str(cfg.hydra.runtime.output_dir))
    with contextlib.suppress(OSError):
        return job_folders(sweep_dir).get(num)
    return None


def read_trial(job_dir: Path | None, ret: Any, metrics: list[str] | None = None,
               n_values: int = 1) -> tuple[JobRecord, list[float] | None]:
    """What became of a trial's job, for `tell`: its record and objective value(s). A job that wrote no `result.json`
    (an app without sweepit's callback on another launcher) gets one from its JobReturn, so that the table, the report
    and the study name the same best job. A completed job whose values are missing FAILs, with why as its error."""
    record = read_record(job_dir)
    if not record.ended:
        record = _recorded(job_dir, ret) or record_end(None, JobState.FAILED, None,
                                                       error="the launcher returned no result for the job")
    result, why = record.result, ""
    if metrics or n_values > 1:
        values = objective_values(result, metrics, n_values)
        why = "" if values is not None else _missing(result, metrics, n_values)
    else:
        values = None if record.objective is None else [record.objective]
        if values is None and not record.error:
            why = f"the job returned {result.get('returned', 'nothing')}, not a number"
    if why and record.status == JobState.COMPLETED:
        record = JobRecord(record.status, {**result, "error": why})
    return record, values


def _recorded(job_dir: Path | None, ret: Any) -> JobRecord | None:
    """The record of a job that wrote none, from its JobReturn (written to its directory when it has one)."""
    if ret is None:
        return None
    try:
        value = ret.return_value  # raises the job's exception when it failed
        status, facts = JobState.COMPLETED, returned_fields(value)
    except BaseException as e:
        status, facts = JobState.FAILED, {"error": f"{type(e).__name__}: {e}"}
    if job_dir is not None and job_dir.is_dir():
        try:
            return record_end(job_dir, status, Recorder.SWEEPER, **facts)
        except OSError as e:  # the study has the value; the table will say the job is pending
            log.warning(f"could not record job {job_dir.name}'s result: {e}")
    return record_end(None, status, Recorder.SWEEPER, **facts)


def _missing(result: dict[str, Any], metrics: list[str] | None, n: int) -> str:
    if metrics:
        have = sorted({*(k for k, v in result.items() if isinstance(v, int | float)),
                       *(result.get("final") or {})})
        return (f"each of hydra.sweeper.metrics={metrics} must be a finite number in the job's result.json "
                f"(objective, a top-level number, or the last epoch's metrics), but it has {have}; name those.")
    return (f"a study with {n} directions needs {n} finite values per trial: the task must return a list of {n} "
            f"numbers, or hydra.sweeper.metrics must name them, but it returned {result.get('returned', 'none')!r}"
            f"{'' if 'objective' not in result else ' (objective ' + repr(result.get('objective')) + ')'}.")
