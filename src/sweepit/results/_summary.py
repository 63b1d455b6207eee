"""Reads a sweep directory back: one row per job from its overrides and `result.json`, and the end-of-sweep text."""

from __future__ import annotations

import heapq
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sweepit.results._job_files import error_line, job_num, read_record, total_wall_time_s
from sweepit.results._manifest import iter_manifest, rerooter
from sweepit.results._overrides import (
    app_command,
    config_source,
    override_values,
    rerun_command,
    short_value,
    typed_overrides,
)
from sweepit.results._rungs import EpochSeconds, read_rungs
from sweepit.results._status import (
    MAX_ROWS,
    JobState,
    counts_text,
    default_direction_line,
    direction_is_default,
    finite_number,
    measures_speed,
    objective_values,
    pareto_front,
    read_study_file,
    speed_study_line,
    sweep_direction,
)
from sweepit.results._unread import UnreadKeys
from sweepit.results._unrecorded import new_look, unrecorded_state

# Columns shown for the final metrics, when a job has them.
KEY_METRICS = ("train_loss", "val_loss", "val_acc")
# One meaning everywhere (terminal, results.csv, HTML): the mean epoch time with the first (warm-up) epoch left
# out, as the courses time it; result.json's `epoch_time_s_mean`.
EPOCH_TIME = "epoch_time_s"


@dataclass
class JobRow:
    num: int
    job_dir: Path
    overrides: dict[str, str]
    status: str                      # a result.json status, else the job's state (`job_row`)
    objective: float | None = None
    result: dict[str, Any] = field(default_factory=dict)
    note: str = ""                   # what was wrong with the job's files, if anything

    @property
    def final(self) -> dict[str, Any]:
        final = self.result.get("final")
        return final if isinstance(final, dict) else {}

    def add_note(self, note: str) -> None:
        self.note = f"{self.note}; {note}" if self.note else note

    def typed(self) -> list[str]:
        """The job's overrides as typed (pasteable: `+model.hidden=64`), else `key=value` from its row."""
        return typed_overrides(self.job_dir) or [f"{k}={v}" for k, v in self.overrides.items()]


Row = TypeVar("Row", bound=JobRow)


def job_dirs(sweep_dir: Path) -> list[tuple[Path, int]]:
    """The directories named `<num>_...` directly under `sweep_dir` with their numbers, unordered (one directory
    read, no stat a job)."""
    base = Path(sweep_dir)
    with os.scandir(base) as entries:
        return [(base / e.name, n) for e in entries if (n := job_num(Path(e.name))) is not None and e.is_dir()]


def sweep_jobs(sweep_dir: Path, head: dict[str, Any], listed: Iterable[dict[str, Any]]
               ) -> Iterator[tuple[int, Path | None, dict[str, Any] | None]]:
    """Every job of a sweep once, in job order: its number, its folder (None while it has none) and its sweep.json
    record (`listed`, in job order, under its sweep fields `head`; None where sweep.json does not list it). The one
    map of jobs to folders: a listed job is in the folder its launcher recorded, whatever `hydra.sweep.subdir` made of
    it; a `<num>_...` folder that sweep.json does not list is a job of a launcher that keeps no record (Hydra's)."""
    sweep_dir = Path(sweep_dir)
    new_look()  # (which processes hold a job's files: once a read)
    moved = rerooter(head.get("sweep_dir"), sweep_dir)
    dirs = sorted(job_dirs(sweep_dir), key=lambda d: d[1])
    i = 0
    for entry in listed:
        num = entry["num"]
        while i < len(dirs) and dirs[i][1] < num:
            yield dirs[i][1], dirs[i][0], None
            i += 1
        named = None  # a folder named for the job: where it is when its launcher has not recorded one yet
        while i < len(dirs) and dirs[i][1] == num:
            named = named or dirs[i][0]
            i += 1
        recorded = moved(entry.get("job_dir"))
        folder = Path(recorded) if recorded and isinstance(recorded, str) else named
        yield num, folder if folder is not None and os.path.isdir(folder) else None, entry
    for path, num in dirs[i:]:
        yield num, path, None


