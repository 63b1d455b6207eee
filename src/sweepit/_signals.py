"""The one way a sweep driver catches Ctrl-C and SIGTERM, as events it acts on in its own loop, and how a job
process turns them into KeyboardInterrupt."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """Records each SIGINT and SIGTERM in `received` while installed (in the main thread only, where signals can be
    caught); then calls `on_signal(signum)`. `wakeup=True` also makes `wakeup_fd` readable at each signal, for a loop
    that sleeps in `multiprocessing.connection.wait` rather than in a sleep a signal can cut short."""

    def __init__(self, on_signal: Callable[[int], None] | None = None, wakeup: bool = False) -> None:
        self.on_signal = on_signal
        self.wakeup = wakeup
        self.received: list[int] = []
        self.wakeup_fd = -1
        self._write_fd = -1
        self._old_wakeup_fd = -1
        self._handlers: dict[int, Any] = {}

    @property
    def first(self) -> int | None:
        return self.received[0] if self.received else None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.on_signal is not None:
            self.on_signal(signum)

    def install(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread() or self._handlers:
            return self
        if self.wakeup:
            self.wakeup_fd, self._write_fd = os.pipe()
            for fd in (self.wakeup_fd, self._write_fd):
                os.set_blocking(fd, False)
            self._old_wakeup_fd = signal.set_wakeup_fd(self._write_fd)
        for sig in STOP_SIGNALS:
            self._handlers[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        for sig, handler in self._handlers.items():
            signal.signal(sig, handler)
        self._handlers.clear()
        if self.wakeup_fd >= 0:
            signal.set_wakeup_fd(self._old_wakeup_fd)
            os.close(self.wakeup_fd)
            os.close(self._write_fd)
            self.wakeup_fd = self._write_fd = -1

    def fds(self) -> list[int]:
        """The wake-up pipe's descriptors (none without `wakeup`), which a forked child must close."""
        return [fd for fd in (self.wakeup_fd, self._write_fd) if fd >= 0]

    def drain(self) -> None:
        """Empty the wake-up pipe after a wake-up."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wakeup_fd, 512):
                pass

    def __enter__(self) -> StopSignals:
        return self.install()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.restore()


@contextmanager
def stop_signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back (pending, not lost) for the block. Around a fork, so that the child gets one only
    after it has replaced the driver's handlers, which would merely note it (`release_stop_signals`)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def release_stop_signals() -> None:
    """Let SIGINT and SIGTERM through again; one that came while they were held is handled now."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


SLURM_STOP = "stopped by SIGTERM from Slurm (scancel, the time limit, preemption without requeue or a node going down)"


def interrupt_on_stop_signals(signals: tuple[int, ...] = STOP_SIGNALS, why: str | None = None,
                              unless: Callable[[], bool] = lambda: False) -> None:
    """In a job process: the first of `signals` raises KeyboardInterrupt (saying `why`, else the signal's name), which
    a job records as `interrupted`, unless `unless()` says the job is on its way out (its result is in, or it is
    being requeued). Later ones are ignored, so that they cannot cut that record short (a packed job on Slurm gets
    SIGTERM both from Slurm and from its worker). Whoever must end the job at once sends SIGKILL."""

    def _interrupt(signum: int, frame: FrameType | None) -> None:
        if unless():
            return
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(why or f"stopped by {signal.Signals(signum).name}")

    for sig in signals:
        signal.signal(sig, _interrupt)
