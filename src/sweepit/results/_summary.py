"""Reads a sweep directory back: one row per job from its overrides and `result.json`, and a text table."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from sweepit.results._job_files import read_outcome
from sweepit.results._status import objective_values, pareto_front, sweep_direction
from sweepit.results._study_file import read_study_file

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present: about 9x faster
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
    status: str                      # a result.json status, or "pending" when there is none yet
    objective: float | None = None
    result: dict[str, Any] = field(default_factory=dict)
    note: str = ""                   # what was wrong with the job's files, if anything

    @property
    def final(self) -> dict[str, Any]:
        final = self.result.get("final")
        return final if isinstance(final, dict) else {}


Row = TypeVar("Row", bound=JobRow)


def read_overrides(job_dir: Path) -> dict[str, str]:
    """The job's command-line overrides (`key=value`) from Hydra's `.hydra/overrides.yaml`."""
    path = job_dir / ".hydra" / "overrides.yaml"
    try:
        items = yaml.load(path.read_text(), Loader=_LOADER) or []
    except (OSError, yaml.YAMLError):
        return {}
    return override_values(str(item) for item in items)


def _own_key(item: str) -> str | None:
    """The override's key, `+`, `++` and `~` dropped; None for a `hydra.*` override (such as the Optuna sweeper's
    `hydra.job.env_set`, which a launcher's records, sweep.json, also carry): not the job's own."""
    key = item.partition("=")[0].lstrip("+~")
    return None if key.startswith("hydra.") else key


def own_overrides(overrides: Iterable[str]) -> list[str]:
    """A job's own overrides, as `.hydra/overrides.yaml` holds them."""
    return [o for o in overrides if _own_key(o) is not None]


def override_values(overrides: Iterable[str]) -> dict[str, str]:
    """A job's own `key=value` overrides as {key: value}, `+`, `++` and `~` dropped (one pass: a report reads
    100,000 jobs' overrides)."""
    return {key: item.partition("=")[2] for item in overrides if (key := _own_key(item)) is not None}


def job_num(job_dir: Path) -> int | None:
    return _num(job_dir.name)


def _num(name: str) -> int | None:
    head = name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def job_dirs(sweep_dir: Path) -> list[tuple[Path, int]]:
    """The job directories (`<num>_<overrides>`) directly under `sweep_dir` with their numbers, unordered
    (one directory read: no stat a job where the file system says which entries are directories)."""
    base = Path(sweep_dir)
    with os.scandir(base) as entries:
        return [(base / e.name, n) for e in entries if (n := _num(e.name)) is not None and e.is_dir()]


def read_job(job_dir: Path, overrides: dict[str, str] | None = None) -> JobRow:
    """The job's row from its result.json; its overrides from `.hydra/overrides.yaml` unless given (from sweep.json,
    which saves a YAML parse a job)."""
    num = job_num(job_dir)
    return with_result(JobRow(num=-1 if num is None else num, job_dir=job_dir,
                              overrides=read_overrides(job_dir) if overrides is None else overrides, status="pending"))


def with_result(row: Row) -> Row:
    """`row` (status "pending") filled in from its job's result.json, when it has one."""
    read = read_outcome(row.job_dir)
    if read.status is None:
        return row
    row.status, row.result, row.note = read.status, read.result, read.problem
    result = read.result
    objective = result.get("objective")
    row.objective = float(objective) if isinstance(objective, int | float) else None
    if row.status in ("failed", "interrupted") and result.get("error"):
        row.note = str(result["error"]).splitlines()[0][:120]
    return row


def collect(sweep_dir: Path) -> list[JobRow]:
    """Every job directory (`<num>_<overrides>`) directly under `sweep_dir`, in job-number order."""
    rows = [read_job(p) for p, _ in job_dirs(sweep_dir)]
    return sorted(rows, key=lambda r: r.num)


def best_row(rows: list[JobRow], direction: str) -> JobRow | None:
    """The completed job with the best finite objective (`direction`: from `sweep_direction`); the first one on
    ties, as Optuna's journal storage picks its best trial."""
    scored = [r for r in rows if r.status == "completed" and r.objective is not None
              and math.isfinite(r.objective)]
    if not scored:
        return None
    pick = max if direction == "maximize" else min
    return pick(scored, key=lambda r: r.objective if r.objective is not None else 0.0)


def swept_keys(rows: list[JobRow]) -> list[str]:
    """Override keys whose value differs between jobs (constant overrides are printed once, not per row)."""
    keys = list(dict.fromkeys(k for r in rows for k in r.overrides))
    if len(rows) == 1:
        return keys
    return [k for k in keys if _varies(rows, k)]


