"""The results table (one row per job) as CSV and terminal text, and the command that reproduces a job."""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass
from typing import Any

from sweepit.reporting._report_data import JobReport, Sweep, best_first, clip
from sweepit.results import (
    aligned,
    default_direction_line,
    finite_number,
    rerun_command,
    short_value,
    speed_study_line,
)

# Final metrics shown first, in this order; other scalars follow in the order the training loop logs them.
KEY_METRICS = ("train_loss", "train_acc", "val_loss", "val_acc")
# Kept out of the final-metric columns: the epoch number, and epoch time, which has its own (mean) column.
_NOT_METRICS = ("epoch", "epoch_time_s")
_LAST = ("samples_per_s",)
# Rows of a table on a page: a 100,000-row table would be a 150 MB index.html that no browser opens. Beyond, the
# best rows by objective (in job order) are listed, and results.csv has every row.
MAX_PAGE_ROWS = 1000


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Any]]             # raw values: str, int, float or None
    best: int | None = None           # index of the best job's row


def final_metric_keys(jobs: list[JobReport]) -> list[str]:
    keys: list[str] = []
    for job in jobs:
        for row in (job.epochs[-1] if job.epochs else {}, job.last):  # metrics.jsonl keeps the loop's order
            keys += [k for k, v in row.items()
                     if k not in keys and k not in _NOT_METRICS and isinstance(v, int | float | None)]

    def rank(key: str) -> int:
        return KEY_METRICS.index(key) if key in KEY_METRICS else 99 if key in _LAST else len(KEY_METRICS)

    return sorted(keys, key=rank)


def results_table(sweep: Sweep) -> Table:
    metrics = final_metric_keys(sweep.jobs)
    # A metric named like a swept parameter (the loop's last-epoch `lr` beside a swept `lr`) is `final_<name>`:
    # every column name is unique and says what it holds.
    names = [f"final_{m}" if m in sweep.swept else m for m in metrics]
    gpus = any(job.gpu_hours is not None for job in sweep.jobs)
    columns = ["job", *sweep.swept, "status", "objective", *names, "best_epoch", "epochs",
               "epoch_time_s", "wall_time_s", *(["gpu_hours"] if gpus else []), "job_dir", "note"]
    inside = f"{sweep.sweep_dir}{os.sep}"
    rows = [_row(sweep, job, metrics, inside, gpus) for job in sweep.jobs]
    best = sweep.best
    return Table(columns, rows, best=None if best is None else sweep.jobs.index(best))


def _row(sweep: Sweep, job: JobReport, metrics: list[str], inside: str, gpus: bool) -> list[Any]:
    last = job.last
    job_dir = str(job.job_dir)  # relative to the sweep directory when inside it (a string test: 100,000 rows)
    return [job.num, *(job.overrides.get(k) for k in sweep.swept), job.status, job.objective,
            *(last.get(m) for m in metrics), job.best_epoch, job.n_epochs or None,
            job.epoch_time_s, job.wall_time_s, *([job.gpu_hours] if gpus else []),
            job_dir[len(inside):] if job_dir.startswith(inside) else job_dir, job.note]


def fmt(value: Any, empty: str = "-") -> str:
    """A cell for people: 4 significant digits (a swept value's too, typed as text), `-` for nothing."""
    if value is None or value == "":
        return empty
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.3e}"
    if isinstance(value, str):
        return short_value(value)
    return str(value)


def to_csv(table: Table) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows(table.rows)  # the csv module writes None as an empty cell and a float as its repr
    return out.getvalue()


def to_text(table: Table, max_rows: int = 0) -> str:
    """An aligned table for the terminal without the job's folder; the first `max_rows` rows (0: all) and a line
    saying how many were left. Cells are cut to 60 characters, but for the note (an error keeps its fix)."""
    keep = [i for i, c in enumerate(table.columns) if c != "job_dir"]
    shown = table.rows if max_rows <= 0 else table.rows[:max_rows]
    body = [[fmt(row[i]) if table.columns[i] == "note" else clip(fmt(row[i]), 60) for i in keep] for row in shown]
    lines = aligned([table.columns[i] for i in keep], body)
    if len(shown) < len(table.rows):
        lines.append(f"... {len(table.rows) - len(shown)} more rows in results.csv")
    return "\n".join(lines)


def kept_rows(table: Table, direction: str) -> tuple[list[int], str]:
    """The rows a page (index.html, summary.md) lists: all up to MAX_PAGE_ROWS, else the best by objective in job
    order; and a sentence saying which when not all."""
    n = len(table.rows)
    if n <= MAX_PAGE_ROWS or "objective" not in table.columns:
        return list(range(n)), ""
    at = table.columns.index("objective")
    kept = sorted(best_first(range(n), lambda i: table.rows[i][at], direction)[:MAX_PAGE_ROWS])
    return kept, (f"The best {len(kept):,} of {n:,} jobs by objective ({direction}), in job order; results.csv "
                  "has every job.")


def reproduce_command(sweep: Sweep, job: JobReport) -> str:
    """The command that trains `job` again as a single run, from where the sweep ran (the app as sweep.json records
    it, train.py when there is no sweep.json)."""
    return rerun_command(sweep.app, sweep.config, job.typed(), sweep.swept)


def best_lines(sweep: Sweep) -> list[str]:
    """The best job and the command line that runs it again, or why there is none."""
    best = sweep.best
    if sweep.measures_speed:
        return [speed_study_line(sweep.swept, sweep.metric)]
    if best is None:
        return [f"no completed job with a finite {sweep.metric} yet"]
    return [f"best ({sweep.direction} {sweep.metric}): job {best.num} = {fmt(finite_number(best.objective))}"
            + (f"  [{sweep.typed_swept(best)}]" if sweep.swept else ""),
            *([default_direction_line(sweep.metric)] if sweep.direction_default else []),
            f"reproduce: {reproduce_command(sweep, best)}"]
