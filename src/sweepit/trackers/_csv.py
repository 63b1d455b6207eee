"""`logger=csv`: the job's epochs as `metrics.csv` in its directory (one row per epoch, a column per metric)."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

from sweepit._files import atomic_write
from sweepit.trackers._base import RunInfo, Tracker


class CSV(Tracker):
    def __init__(self, filename: str = "metrics.csv") -> None:
        self.filename = filename
        self.rows: list[dict[str, Any]] = []
        self.run: RunInfo | None = None

    def start(self, run: RunInfo) -> None:
        self.run = run

    def log(self, metrics: Mapping[str, float], epoch: int) -> None:
        # A resumed job reports an epoch again: it replaces that epoch and the ones after it.
        self.rows = [r for r in self.rows if r["epoch"] < epoch] + [{"epoch": epoch, **metrics}]
        self._write()

    def finish(self, status: str, result: Mapping[str, Any] | None) -> None:
        self._write()

    def _write(self) -> None:
        if self.run is None:
            return
        columns = list(dict.fromkeys(k for row in self.rows for k in row))
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        atomic_write(self.run.job_dir / self.filename, out.getvalue(), fsync=False)
