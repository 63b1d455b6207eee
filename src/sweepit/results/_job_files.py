"""What a job leaves in its directory: `metrics.jsonl` (one object per epoch) and `result.json`.

Both are written atomically (temporary file, then rename), so a killed job never leaves half a file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sweepit._files import atomic_write

RESULT_FILE = "result.json"
METRICS_FILE = "metrics.jsonl"
STDOUT_LOG = "stdout.log"  # a job's output (under Slurm, links to its Slurm logs)
STDERR_LOG = "stderr.log"
BEST_WEIGHTS = "model_best.pt"   # trained weights (trainer.save_model): the best epoch's, the last epoch's
LAST_WEIGHTS = "model_last.pt"
WEIGHT_FILES = (BEST_WEIGHTS, LAST_WEIGHTS)


def _jsonable(value: Any) -> Any:
    """Non-finite floats become null: JSON has no NaN or Infinity, and browsers refuse them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def write_result(job_dir: Path, result: dict[str, Any]) -> Path:
    path = Path(job_dir) / RESULT_FILE
    atomic_write(path, json.dumps(_jsonable(result), indent=2, sort_keys=True) + "\n")
    return path


def read_result(job_dir: Path) -> dict[str, Any] | None:
    """The job's result, or None when it has none yet. A corrupt file raises ValueError."""
    path = Path(job_dir) / RESULT_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, but holds {type(data).__name__}.")
    return data


class MetricsLog:
    """Appends one JSON line per epoch; each append rewrites the file atomically (epochs are few)."""

    def __init__(self, job_dir: Path) -> None:
        self.path = Path(job_dir) / METRICS_FILE
        self.rows: list[dict[str, Any]] = []

    def resume_from(self, rows: list[dict[str, Any]]) -> None:
        self.rows = list(rows)
        self._flush()

    def append(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self._flush()

    def _flush(self) -> None:
        atomic_write(self.path, "".join(json.dumps(_jsonable(r)) + "\n" for r in self.rows))


def read_metrics(job_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Per-epoch rows and a note for each line that is not a JSON object (never raises on bad lines)."""
    path = Path(job_dir) / METRICS_FILE
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return rows, notes
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            notes.append(f"{path.name} line {i} is not JSON ({e.msg})")
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            notes.append(f"{path.name} line {i} is not a JSON object")
    return rows, notes
