"""`sweep.live.json`: what `sweepit status` needs of a large sweep while its driver follows it, kept by that driver at
each change of its records: how many jobs are in each state, the Slurm arrays of the jobs queued or running, and the
records of the jobs status lists (the first `LIVE_ROWS` that did not finish, and every running one). A look at a
100,000-job sweep then reads a few dozen records, not every one. It names the sweep.json generation and the journal
length it describes: a reader that finds the records moved on since (or no live driver) reads them all instead."""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweepit.results._paths import SweepPaths
from sweepit.results._records import RecordCodec
from sweepit.results._status import MAX_ROWS, JobState

if TYPE_CHECKING:
    from sweepit.results._manifest import JobEntry

LIVE_ROWS = MAX_ROWS  # the unfinished jobs it holds: `sweepit status`'s default rows (more read every record)
_TRIES, _RETRY_S = 3, 0.01


def array_of(entry: JobEntry) -> str | None:
    """The Slurm array of a job submitted to Slurm (its `slurm_job_id` is `<array>_<index>` or `<job>`), else None."""
    job_id = entry.extra.get("slurm_job_id")
    return str(job_id).split("_", 1)[0] if job_id else None


class Tally:
    """The driver's count of its records as written: each job's recorded state and array, kept up to date by
    `update` with the jobs each write records (O(changes), not O(jobs))."""

    def __init__(self, jobs: Mapping[int, JobEntry]) -> None:
        self.recorded: dict[int, tuple[str, str | None]] = {}
        self.counts: Counter[str] = Counter()
        self.arrays: Counter[str] = Counter()   # the live jobs' arrays
        # The unfinished jobs: `open`; in job order, `order` from `head` on (with jobs finished since, skipped as met:
        # deleting each from the front of a 100,000-long list would move the rest), `in_order` the jobs it holds.
        self.open: set[int] = set()
        self.order: list[int] = []
        self.in_order: set[int] = set()
        self.head = 0
        self.running: set[int] = set()
        self.texts: dict[int, str] = {}          # the listed jobs' records as written, until they change
        self.fd: int | None = None               # sweep.live.json, open for the driver's writes
        self.n_bytes = 0                         # its length
        for num in sorted(jobs):
            self._add(num, jobs[num], at_end=True)

    def _add(self, num: int, entry: JobEntry, at_end: bool = False) -> None:
        state, array = str(entry.state), array_of(entry)
        self.recorded[num] = (state, array)
        self.counts[state] += 1
        if JobState.is_live(state) and array:
            self.arrays[array] += 1
        if not JobState.is_success(state):
            self.open.add(num)
            if num not in self.in_order:
                self.in_order.add(num)
                if at_end:
                    self.order.append(num)
                else:
                    i = bisect.bisect_left(self.order, num, self.head)
                    self.order.insert(i, num)
        if state == JobState.RUNNING:
            self.running.add(num)

    def _drop(self, num: int) -> None:
        state, array = self.recorded.pop(num)
        self.counts[state] -= 1
        if not self.counts[state]:
            del self.counts[state]
        if JobState.is_live(state) and array:
            self.arrays[array] -= 1
            if not self.arrays[array]:
                del self.arrays[array]
        self.open.discard(num)
        self.running.discard(num)

    def update(self, jobs: Mapping[int, JobEntry], written: Mapping[int, str]) -> None:
        """Count the records `written` (each as JSON) again."""
        for num, text in written.items():
            self.texts[num] = text
            if num in self.recorded:
                self._drop(num)
            if num in jobs:
                self._add(num, jobs[num])

    def take_file(self, other: Tally | None) -> None:
        """Write where `other` (the count of an earlier snapshot) wrote."""
        if other is not None:
            self.fd, self.n_bytes, other.fd = other.fd, other.n_bytes, None

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    __del__ = close  # a manifest let go of (a driver's sweep ended) closes its file

    def first_unfinished(self, n: int) -> list[int]:
        order, open_ = self.order, self.open
        while self.head < len(order) and order[self.head] not in open_:
            self.in_order.discard(order[self.head])
            self.head += 1
        if len(order) - self.head > 2 * len(open_) + 1000:  # mostly finished since: only the unfinished kept
            self.order = order = [num for num in order[self.head:] if num in open_]
            self.in_order, self.head = set(order), 0
        first: list[int] = []
        for i in range(self.head, len(order)):
            if (num := order[i]) in open_:
                first.append(num)
                if len(first) == n:
                    break
        return first

    def listed(self, jobs: Mapping[int, JobEntry], codec: RecordCodec) -> list[str]:
        """The records of the jobs status lists, in job order, as JSON."""
        nums = sorted(set(self.first_unfinished(LIVE_ROWS)) | self.running)
        for num in nums:
            if num not in self.texts:
                self.texts[num] = json.dumps(codec.encode(jobs[num]))
        if len(self.texts) > 2 * len(nums):
            self.texts = {n: self.texts[n] for n in nums}
        return [self.texts[n] for n in nums]


def write_live(sweep_dir: Path, generation: int, journal_bytes: int, tally: Tally, jobs: Mapping[int, JobEntry],
               codec: RecordCodec, updated_at: str) -> None:
    """Overwritten in place, not replaced: a rename at every change of a 100,000-job sweep costs its driver more than
    the journal's append. A look that reads it mid-write finds no JSON, or not this journal's length, and reads every
    record instead; so does one after a write that failed (the journal, the record of truth, says its own error)."""
    head = json.dumps({"generation": generation, "journal_bytes": journal_bytes, "updated_at": updated_at,
                       "n_jobs": len(tally.recorded), "counts": tally.counts, "arrays": tally.arrays})
    data = (head[:-1] + ', "jobs": [' + ", ".join(tally.listed(jobs, codec)) + "]}\n").encode()
    try:
        if tally.fd is not None and os.fstat(tally.fd).st_nlink == 0:  # deleted since: written again where it was
            tally.close()
        if tally.fd is None:
            tally.fd = os.open(SweepPaths(sweep_dir).live, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            tally.n_bytes = os.fstat(tally.fd).st_size
        os.pwrite(tally.fd, data, 0)
        if len(data) < tally.n_bytes:
            os.ftruncate(tally.fd, len(data))
        tally.n_bytes = len(data)
    except OSError:
        tally.close()


@dataclass
class Live:
    """`sweep.live.json` as read: the jobs counted by state and live array, and the records it holds (whole)."""

    n_jobs: int
    updated_at: str | None
    counts: Counter[str]
    arrays: Counter[str]
    jobs: list[dict[str, Any]]


def read_live(sweep_dir: Path, generation: Any, codec: RecordCodec) -> Live | None:
    """The live record when it describes the records on disk now (the snapshot of `generation` and the journal as
    long as it is), else None."""
    paths = SweepPaths(sweep_dir)
    for attempt in range(_TRIES):  # (the driver writes it just after each journal line: a look may fall between)
        if attempt:
            time.sleep(_RETRY_S)
        try:
            data = json.loads(paths.live.read_bytes())
            journal_bytes = os.stat(paths.journal).st_size
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("generation") == generation and data.get(
                "journal_bytes") == journal_bytes:
            break
    else:
        return None
    try:
        return Live(int(data["n_jobs"]), data.get("updated_at"), Counter(data["counts"]), Counter(data["arrays"]),
                    [codec.decode(job) for job in data["jobs"]])
    except (KeyError, TypeError, ValueError):
        return None
