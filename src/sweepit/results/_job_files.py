"""A job's directory and what a job leaves there: `metrics.jsonl` (one object per epoch) and `result.json`, its
record (`JobRecord`). Both are written atomically, so a killed job never leaves half a file. `JobOutcome`: how a job
ended, as its process or its driver tells it."""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweepit._files import atomic_write
from sweepit.results._paths import METRICS_FILE, RESULT_FILE, STDERR_LOG, STDOUT_LOG, JobPaths
from sweepit.results._status import JobState, Recorder, as_number

# How long a job seen ended without result.json is given for its own to show up before a record of its death is
# written: on a shared file system a file another node wrote a moment ago can take a second or two to appear.
RESULT_GRACE_S = 2.0
# What each run of a job leaves under its own name; a job run again first renames its last run's to attempt n's
# (`result.<n>.json`, `stdout.<n>.log`), so that the plain names are always the latest attempt's.
ATTEMPT_FILES = (RESULT_FILE, STDOUT_LOG, STDERR_LOG)

# A job directory's name, in bytes: NAME_MAX (255 on Linux's file systems, Lustre's and GPFS's) less room for a
# suffix a tool may add (`.tmp`, `.orig`, a copy's ` (1)`).
MAX_JOB_DIR_NAME = 200
_HASH_LEN = 10


def job_dir_name(num: int, overrides: str) -> str:
    """The directory name of job `num` whose overrides read `overrides` (`a=1,b=x`): one level under the sweep (`/`
    and `%` quoted), at most MAX_JOB_DIR_NAME bytes (cut, with a hash of the whole, so two long names never meet);
    the same every time, so that a resumed sweep finds its jobs again."""
    safe = "".join(urllib.parse.quote(c, safe="") if c in "/%" or not c.isprintable() else c for c in overrides)
    name = f"{num}_{safe}"
    encoded = name.encode()
    if len(encoded) <= MAX_JOB_DIR_NAME:
        return name
    digest = hashlib.sha256(encoded).hexdigest()[:_HASH_LEN]
    head = encoded[:MAX_JOB_DIR_NAME - _HASH_LEN - 1].decode(errors="ignore")  # never half a character
    return f"{head}~{digest}"


def job_num(job_dir: Path) -> int | None:
    """The number of a job's directory (`<num>_...`), or None for any other entry of a sweep directory."""
    head = job_dir.name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def _jsonable(value: Any) -> Any:
    """Non-finite floats become null: JSON has no NaN or Infinity, and browsers refuse them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def returned_fields(returned: Any) -> dict[str, Any]:
    """What a task's return value puts in its `result.json`, the one reading of a return value: a number is the
    `objective`, numbers the `objectives` of a multi-objective study, a dict of numbers `returned` metrics (that
    `hydra.sweeper.metrics` may name); anything else is `returned` as text (the job completed, with no objective)."""
    if returned is None:
        return {}
    if (value := as_number(returned)) is not None:
        return {"objective": value}
    if isinstance(returned, list | tuple) and returned and all(as_number(v) is not None for v in returned):
        return {"objectives": [float(v) for v in returned]}
    if isinstance(returned, dict) and returned and all(as_number(v) is not None for v in returned.values()):
        return {"returned": {str(k): float(v) for k, v in returned.items()}}
    return {"returned": repr(returned)[:200]}


def attempt_file(name: str, attempt: int) -> str:
    """`stdout.1.log`: attempt 1's `stdout.log`."""
    stem, _, suffix = name.rpartition(".")
    return f"{stem}.{attempt}.{suffix}"


def earlier_attempts(job_dir: Path | str) -> int:
    """How many runs of the job came before its latest."""
    n = 0
    while any(os.path.lexists(os.path.join(job_dir, attempt_file(name, n + 1))) for name in ATTEMPT_FILES):
        n += 1
    return n


def with_attempts(job_dir: Path | str, result: dict[str, Any]) -> dict[str, Any]:
    """`result` of a job that ran before with its `attempts` (this one included) and `total_wall_time_s` (an earlier
    run without a readable record counts 0); a job run once has neither."""
    n = earlier_attempts(job_dir)
    if n == 0:
        return result
    walls = [as_number(result.get("wall_time_s")),
             *(read_record(job_dir, attempt_file(RESULT_FILE, attempt)).wall_time_s for attempt in range(1, n + 1))]
    known = [w for w in walls if w is not None]
    return {**result, "attempts": n + 1, **({"total_wall_time_s": sum(known)} if known else {})}


