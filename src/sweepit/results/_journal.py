"""`sweep.journal`: the job records that changed since `sweep.json` was last written whole.

A driver records a job's start and end as one appended line (the job's whole record, as in `sweep.json`),
instead of rewriting a manifest that holds every job: rewriting it at each of N jobs' starts and ends costs
O(N^2) over a sweep (100,000 jobs: 200,000 rewrites of a 25 MB file). Once the journal has grown as large
as the snapshot it continues (`compact_now`), the manifest is written whole again and the journal starts
afresh, so writing costs at most about twice the bytes of the changes, and reading at most twice the snapshot.

Every reader folds the journal into the snapshot: the last line of a job wins. The journal's first line
names the generation of the snapshot it continues; a journal of another generation (the driver was killed
between writing a new snapshot and starting its journal) was folded in already and is ignored. A line cut
short (the driver killed mid-write) is skipped; the next writer then writes the manifest whole first.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweepit._files import _clear, atomic_write
from sweepit.results._paths import SweepPaths

MIN_COMPACT_BYTES = 1 << 20  # below this the journal is not compacted (a small sweep's writes stay appends)


@dataclass
class Journal:
    """What a reader found in `sweep.journal` for the snapshot of `generation`."""

    records: list[dict[str, Any]] = field(default_factory=list)  # job records, oldest first
    updated_at: str | None = None    # the time of the last record
    n_bytes: int = 0
    appendable: bool = False         # it continues the snapshot, whole: a writer may append to it


def read_journal(sweep_dir: Path, generation: int) -> Journal:
    """The records that continue the snapshot of `generation` (none when the journal continues another one)."""
    try:
        with open(SweepPaths(sweep_dir).journal, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return Journal()
    lines = data.split(b"\n")
    try:
        head = json.loads(lines[0])
    except ValueError:
        return Journal(n_bytes=len(data))
    if not isinstance(head, dict) or head.get("generation") != generation:
        return Journal(n_bytes=len(data))  # stale: the snapshot holds what it says, and more
    journal = Journal(n_bytes=len(data), appendable=data.endswith(b"\n"))
    for line in lines[1:]:
        if not line:
            continue
        try:
            record = json.loads(line)
            job = record["job"]
        except (ValueError, KeyError, TypeError):
            journal.appendable = False  # cut short: the next writer starts from a whole manifest
            continue
        if isinstance(job, dict) and isinstance(job.get("num"), int):
            journal.records.append(job)
            journal.updated_at = record.get("at", journal.updated_at)
    return journal


def start_journal(sweep_dir: Path, generation: int) -> int:
    """An empty journal that continues the snapshot of `generation` (replacing the old one in one step)."""
    head = json.dumps({"generation": generation}) + "\n"
    atomic_write(SweepPaths(sweep_dir).journal, head, fsync=False)
    return len(head)


def append_records(sweep_dir: Path, jobs: list[dict[str, Any]], at: str) -> int | None:
    """Append one line per job record, in one write; the bytes written, or None when there is no journal to
    append to (then the manifest is to be written whole)."""
    text = "".join(json.dumps({"job": job, "at": at}) + "\n" for job in jobs).encode()
    path = SweepPaths(sweep_dir).journal
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _clear(e, path) from e
    try:
        view = memoryview(text)
        while view:
            view = view[os.write(fd, view):]
    except OSError as e:
        raise _clear(e, path) from e
    finally:
        os.close(fd)
    return len(text)


def compact_now(journal_bytes: int, snapshot_bytes: int) -> bool:
    """Whether to write the manifest whole instead of appending: the journal is as large as its snapshot."""
    return journal_bytes >= max(MIN_COMPACT_BYTES, snapshot_bytes)
