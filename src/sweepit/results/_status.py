"""Where a job stands, from planned to ended (`JobState`), who recorded it (`Recorder`), the one rule that turns an
outcome into what a sweeper receives, and the objective's direction, which the Optuna sweeper records in
`optuna_study.yaml` (read here: every reader of a sweep judges "best" by it)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sweepit._files import atomic_write
from sweepit.results._paths import SweepPaths

if TYPE_CHECKING:
    from sweepit.results._summary import JobRow


class _Word(str, Enum):
    """A word records and tables hold: a str equal to its value, written (JSON, f-strings) as the value alone."""

    def __str__(self) -> str:
        return str(self.value)


class JobState(_Word):
    """Where a job stands, from planned to ended: sweep.json's `state`, a table's row and, once it ended,
    `result.json`'s `status`. The predicates take a member or a word read from a file (an app may write its own)."""

    NOT_STARTED = "not started"  # planned, or its sweep stopped before it started (a resume runs it)
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"      # trained to the end (or the task returned): the objective, or the task's return value
    PRUNED = "pruned"            # stopped early by the Optuna pruner: its last reported value, told as PRUNED
    DIVERGED = "diverged"        # the loss stopped being finite: a result, not an error; the sweeper gets the worst
    FAILED = "failed"            # raised, crashed, was killed, or Slurm ended it: no value
    INTERRUPTED = "interrupted"  # stopped by the sweep driver (Ctrl-C, scancel): no value; a resume runs it again
    # Stopped at a rung of the halving sweeper, its checkpoint saved: this attempt ended, with no result. Only the
    # sweeper that paused it runs it on (a promotion, from the checkpoint); a plain resume leaves it as it is.
    PAUSED = "paused"
    UNKNOWN = "unknown"          # its result.json says no status
    CORRUPT = "corrupt"          # its result.json cannot be read (a resume runs the job again)
    # Ended without a status: what its trackers are told when its session ended so (a single run), and the row of a
    # job of a launcher that keeps no record, with no result.json and nothing of it alive (`unrecorded_state`).
    ENDED = "ended"

    def is_ended(self: str | None) -> bool:
        """Whether the job has ended (by its record, or by its folder), whatever the way."""
        return self is not None and self not in _NOT_ENDED

    def is_success(self: str | None) -> bool:
        """Whether it ended with a result: a resume never runs it again. A diverged job is a result (same seed, same
        divergence), not an error, and a pruned one is the study's verdict (its trial is told PRUNED)."""
        return self in _SUCCESS

    def is_settled(self: str | None) -> bool:
        """Whether a resume leaves it as it is: a result, or paused (its promotion is the halving sweeper's call)."""
        return self in _SETTLED

    def is_failure(self: str | None) -> bool:
        """Whether it ended without a value: such jobs make a sweep exit non-zero (unless the launcher is told
        otherwise)."""
        return self in _FAILURE

    def is_live(self: str | None) -> bool:
        """Whether it is still in its launcher's hands (a Slurm job: in Slurm's queue)."""
        return self in _LIVE


_LIVE = frozenset((JobState.QUEUED, JobState.RUNNING))
_NOT_ENDED = _LIVE | {JobState.NOT_STARTED}
_SUCCESS = frozenset((JobState.COMPLETED, JobState.PRUNED, JobState.DIVERGED))
_SETTLED = _SUCCESS | {JobState.PAUSED}
_FAILURE = frozenset((JobState.FAILED, JobState.INTERRUPTED))
# The epoch at which a job of the halving sweeper pauses (its environment; unset: it trains to its last epoch).
STOP_EPOCH_ENV = "SWEEPIT_STOP_EPOCH"


class Recorder(_Word):
    """Who wrote a `result.json` that the job did not write itself (`recorded_by`)."""

    SESSION = "sweepit"                          # the job's session, for a task that wrote none
    LOCAL = "sweepit local launcher"
    SLURM = "sweepit slurm launcher"
    PACKED_DRIVER = "sweepit slurm launcher (packed)"
    PACKED_WORKER = "sweepit packed worker"
    OPTUNA_WORKER = "sweepit optuna worker"
    SWEEPER = "sweepit's Optuna sweeper, from the job's return value"


# Rows of the table a sweep prints at its end, and the default of `sweepit summary`, `report` and `status --rows`.
MAX_ROWS = 50
DIRECTIONS = ("maximize", "minimize")
DEFAULT_DIRECTION = "minimize"  # Optuna's default, and Hydra's Optuna plugin's
_NOTHING = object()
# The swept key that repeats a point (sweeps/scaling.yaml's, to average a shared machine's noise): no parameter.
REPEAT_KEY = "repeat"


def counts_text(counts: Mapping[str, int]) -> str:
    """Jobs counted by status, as every table and stop message tells them: `2 completed, 1 failed`."""
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def worst(direction: str) -> float:
    """The value a sweeper receives for a job that diverged: the worst one in `direction`."""
    return -math.inf if direction == "maximize" else math.inf


def objective_direction(*candidates: Any) -> str:
    """The first of `candidates` that is set (the sweeper's `direction`, then the job config's), else minimize: every
    part of sweepit that needs the direction asks this, with the same candidates, so that they cannot disagree."""
    for value in candidates:
        if value is not None and value != "":
            return str(value)
    return DEFAULT_DIRECTION


def sweep_direction(sweep_dir: Path, job_directions: Iterable[Any] = ()) -> str:
    """The direction a sweep directory's "best" is judged in: `objective_direction` of the study's (in
    `optuna_study.yaml`) and the jobs' (each `result.json` records its config's `direction`)."""
    return objective_direction((read_study_file(sweep_dir) or {}).get("direction"), *job_directions)