def job_folders(sweep_dir: Path) -> dict[int, Path | None]:
    """Every job's number and folder (`sweep_jobs`)."""
    return {num: folder for num, folder, _ in sweep_jobs(sweep_dir, *iter_manifest(sweep_dir))}


def job_row(kind: type[Row], num: int, folder: Path | None, entry: dict[str, Any] | None,
            read: Callable[[Row], object] | None = None, epochs: int | None = None) -> Row:
    """A job's row (`sweep_jobs`' triple) of type `kind`, with sweep.json's overrides when it lists the job (the
    launcher's: a YAML parse a job saved). Without a result.json the launcher's state says where the job stands;
    without a record either, a job with a folder has started (Hydra makes it as the job starts), and runs while
    something of it may be alive (`unrecorded_state`). `epochs`: what a paused job would have trained to (its halving
    sweep's plan), for its note."""
    given = entry.get("overrides") if entry else None
    if not (isinstance(given, list) and given) and folder is not None:
        given = typed_overrides(folder)
    overrides = override_values(str(o) for o in given or ())
    # (sweep_jobs yields no folder only for a job sweep.json lists, with the folder recorded for it)
    row = kind(num=num, job_dir=folder or Path(str((entry or {}).get("job_dir") or "")), overrides=overrides, status="")
    if folder is not None:
        record = read_record(folder)
        if record.status is not None:
            row.status, row.result, row.objective = record.status, record.result, record.objective
            row.note = record.problem
            if JobState.is_failure(row.status) and record.error:
                row.note = error_line(record.error)
            elif record.status == JobState.PAUSED and not row.note:  # where the halving sweeper left it
                done = record.result.get("epochs_completed")
                row.note = f"paused at {done} of {epochs} epochs" if epochs else f"paused at epoch {done}"
            elif record.attempts > 1 and not row.note:
                row.note = f"{record.attempts} attempts"  # its time is theirs together
        if read is not None:
            read(row)
    if not row.status:
        state = str(entry.get("state") or "") if entry else ""
        row.status = state or (unrecorded_state(folder) if folder is not None else JobState.QUEUED)
        if JobState.is_ended(row.status):  # it ended, by its record or its folder, but left no result.json
            row.add_note("no result.json")
    return row


def collect(sweep_dir: Path) -> list[JobRow]:
    """Every job of the sweep (`sweep_jobs`), in job-number order."""
    return [job_row(JobRow, *job) for job in sweep_jobs(sweep_dir, *iter_manifest(sweep_dir))]


def best_row(rows: list[JobRow], direction: str) -> JobRow | None:
    """The completed job with the best finite objective; the first one on ties, as Optuna's journal storage picks its
    best trial."""
    scored = [r for r in rows if r.status == JobState.COMPLETED and finite_number(r.objective) is not None]
    if not scored:
        return None
    pick = max if direction == "maximize" else min
    return pick(scored, key=lambda r: r.objective if r.objective is not None else 0.0)


class _Keys:
    """The override keys of jobs seen one at a time (`add`), and which of them are swept: their value differs between
    jobs (a constant override is printed once, not per row); every key of a single job."""

    def __init__(self) -> None:
        self.n = 0
        self.first: dict[str, str] = {}
        self.keys: dict[str, None] = {}
        self.varying: set[str] = set()

    def add(self, overrides: dict[str, str]) -> None:
        self.n += 1
        if self.n == 1:
            self.first = dict(overrides)
        self.keys.update(dict.fromkeys(overrides))
        self.varying.update(k for k, v in overrides.items() if v != self.first.get(k))
        self.varying.update(k for k in self.first if k not in overrides)

    def swept(self) -> list[str]:
        return list(self.keys) if self.n == 1 else [k for k in self.keys if k in self.varying]


def swept_keys(rows: list[JobRow]) -> list[str]:
    keys = _Keys()
    for row in rows:
        keys.add(row.overrides)
    return keys.swept()


def fixed_overrides(rows: list[JobRow], swept: list[str]) -> dict[str, str]:
    """The overrides every job shares (`swept`: `swept_keys(rows)`)."""
    varying = set(swept) if len(rows) > 1 else set()
    return {k: v for k, v in (rows[0].overrides.items() if rows else []) if k not in varying}


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


