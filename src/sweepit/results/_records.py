"""How a job's record (`JobEntry`) is written in `sweep.json`, its journal and `sweep.live.json`: each fact once.
A job directory is written relative to the sweep directory, a path in its `extra` relative to the job directory
(`$/stdout.log`), and what most jobs share (their state, the sweep's settings each job's plan repeats) once, in the
sweep fields' `job_defaults`; a record holds what differs from them (`unset`: the shared `extra` keys it lacks).
Readers get each record whole again (`decode`), so nothing above this module sees the layout."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sweepit.results._status import JobState

if TYPE_CHECKING:
    from sweepit.results._manifest import JobEntry

DEFAULTS_KEY = "job_defaults"  # the sweep field that holds what the records share
_SAMPLED = 1000  # jobs looked at to choose the shared values (a value fewer jobs share is written per job, still right)
_NONE = object()
_IN_JOB = "$/"   # an `extra` path under the job's own directory; any other string that starts with `$` gets one more


def job_dict(j: JobEntry) -> dict[str, Any]:
    """The record with every field: what readers get."""
    return {"num": j.num, "overrides": j.overrides, "job_dir": j.job_dir, "state": j.state, "pid": j.pid,
            "started_at": j.started_at, "ended_at": j.ended_at, "extra": j.extra}


def _out(value: Any, job_dir: str) -> Any:
    if isinstance(value, str):
        if job_dir and value.startswith(job_dir + "/"):
            return _IN_JOB + value[len(job_dir) + 1:]
        if value.startswith("$"):
            return "$" + value
    return value


def _in(value: Any, job_dir: str) -> Any:
    if isinstance(value, str) and value.startswith("$"):
        return job_dir + "/" + value[len(_IN_JOB):] if value.startswith(_IN_JOB) else value[1:]
    return value


def choose_defaults(jobs: Mapping[int, JobEntry]) -> dict[str, Any]:
    """What more than half of the jobs share (a sample of them): the most common state, and each `extra` value."""
    nums = sorted(jobs)
    sample = [jobs[n] for n in nums[::max(1, len(nums) // _SAMPLED)]]
    if not sample:
        return {}
    states = Counter(str(j.state) for j in sample)
    values: Counter[tuple[str, type, Any]] = Counter()
    for j in sample:
        for key, value in j.extra.items():
            value = _out(value, j.job_dir)
            if value is None or isinstance(value, str | int | float | bool):
                values[(key, type(value), value)] += 1
    extra: dict[str, Any] = {}
    for (key, _, value), n in values.most_common():
        if n * 2 > len(sample) and key not in extra:
            extra[key] = value
    return {"state": states.most_common(1)[0][0], "extra": extra}


class RecordCodec:
    """The records of one sweep.json generation: `encode` writes a record in its layout, `decode` reads one whole."""

    def __init__(self, sweep_dir: str, defaults: Mapping[str, Any]) -> None:
        self.root = str(sweep_dir).rstrip("/") + "/"
        self.shared_state = str(defaults.get("state", JobState.QUEUED))
        extra = defaults.get("extra")
        self.extra: dict[str, Any] = dict(extra) if isinstance(extra, Mapping) else {}

    def encode(self, j: JobEntry) -> dict[str, Any]:
        record: dict[str, Any] = {"num": j.num, "overrides": j.overrides}
        job_dir = j.job_dir
        if job_dir:
            record["job_dir"] = job_dir[len(self.root):] if job_dir.startswith(self.root) else job_dir
        if j.state != self.shared_state:
            record["state"] = j.state
        for key in ("pid", "started_at", "ended_at"):
            if (value := getattr(j, key)) is not None:
                record[key] = value
        extra = {}
        shared = self.extra
        for key, value in j.extra.items():  # (a driver encodes one record at each change: kept to plain operations)
            if type(value) is str and (value[:1] == "$" or (job_dir and value.startswith(job_dir))):
                value = _out(value, job_dir)
            like = shared.get(key, _NONE)
            if like is _NONE or like.__class__ is not value.__class__ or like != value:  # (True == 1: not alike)
                extra[key] = value
        if extra:
            record["extra"] = extra
        unset = [key for key in self.extra if key not in j.extra]
        if unset:
            record["unset"] = unset
        return record

    def decode(self, record: dict[str, Any]) -> dict[str, Any]:
        job_dir = record.get("job_dir") or ""
        if job_dir and not job_dir.startswith("/"):
            job_dir = self.root + job_dir
        unset = record.get("unset") or ()
        extra = {k: v for k, v in self.extra.items() if k not in unset}
        given = record.get("extra")
        if isinstance(given, dict):
            extra.update(given)
        return {"num": record["num"], "overrides": record.get("overrides") or [], "job_dir": job_dir,
                "state": record.get("state", self.shared_state), "pid": record.get("pid"),
                "started_at": record.get("started_at"), "ended_at": record.get("ended_at"),
                "extra": {k: _in(v, job_dir) for k, v in extra.items()}}