def start_clean(job_dir: Path) -> None:
    """A job run again starts without its last run's record (kept, with its logs, as an attempt's: a stale failed
    result must not stand for the new attempt) and metrics (a resumed run restores them from its checkpoint)."""
    job_dir = Path(job_dir)
    # A Slurm job's logs are links: one to a log that never came (a job cancelled while queued) is no attempt.
    last = [name for name in ATTEMPT_FILES if (job_dir / name).exists()]
    if last:
        attempt = earlier_attempts(job_dir) + 1
        for name in last:
            os.replace(job_dir / name, job_dir / attempt_file(name, attempt))
    (job_dir / METRICS_FILE).unlink(missing_ok=True)


class ResultGrace:
    """Which jobs seen ended without a result have waited `grace_s` for it since first seen so: only those get a
    record of their death (the Slurm follower's rule across its polls, and `sweepit status`'s)."""

    def __init__(self, grace_s: float = RESULT_GRACE_S) -> None:
        self.grace_s = grace_s
        self._since: dict[int, float] = {}

    def over(self, num: int, now: float | None = None) -> bool:
        """The first call starts job `num`'s clock."""
        now = time.monotonic() if now is None else now
        return now - self._since.setdefault(num, now) >= self.grace_s

    def wait_s(self) -> float:
        """Until every job seen so far has had its grace."""
        now = time.monotonic()
        return max([0.0, *(since + self.grace_s - now for since in self._since.values())])


def read_result(job_dir: Path, name: str = RESULT_FILE) -> dict[str, Any] | None:
    """The job's result (`name`: an earlier attempt's), or None when it has none yet; ValueError when corrupt."""
    path = os.path.join(job_dir, name)  # (no pathlib: a report reads 100,000 of them)
    try:
        with open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, but holds {type(data).__name__}.")
    return data


# A job's error on one line (a table's note, the end-of-sweep failure list, a log line) shows at most this many
# characters, its fix included.
ERROR_LINE_CHARS = 400
FIX = "Fix:"  # what opens the fix of a message of sweepit's (the rule, the value, then the fix)


def error_line(error: str, limit: int = ERROR_LINE_CHARS) -> str:
    """`error` as one line for a table, a list or a log: its first line, and its fix (from `Fix:`, on any line)
    whole. A longer one loses the middle, where a message holds details: its rule and its value stay."""
    lines = error.strip().splitlines()
    if not lines:
        return ""
    head, fix = lines[0], ""
    at = head.find(FIX)
    if at >= 0:
        head, fix = head[:at].rstrip(), head[at:]
    else:
        fix = next((line[line.index(FIX):].rstrip() for line in lines[1:] if FIX in line), "")
    room = max(limit - len(fix) - 1, limit // 4) if fix else limit
    if len(head) > room:
        tail = room // 3
        head = f"{head[:room - tail - 3].rstrip()} … {head[-tail:].lstrip()}"
    return f"{head} {fix}".strip()


def tail_lines(path: Path | str | None, n_lines: int, max_bytes: int = 1 << 16) -> str:
    """Empty when there is no log."""
    if n_lines <= 0 or not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-n_lines:])


@dataclass
class JobRecord:
    """What a job left in its `result.json`, as every reader and writer sees it (`read_record`, `write_result`). Its
    facts are read from `result`, the file's keys as written (an app's own among them), so that any record reads."""

    status: str | None               # a JobState (or an app's own word); None: no result.json yet
    result: dict[str, Any] = field(default_factory=dict)  # the file's keys (status, objective, error, times, ...)
    problem: str = ""                # why it cannot be read

    @property
    def objective(self) -> float | None:
        return as_number(self.result.get("objective"))

    @property
    def error(self) -> str:
        return str(self.result.get("error") or "")

    @property
    def wall_time_s(self) -> float | None:
        """This attempt's (`total_wall_time_s`: all of them)."""
        return as_number(self.result.get("wall_time_s"))

    @property
    def recorded_by(self) -> str | None:
        """A `Recorder` when sweepit wrote the record for the job; None when the job wrote it."""
        value = self.result.get("recorded_by")
        return None if value is None else str(value)

    @property
    def attempts(self) -> int:
        n = self.result.get("attempts")
        return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1

    @property
    def ended(self) -> bool:
        """Whether the record says how the job ended: one that cannot be read, or says no status, is no record."""
        return self.status not in (None, "", JobState.CORRUPT, JobState.UNKNOWN)