def _varies(rows: list[JobRow], key: str) -> bool:
    first = rows[0].overrides.get(key)
    return any(r.overrides.get(key) != first for r in rows)  # stops at the first job that differs


def fixed_overrides(rows: list[JobRow], swept: list[str] | None = None) -> dict[str, str]:
    """The overrides every job shares (`swept`: swept_keys(rows), when known)."""
    varying = set(swept_keys(rows) if swept is None else swept) if len(rows) > 1 else set()
    return {k: v for k, v in (rows[0].overrides.items() if rows else []) if k not in varying}


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


def _seconds(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else "-"


def format_table(rows: list[JobRow]) -> str:
    """A plain aligned table: job, overrides, status, objective, key final metrics, wall time, note."""
    keys = swept_keys(rows)
    metrics = [m for m in KEY_METRICS if any(m in r.final for r in rows)]
    timed = any("epoch_time_s_mean" in r.result for r in rows)
    header = ["job", *keys, "status", "objective", *metrics, *([EPOCH_TIME] if timed else []), "time_s", "note"]
    body = [
        [str(r.num), *(r.overrides.get(k, "") for k in keys), r.status, _fmt(r.objective),
         *(_fmt(r.final.get(m)) for m in metrics), *([_fmt(r.result.get("epoch_time_s_mean"))] if timed else []),
         _seconds(r.result.get("wall_time_s")), r.note]
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summarize(sweep_dir: Path) -> str:
    """The text printed at the end of a sweep: table, counts by status, best job and the sweep directory."""
    rows = collect(sweep_dir)
    if not rows:
        return f"No jobs found in {sweep_dir}."
    direction = sweep_direction(sweep_dir, (r.result.get("direction") for r in rows))
    metric = next((str(r.result["metric"]) for r in rows if "metric" in r.result), "objective")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    parts = [format_table(rows), "",
             f"{len(rows)} jobs: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))]
    fixed = fixed_overrides(rows)
    if fixed and len(rows) > 1:
        parts.append("same in every job: " + " ".join(f"{k}={v}" for k, v in fixed.items()))
    study = read_study_file(sweep_dir) or {}
    directions = study.get("directions")
    if isinstance(directions, list) and len(directions) > 1:
        parts += pareto_lines(rows, directions, study.get("metrics") or None)
    else:
        best = best_row(rows, direction)
        if best is not None:
            args = " ".join(f"{k}={v}" for k, v in best.overrides.items())
            parts.append(f"best ({direction} {metric}): job {best.num} = {_fmt(best.objective)}  [{args}]")
    weights = [sum(n for n in r.result["weights"].values() if isinstance(n, int)) for r in rows
               if isinstance(r.result.get("weights"), dict) and r.result["weights"]]
    if weights:
        parts.append(f"weights: {size_text(sum(weights))} in {len(weights)} jobs (model_*.pt); "
                     f"`sweepit clean {sweep_dir}` keeps only the best job's")
    parts.append(f"sweep directory: {sweep_dir}")
    return "\n".join(parts)


def size_text(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:.1f} MB" if n_bytes >= 1e5 else f"{n_bytes / 1e3:.1f} kB"


def pareto_rows(rows: list[JobRow], directions: list[str], metrics: list[str] | None
                ) -> list[tuple[JobRow, list[float]]]:
    """The completed jobs on the Pareto front of a multi-objective study, with their values."""
    scored = [(r, v) for r in rows if r.status == "completed"
              and (v := objective_values(r.result, metrics, len(directions))) is not None]
    return [scored[i] for i in pareto_front([v for _, v in scored], directions)]


def pareto_lines(rows: list[JobRow], directions: list[str], metrics: list[str] | None) -> list[str]:
    names = metrics or [f"value {i}" for i in range(len(directions))]
    front = pareto_rows(rows, directions, metrics)
    head = f"Pareto front ({', '.join(f'{d} {n}' for d, n in zip(directions, names, strict=False))}): "
    if not front:
        return [head + "no completed job yet"]
    lines = [head + f"{len(front)} job(s)"]
    for row, values in front:
        args = " ".join(f"{k}={v}" for k, v in row.overrides.items())
        shown = ", ".join(f"{n}={_fmt(v)}" for n, v in zip(names, values, strict=False))
        lines.append(f"  job {row.num}: {shown}  [{args}]")
    return lines