def direction_is_default(sweep_dir: Path, job_directions: Iterable[Any] = ()) -> bool:
    """Whether a sweep's "best" is judged in DEFAULT_DIRECTION because nobody chose one: the Optuna sweeper records
    `direction_set` in `optuna_study.yaml` (its `direction` is always written), and a job records its config's
    `direction` only when the config has one."""
    study = read_study_file(sweep_dir) or {}
    if "direction_set" in study:
        return not study["direction_set"]
    return all(d in (None, "") for d in [study.get("direction"), *job_directions])


def default_direction_line(metric: str) -> str:
    """The line under every "best" judged in the default direction: which key chooses it. sweepit cannot know whether
    a lower or a higher value of an app's number is better (a loss or an accuracy)."""
    return (f"warning: {DEFAULT_DIRECTION} is sweepit's default, as the config sets no `direction`: the lowest "
            f"{metric} is \"best\". Higher is better? Add `direction: maximize` (and `metric: NAME`) to the app's "
            "config.")


def sweeper_value(status: str | None, objective: Any = None, direction: str | None = None,
                  returned: Any = _NOTHING) -> Any:
    """What a launcher hands the sweeper for a job (`JobReturn.return_value`): what its task returned; when that is
    not known (the job died after writing its result), its recorded objective, or the worst value when it diverged.
    A job that failed or was interrupted gives None, as Hydra's sweepers would end the sweep on a FAILED return."""
    if JobState.is_failure(status):
        return None
    if returned is not _NOTHING:
        return returned
    if status == JobState.DIVERGED:
        return worst(direction or DEFAULT_DIRECTION)
    if status == JobState.COMPLETED:
        return objective
    return None


def objective_values(result: dict[str, Any], metrics: list[str] | None, n: int) -> list[float] | None:
    """A job's `n` objective values for a multi-objective study, from its `result.json`: each of `metrics` (the
    config's `metric` is `objective`; another a top-level number, one the task returned, else the last epoch's), or
    the numbers the task returned. None when a value is missing or not a finite number."""
    values: list[Any] = []
    final: dict[str, Any] = result["final"] if isinstance(result.get("final"), dict) else {}
    returned: dict[str, Any] = result["returned"] if isinstance(result.get("returned"), dict) else {}
    if metrics:
        values = [result.get("objective") if name == result.get("metric") else
                  result.get(name) if finite_number(result.get(name)) is not None else
                  returned[name] if name in returned else final.get(name) for name in metrics]
    elif isinstance(result.get("objectives"), list):
        values = list(result["objectives"])
    elif len(returned) == n:
        values = list(returned.values())  # a dict of n numbers the task returned, in its order
    numbers = [x for v in values if (x := finite_number(v)) is not None]
    return numbers if len(numbers) == len(values) == n else None


def measures_speed(rows: Iterable[JobRow], swept: list[str]) -> bool:
    """Whether the jobs differ in nothing but their device count (one swept key, whose value is each job's world
    size) and its repeats: a speed study such as sweeps/scaling.yaml, whose objective names no best job."""
    keys = [k for k in swept if k != REPEAT_KEY]
    if len(keys) != 1:
        return False
    sizes = set()
    for row in rows:
        size = row.result.get("world_size")
        if isinstance(size, int) and not isinstance(size, bool):
            if row.overrides.get(keys[0]) != str(size):
                return False
            sizes.add(size)
    return len(sizes) > 1


def speed_study_line(swept: list[str], metric: str) -> str:
    """What stands for the best job of a speed study (`measures_speed`)."""
    return (f"a speed study: the jobs differ only in {' and '.join(swept)}, so no job is best by {metric}; the "
            "scaling section of the report has their epoch time, speedup and efficiency")


def pareto_front(points: list[list[float]], directions: list[str]) -> list[int]:
    """Indices of the points no other point dominates (at least as good in every objective, better in one)."""
    signs = [1.0 if d == "minimize" else -1.0 for d in directions]
    keys = [[s * v for s, v in zip(signs, p, strict=True)] for p in points]

    def dominates(a: list[float], b: list[float]) -> bool:
        return all(x <= y for x, y in zip(a, b, strict=True)) and any(x < y for x, y in zip(a, b, strict=True))

    return [i for i, k in enumerate(keys) if not any(dominates(o, k) for j, o in enumerate(keys) if j != i)]


def as_number(value: Any) -> float | None:
    """`value` as a float when it is an int or a float (not a bool), else None."""
    return None if isinstance(value, bool) or not isinstance(value, int | float) else float(value)


def finite_number(value: Any) -> float | None:
    """`value` as a float when it is a finite number (as `as_number` reads one), else None."""
    number = as_number(value)
    return number if number is not None and math.isfinite(number) else None


def write_study_file(sweep_dir: Path, info: dict[str, Any]) -> Path:
    """`optuna_study.yaml`: the study's storage and name, its objective (`metric`, `direction`), sampler, pruner and
    space, and the single-run command prefix; read without Optuna."""
    path = SweepPaths(sweep_dir).study_file
    text = ("# The Optuna study of this sweep: optuna.load_study(study_name=..., storage=...); "
            "optuna-dashboard <storage>\n" + yaml.safe_dump(info, sort_keys=False))
    atomic_write(path, text)
    return path


def read_study_file(sweep_dir: Path) -> dict[str, Any] | None:
    """The record, or None for a sweep without a study (or an unreadable record)."""
    try:
        data = yaml.safe_load(SweepPaths(sweep_dir).study_file.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) and data.get("storage") and data.get("study_name") else None
