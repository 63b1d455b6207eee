"""How far a running job is, from what it has written so far: its epoch out of the config's `epochs`, its
latest objective metric, its time per epoch and the time it has left. Read by `sweepit status` and by the
drivers' progress line (an ETA before the first job ends).

`metrics.jsonl` is read incrementally: each look reads only the bytes appended since the last one, so
following hundreds of running jobs costs little. Epoch time is the mean of the rows' `epoch_time_s` (the
first epoch left out once there are more); a user's loop that reports none is timed by the file itself:
(last write - job start) / epochs.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweepit.results._paths import METRICS_FILE, JobPaths


@dataclass(frozen=True)
class JobProgress:
    epoch: int                       # epochs logged so far
    epochs: int | None               # the job's total (its config's `epochs`), when known
    metric: str | None
    value: float | None              # the metric's latest value
    epoch_time_s: float | None
    eta_s: float | None              # time left: (epochs - epoch) x epoch time

    @property
    def job_time_s(self) -> float | None:
        """The whole job's training time at this pace (for an ETA of jobs not started yet)."""
        if self.epochs is None or self.epoch_time_s is None:
            return None
        return self.epochs * self.epoch_time_s

    def text(self) -> str:
        """`3/15 val_acc=0.9123 ETA 0:42` (what is known of it)."""
        from sweepit.results._progress import format_duration

        parts = [f"{self.epoch}/{self.epochs}" if self.epochs else f"epoch {self.epoch}"]
        if self.metric and self.value is not None:
            parts.append(f"{self.metric}={self.value:.4g}")
        if self.eta_s is not None:
            parts.append(f"ETA {format_duration(self.eta_s)}")
        return " ".join(parts)


@dataclass
class _Seen:
    offset: int = 0
    inode: int = 0
    rows: int = 0
    times: list[float] | None = None
    value: float | None = None
    start: float | None = None
    epochs: int | None = None
    metric: str | None = None
    config_read: bool = False


class LiveReader:
    def __init__(self) -> None:
        self._seen: dict[Path, _Seen] = {}

    def look(self, job_dir: Path, metric: str | None = None) -> JobProgress | None:
        """The job's progress; None before its first epoch is written."""
        job_dir = Path(job_dir)
        seen = self._seen.setdefault(job_dir, _Seen(times=[]))
        if not seen.config_read:  # until the job has written its config (Hydra does as it starts)
            seen.epochs, seen.metric, seen.start = _config_facts(job_dir)
            seen.config_read = seen.start is not None
        metric = metric or seen.metric
        path = job_dir / METRICS_FILE
        try:
            stat = path.stat()
            if stat.st_ino != seen.inode or stat.st_size < seen.offset:
                # A new file (a resumed job rewrites it atomically): read it from the start.
                seen.inode, seen.offset, seen.rows, seen.times, seen.value = stat.st_ino, 0, 0, [], None
            with path.open("rb") as f:
                f.seek(seen.offset)
                chunk = f.read()
            mtime = stat.st_mtime
        except OSError:
            return None
        end = chunk.rfind(b"\n") + 1  # a line still being written waits for the next look
        seen.offset += end
        for line in chunk[:end].splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if not isinstance(row, dict):
                continue
            seen.rows = max(seen.rows, int(row["epoch"]) if _finite(row.get("epoch")) else seen.rows + 1)
            t = row.get("epoch_time_s")
            if isinstance(t, int | float) and _finite(t) and seen.times is not None:
                seen.times.append(float(t))
            if metric and _finite(row.get(metric)):
                seen.value = float(row[metric])
        if seen.rows == 0:
            return None
        times = seen.times or []
        timed = times[1:] if len(times) > 1 else times
        if timed:
            per_epoch: float | None = sum(timed) / len(timed)
        elif seen.start is not None and mtime > seen.start:
            per_epoch = (mtime - seen.start) / seen.rows
        else:
            per_epoch = None
        eta = None
        if seen.epochs is not None and per_epoch is not None:
            eta = max(0, seen.epochs - seen.rows) * per_epoch
        return JobProgress(seen.rows, seen.epochs, metric, seen.value, per_epoch, eta)


def sweep_eta_s(running: list[JobProgress | None], n_queued: int, n_slots: int) -> float | None:
    """Time until a sweep ends, from its running jobs' progress alone (before any job has finished): the
    longest time left of a running job, plus the queued jobs in waves of `n_slots` at the running jobs'
    per-job time. None when no running job has an estimate yet."""
    known = [p for p in running if p is not None and p.eta_s is not None]
    if not known:
        return None
    left = max(p.eta_s for p in known if p.eta_s is not None)
    per_job = [t for p in known if (t := p.job_time_s) is not None]
    if n_queued and per_job:
        left += math.ceil(n_queued / max(1, n_slots)) * sum(per_job) / len(per_job)
    return left


def _config_facts(job_dir: Path) -> tuple[int | None, str | None, float | None]:
    """The job's `epochs` and `metric` from `.hydra/config.yaml`, and when the job started (that file's time)."""
    import yaml

    path = JobPaths(job_dir).config
    try:
        config: Any = yaml.safe_load(path.read_text())
        start: float | None = os.stat(path).st_mtime
    except (OSError, yaml.YAMLError):
        return None, None, None
    if not isinstance(config, dict):
        return None, None, start
    epochs = config.get("epochs")
    metric = config.get("metric")
    return (int(epochs) if isinstance(epochs, int) and not isinstance(epochs, bool) and epochs > 0 else None,
            str(metric) if isinstance(metric, str) else None, start)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