@dataclass(slots=True)
class JobOutcome:
    """How a job ended, as its process sends it back (a job that dies first sends nothing: the driver looks at how) or
    its driver learns it: its status (None: not followed, `wait=false`), what its task returned (`has_returned`: it
    did; a forked job sends the repr of a value that does not pickle), what it raised, and where it ran."""

    status: str | None               # completed | pruned | failed | interrupted (a Slurm job: any record's status)
    returned: Any = None
    has_returned: bool = False       # False: it did not return (it failed, or was killed first)
    error: str = ""                  # `Type: message` of what the job raised
    traceback: str = ""
    working_dir: str | None = None   # Hydra's JobReturn's
    task_name: str | None = None
    raised: BaseException | None = None  # in the job's own process, to raise again; never sent back


def write_result(job_dir: Path | str, record: JobRecord | dict[str, Any], *, replace: bool = True,
                 stderr_tail: Callable[[], str] | None = None,
                 retell: Callable[[JobRecord], bool] | None = None) -> str:
    """The one writer of `result.json`; returns the status that stands. `replace=True`: the record is the job's whole
    story (the job's own, or of a job that never ran). `replace=False`: a watcher's record of the job's end, with the
    merge rules: the job's own record wins, however late it came (one that says no status is replaced); a failed
    record gets `stderr_tail()` (the job's session's too); an own record that `retell` accepts (its stop by Slurm's
    signal) takes this record's facts on top, its words kept as `job_error`."""
    job_dir = Path(job_dir)
    new = dict(record.result if isinstance(record, JobRecord) else record)
    status = str(new.get("status", JobState.UNKNOWN))
    own = JobRecord(None) if replace else read_record(job_dir)
    if own.ended and not (retell is not None and retell(own)):
        if stderr_tail is not None and JobState.is_failure(own.status) and own.recorded_by == Recorder.SESSION \
                and "stderr_tail" not in own.result:
            _write(job_dir, {**own.result, "stderr_tail": stderr_tail()})
        return str(own.status)
    if stderr_tail is not None and JobState.is_failure(status) and "stderr_tail" not in new:
        new["stderr_tail"] = stderr_tail()
    if own.ended:  # retold
        new = {**own.result, **({"job_error": own.error} if own.error else {}), **new}
    if not _write(job_dir, new, replace=replace or own.status is not None):
        return read_record(job_dir).status or status  # the job's own, which came meanwhile
    return status


def _write(job_dir: Path, result: dict[str, Any], replace: bool = True) -> bool:
    """`replace=False`: only where there is none, in one step; False when one was there."""
    text = json.dumps(_jsonable(with_attempts(job_dir, result)), indent=2, sort_keys=True) + "\n"
    try:
        atomic_write(job_dir / RESULT_FILE, text, replace=replace)
    except FileExistsError:
        return False
    return True


def total_wall_time_s(result: dict[str, Any]) -> float | None:
    return as_number(result.get("total_wall_time_s", result.get("wall_time_s")))


def read_record(job_dir: Path | str | None, name: str = RESULT_FILE) -> JobRecord:
    """The one reading rule (`name`: an earlier attempt's record): a result.json that cannot be read is CORRUPT, with
    the reason; one without a status is UNKNOWN; no directory or no file is status None."""
    if job_dir is None:
        return JobRecord(None)
    try:
        result = read_result(Path(job_dir), name)
    except (ValueError, OSError) as e:
        return JobRecord(JobState.CORRUPT, problem=f"{RESULT_FILE} unreadable: {e}")
    if result is None:
        return JobRecord(None)
    status = str(result.get("status", JobState.UNKNOWN))
    return JobRecord(_STATUS_OF.get(status, status), result)


_STATUS_OF: dict[str, str] = {s.value: s for s in JobState}


def write_metrics(job_dir: Path, rows: list[dict[str, Any]]) -> None:
    """`metrics.jsonl`, one line per epoch, rewritten whole and atomically at each epoch (epochs are few): a killed
    job never leaves half a line."""
    atomic_write(JobPaths(job_dir).metrics, "".join(json.dumps(_jsonable(r)) + "\n" for r in rows))


def read_metrics(job_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    try:
        return parse_metrics(JobPaths(job_dir).metrics.read_text().splitlines())
    except FileNotFoundError:
        return [], []


def parse_metrics(lines: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of `metrics.jsonl`'s `lines`, and a note for each line that is not a JSON object."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            notes.append(f"{METRICS_FILE} line {i} is not JSON ({e.msg})")
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            notes.append(f"{METRICS_FILE} line {i} is not a JSON object")
    return rows, notes
