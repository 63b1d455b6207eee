"""`sweep.journal`: the job records that changed since `sweep.json` was last written whole, one appended line each,
instead of rewriting every job's record at each job's start and end (O(N^2) over a sweep). Once it has grown as large
as the snapshot (`compact_now`), the manifest is written whole again and the journal starts afresh. Its first line
names the snapshot's generation it continues: a journal of another one (the driver killed between the two writes) was
folded in already; a line cut short (killed mid-write) is skipped, and the next writer writes the manifest whole."""

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


def append_records(sweep_dir: Path, jobs: list[str], at: str) -> int | None:
    """Append one line per job record (`jobs`: each as JSON), in one write; the bytes written, or None when there is
    no journal to append to (then the manifest is to be written whole)."""
    tail = ', "at": ' + json.dumps(at) + "}\n"
    text = "".join('{"job": ' + job + tail for job in jobs).encode()
    path = SweepPaths(sweep_dir).journal
    try:
        # (not open(path, "ab"), which would create a journal that is gone: the manifest is then written whole)
        with open(os.open(path, os.O_WRONLY | os.O_APPEND), "wb") as f:
            f.write(text)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _clear(e, path) from e
    return len(text)


def compact_now(journal_bytes: int, snapshot_bytes: int) -> bool:
    """Whether to write the manifest whole instead of appending: the journal is as large as its snapshot."""
    return journal_bytes >= max(MIN_COMPACT_BYTES, snapshot_bytes)