def _seconds(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else "-"


def format_table(rows: list[JobRow], keys: list[str] | None = None) -> str:
    """`keys`: the override columns (default: the swept keys)."""
    keys = swept_keys(rows) if keys is None else keys
    metrics = [m for m in KEY_METRICS if any(m in r.final for r in rows)]
    timed = any("epoch_time_s_mean" in r.result for r in rows)
    header = ["job", *keys, "status", "objective", *metrics, *([EPOCH_TIME] if timed else []), "time_s", "note"]
    body = [
        [str(r.num), *(short_value(r.overrides.get(k, "")) for k in keys), r.status, _fmt(r.objective),
         *(_fmt(r.final.get(m)) for m in metrics), *([_fmt(r.result.get("epoch_time_s_mean"))] if timed else []),
         _seconds(total_wall_time_s(r.result)), r.note]
        for r in rows
    ]
    return "\n".join(aligned(header, body))


def aligned(header: list[str], body: list[list[str]], rule: bool = True) -> list[str]:
    """The lines of a terminal table: columns as wide as their widest cell, two spaces apart; `rule`: dashes under
    the header."""
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in [header, *body]]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def summarize(sweep_dir: Path, max_rows: int = MAX_ROWS) -> str:
    """The text printed at the end of a sweep: table, counts by status, best job and the command that trains it
    again. Every job counts, those sweep.json lists without a directory too. Of more than `max_rows` jobs (0: no
    limit) it shows the best `max_rows`; the jobs are read one at a time and only the rows shown are kept, so that
    the summary of a sweep of 100,000 jobs holds a few hundred rows."""
    study = read_study_file(sweep_dir) or {}
    directions = study.get("directions")
    multi = isinstance(directions, list) and len(directions) > 1

    manifest, listed = iter_manifest(sweep_dir)
    tally = _Tally(max_rows, multi)
    plan = read_rungs(sweep_dir)
    spent = EpochSeconds(plan) if plan is not None else None
    for job in sweep_jobs(sweep_dir, manifest, listed):
        row = job_row(JobRow, *job, epochs=plan.epochs if plan is not None else None)
        tally.add(row)
        if spent is not None:
            spent.add(job[1])
    if not tally.n:
        return f"No jobs found in {sweep_dir}."
    direction = sweep_direction(sweep_dir, [tally.direction])
    metric = tally.metric or "objective"
    shown = tally.shown(direction)
    keys = tally.overrides.swept()
    parts = []
    if len(shown) < tally.n:
        parts.append(f"the best {len(shown)} of {tally.n} jobs by {metric} ({direction}); "
                     f"`sweepit summary {sweep_dir} --rows 0` lists every job:")
    parts += [format_table(shown, keys), "",
              f"{tally.n} jobs: {counts_text(tally.counts)}"]
    if spent is not None:
        parts.append(spent.line())
    fixed = {k: v for k, v in tally.overrides.first.items() if k not in set(keys)}
    if fixed and tally.n > 1:
        parts.append("same in every job: " + " ".join(f"{k}={v}" for k, v in fixed.items()))
    parts += tally.unread.lines()
    best: JobRow | None = None
    if multi:
        assert isinstance(directions, list)
        parts += pareto_lines(tally.completed, directions, study.get("metrics") or None)
    elif measures_speed(shown, keys):
        parts.append(speed_study_line(keys, metric))
    else:
        best = tally.best(direction)
        if best is not None:
            typed = best.typed()
            parts.append(f"best ({direction} {metric}): job {best.num} = {_fmt(best.objective)}  [{' '.join(typed)}]")
            if direction_is_default(sweep_dir, [tally.direction]):
                parts.append(default_direction_line(metric))
            source = config_source(sweep_dir, [best.job_dir])
            parts.append(f"reproduce: {rerun_command(app_command(manifest, sweep_dir), source, typed, keys)}")
    if tally.weights:  # a sweep with no best job named (a speed study, a Pareto front) has none to keep
        keep = (f"`sweepit clean {sweep_dir}` keeps only the best job's" if best is not None else
                f"`sweepit clean {sweep_dir} --all` deletes them")
        parts.append(f"weights: {size_text(sum(tally.weights))} in {len(tally.weights)} jobs (model_*.pt); {keep}")
    parts.append(f"sweep directory: {sweep_dir}")
    return "\n".join(parts)


