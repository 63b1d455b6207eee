"""How far a sweep and its running jobs are: the drivers' live progress line (redrawn in place on a terminal, one line
per finished job elsewhere), and each running job's epoch, latest metric and time left, from what it has written."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from sweepit.results._job_files import parse_metrics
from sweepit.results._overrides import load_yaml
from sweepit.results._paths import JobPaths
from sweepit.results._status import JobState, counts_text, finite_number

_CLEAR = "\r\033[K"


def format_duration(seconds: float) -> str:
    """`0:07`, `3:25`, `1:02:03`."""
    s = max(0, round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Counts jobs through queued -> running -> done; `live=None` means live exactly when `stream` is a TTY."""

    def __init__(self, n_jobs: int, stream: TextIO | None = None, live: bool | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.live = self.stream.isatty() if live is None else live
        self.clock = clock
        self.t0 = clock()
        self.queued = n_jobs
        self.running = 0
        self.done = 0                # finished in this run, whatever the outcome
        self.bad: dict[str, int] = {}  # failed and interrupted jobs, by status
        self.skipped = 0             # finished before (resume): not run again
        self.note = ""               # what the launcher adds, e.g. why queued jobs wait
        self._shown = False
        self._early: tuple[float, float] | None = None  # (ETA from running jobs' epochs, when it was taken)
        self._live = LiveReader()    # the running jobs' metrics, for that ETA

    def skip(self, n: int = 1) -> None:
        self.queued -= n
        self.skipped += n

    def start(self) -> None:
        self.queued -= 1
        self.running += 1
        self.draw()

    def finish(self, num: int, status: str, wall_time_s: float | None) -> None:
        self.running -= 1
        self.done += 1
        if JobState.is_failure(status):
            self.bad[status] = self.bad.get(status, 0) + 1
        if self.live:
            self.draw()
        else:
            took = "" if wall_time_s is None else f" in {wall_time_s:.1f}s"
            self._write(f"job {num} {status}{took} | {self.line()}\n")

    def early_eta(self, job_dirs: Iterable[str]) -> None:
        """Until the first job ends, the estimate (`sweep_eta_s`) of the running jobs in `job_dirs` (the ledger's), from
        the epochs they have written."""
        if self.done:
            return
        running = [self._live.look(Path(d)) for d in job_dirs if d]
        eta_s = sweep_eta_s(running, self.queued, max(1, self.running))
        self._early = None if eta_s is None else (eta_s, self.clock())

    def eta_s(self) -> float | None:
        """Time left at the pace so far (jobs finished per second of this run); before the first job ends, the
        running jobs' epoch times say (None: nothing to go on yet)."""
        left = self.queued + self.running
        if self.done == 0:
            if not left:
                return 0.0
            if self._early is None:
                return None
            eta, taken = self._early
            return max(0.0, eta - (self.clock() - taken))
        return (self.clock() - self.t0) / self.done * left

    def line(self) -> str:
        total = self.done + self.running + self.queued + self.skipped
        parts = [f"{self.done + self.skipped}/{total} done"]
        if self.bad:
            parts[0] += f" ({counts_text(self.bad)})"
        if self.skipped:
            parts.append(f"{self.skipped} skipped (finished before)")
        parts += [f"{self.running} running", f"{self.queued} queued"]
        eta = self.eta_s()
        when = f"{format_duration(self.clock() - self.t0)} elapsed, ETA {'?' if eta is None else format_duration(eta)}"
        return "sweep: " + ", ".join(parts) + " | " + when + (f" | {self.note}" if self.note else "")

    def draw(self) -> None:
        """Redraw the line in place (live mode only); cheap enough to call on every event."""
        if self.live:
            self._write(_CLEAR + self.line())
            self._shown = True

    def clear(self) -> None:
        """Take the line off the terminal, before other output is written there; `draw` puts it back."""
        if self.live and self._shown:
            self._write(_CLEAR)
            self._shown = False

    def close(self) -> None:
        """Leave the last state on its own line."""
        if self.live:
            self._write(_CLEAR + self.line() + "\n")
            self._shown = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed terminal must not stop the sweep


@dataclass
class JobProgress:
    """A running job's progress as of the last look (`LiveReader.look`), and where that look left its files."""

    epoch: int = 0                   # epochs logged so far
    epochs: int | None = None        # the job's total (its config's `epochs`), when known
    metric: str | None = None
    value: float | None = None       # the metric's latest value
    epoch_time_s: float | None = None
    eta_s: float | None = None       # time left: (epochs - epoch) x epoch time
    offset: int = 0                  # how far metrics.jsonl was read, in the file of this inode
    inode: int = 0
    times: list[float] = field(default_factory=list)  # the rows' `epoch_time_s`
    start: float | None = None       # when the job started; None until its config is read

    def text(self) -> str:
        """`3/15 val_acc=0.9123 ETA 0:42` (what is known of it)."""
        parts = [f"{self.epoch}/{self.epochs}" if self.epochs else f"epoch {self.epoch}"]
        if self.metric and self.value is not None:
            parts.append(f"{self.metric}={self.value:.4g}")
        if self.eta_s is not None:
            parts.append(f"ETA {format_duration(self.eta_s)}")
        return " ".join(parts)


class LiveReader:
    """Each look at a job's `metrics.jsonl` reads only the bytes appended since the last one: following hundreds of
    running jobs costs little."""

    def __init__(self) -> None:
        self._seen: dict[Path, JobProgress] = {}

    def look(self, job_dir: Path) -> JobProgress | None:
        """The job's progress; None before its first epoch is written."""
        job_dir = Path(job_dir)
        seen = self._seen.setdefault(job_dir, JobProgress())
        if seen.start is None:  # until the job has written its config (Hydra does as it starts)
            seen.epochs, seen.metric, seen.start = _config_facts(job_dir)
        path = JobPaths(job_dir).metrics
        try:
            stat = path.stat()
            if stat.st_ino != seen.inode or stat.st_size < seen.offset:
                # A new file (a resumed job rewrites it atomically): read it from the start.
                seen.inode, seen.offset, seen.epoch, seen.times, seen.value = stat.st_ino, 0, 0, [], None
            with path.open("rb") as f:
                f.seek(seen.offset)
                chunk = f.read()
        except OSError:
            return None
        end = chunk.rfind(b"\n") + 1  # a line still being written waits for the next look
        seen.offset += end
        for row in parse_metrics(chunk[:end].decode(errors="replace").splitlines())[0]:
            epoch = finite_number(row.get("epoch"))
            seen.epoch = max(seen.epoch, int(epoch) if epoch is not None else seen.epoch + 1)
            if (took := finite_number(row.get("epoch_time_s"))) is not None:
                seen.times.append(took)
            if seen.metric and (value := finite_number(row.get(seen.metric))) is not None:
                seen.value = value
        if seen.epoch == 0:
            return None
        # Epoch time: the mean of the rows' `epoch_time_s`, the first (warm-up) epoch left out once there are more; a
        # loop that reports none is timed by the file itself: (last write - job start) / epochs.
        timed = seen.times[1:] if len(seen.times) > 1 else seen.times
        if timed:
            seen.epoch_time_s = sum(timed) / len(timed)
        elif seen.start is not None and stat.st_mtime > seen.start:
            seen.epoch_time_s = (stat.st_mtime - seen.start) / seen.epoch
        else:
            seen.epoch_time_s = None
        seen.eta_s = None
        if seen.epochs is not None and seen.epoch_time_s is not None:
            seen.eta_s = max(0, seen.epochs - seen.epoch) * seen.epoch_time_s
        return seen


def sweep_eta_s(running: list[JobProgress | None], n_queued: int, n_slots: int) -> float | None:
    """Time until a sweep ends, from its running jobs' progress alone (before any job has finished): the longest time
    left of a running job, plus the queued jobs in waves of `n_slots` at the running jobs' per-job time."""
    known = [p for p in running if p is not None and p.eta_s is not None]
    if not known:
        return None
    left = max(p.eta_s for p in known if p.eta_s is not None)
    per_job = [p.epochs * p.epoch_time_s for p in known if p.epochs is not None and p.epoch_time_s is not None]
    if n_queued and per_job:
        left += math.ceil(n_queued / max(1, n_slots)) * sum(per_job) / len(per_job)
    return left


def _config_facts(job_dir: Path) -> tuple[int | None, str | None, float | None]:
    """The job's `epochs` and `metric` from `.hydra/config.yaml`, and when the job started (that file's time); all
    None while it is not there whole."""
    path = JobPaths(job_dir).config
    config = load_yaml(path)
    try:
        start = os.stat(path).st_mtime
    except OSError:
        return None, None, None
    if not isinstance(config, dict):
        return None, None, None
    epochs, metric = config.get("epochs"), config.get("metric")
    return (epochs if isinstance(epochs, int) and not isinstance(epochs, bool) and epochs > 0 else None,
            metric if isinstance(metric, str) else None, start)
