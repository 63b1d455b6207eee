"""The live progress line of a running sweep: done, running, queued, failed, elapsed time and ETA.

On a terminal the line is redrawn in place; elsewhere (a log file, CI) one line is printed per finished job.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from sweepit.results._status import FAILED_STATUSES, counts_text

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
        if status in FAILED_STATUSES:
            self.bad[status] = self.bad.get(status, 0) + 1
        if self.live:
            self.draw()
        else:
            took = "" if wall_time_s is None else f" in {wall_time_s:.1f}s"
            self._write(f"job {num} {status}{took} | {self.line()}\n")

    def early_eta(self, eta_s: float | None) -> None:
        """The driver's estimate from its running jobs' epoch times (sweepit.results._live), used until the
        first job ends."""
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