class _Tally:
    """What `summarize` needs of every job, gathered one job at a time: counts, the swept keys and the rows to show:
    the `limit` best either way (the direction is known only at the end) and the first `limit` without an objective
    (0: every row)."""

    def __init__(self, limit: int, multi: bool) -> None:
        self.limit, self.multi = limit, multi
        self.n = 0
        self.counts: dict[str, int] = {}
        self.metric: str | None = None
        self.direction: str | None = None
        self.overrides = _Keys()
        self.weights: list[int] = []
        self.unscored: list[tuple[int, JobRow]] = []  # (its place, the row) of the first `limit` without an objective
        self.top: dict[str, list[tuple[float, int, JobRow]]] = {"maximize": [], "minimize": []}  # heaps
        self.completed: list[JobRow] = []       # multi-objective: every completed job (its Pareto front needs all)
        self.unread = UnreadKeys()

    def add(self, row: JobRow) -> None:
        self.n += 1
        self.counts[row.status] = self.counts.get(row.status, 0) + 1
        result = row.result
        if self.metric is None and "metric" in result:
            self.metric = str(result["metric"])
        if self.direction is None and result.get("direction") not in (None, ""):
            self.direction = result["direction"]
        self.overrides.add(row.overrides)
        self.unread.add(row)
        weights = result.get("weights")
        if isinstance(weights, dict) and weights:
            self.weights.append(sum(n for n in weights.values() if isinstance(n, int)))
        if self.multi and row.status == JobState.COMPLETED:
            self.completed.append(row)
        objective = finite_number(row.objective) if row.status == JobState.COMPLETED else None
        if objective is None:
            if not self.limit or len(self.unscored) < self.limit:
                self.unscored.append((self.n, row))
            return
        for direction, sign in (("maximize", 1.0), ("minimize", -1.0)):
            # the heap's smallest is the worst kept: lower value, then the later job
            entry, heap = (sign * objective, -self.n, row), self.top[direction]
            if not self.limit or len(heap) < self.limit:
                heapq.heappush(heap, entry)
            elif entry[:2] > heap[0][:2]:
                heapq.heapreplace(heap, entry)

    def ranked(self, direction: str) -> list[tuple[int, JobRow]]:
        """The kept scored rows with their places, best first (the earlier job first on a tie, as `best_row`)."""
        return [(-n, row) for _, n, row in sorted(self.top[direction], key=lambda e: e[:2], reverse=True)]

    def shown(self, direction: str) -> list[JobRow]:
        """Every row in job order when all were kept, else the best ones first."""
        kept = self.ranked(direction) + self.unscored
        if self.limit and self.n > self.limit:
            return [row for _, row in kept[:self.limit]]
        return [row for _, row in sorted(kept, key=lambda e: e[0])]

    def best(self, direction: str) -> JobRow | None:
        ranked = self.ranked(direction)
        return ranked[0][1] if ranked else None


def size_text(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:.1f} MB" if n_bytes >= 1e5 else f"{n_bytes / 1e3:.1f} kB"


def pareto_lines(rows: list[JobRow], directions: list[str], metrics: list[str] | None) -> list[str]:
    """The completed jobs on the Pareto front of a multi-objective study, with their values."""
    names = metrics or [f"value {i}" for i in range(len(directions))]
    scored = [(r, v) for r in rows if r.status == JobState.COMPLETED
              and (v := objective_values(r.result, metrics, len(directions))) is not None]
    front = [scored[i] for i in pareto_front([v for _, v in scored], directions)]
    head = f"Pareto front ({', '.join(f'{d} {n}' for d, n in zip(directions, names, strict=False))}): "
    if not front:
        return [head + "no completed job yet"]
    lines = [head + f"{len(front)} job(s)"]
    for row, values in front:
        args = " ".join(row.typed())
        shown = ", ".join(f"{n}={_fmt(v)}" for n, v in zip(names, values, strict=False))
        lines.append(f"  job {row.num}: {shown}  [{args}]")
    return lines
