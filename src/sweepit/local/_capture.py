"""A job's stdout and stderr: `stdout.log` and `stderr.log` in its job directory, and the terminal with one worker.

The job's file descriptors 1 and 2 are replaced, so output written below Python (C extensions, a segfault message,
subprocesses) is captured too. With several workers they are the log files themselves, so the driver is not woken up
by output; with one worker they are pipes the driver copies into the files and onto the terminal (a tee).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TextIO

from sweepit.results import JobPaths

_CHUNK = 1 << 16


def _write_through(stream: TextIO, data: bytes) -> None:
    stream.flush()
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        buffer.write(data)
        buffer.flush()
    else:
        stream.write(data.decode(errors="replace"))
        stream.flush()


class JobOutput:
    """The job's two descriptors (`child_fds`) and, when echoing, the driver's pipe read ends (`fds()`)."""

    def __init__(self, job_dir: Path, echo: bool, before_echo: Callable[[], None]) -> None:
        job_dir.mkdir(parents=True, exist_ok=True)
        self._before_echo = before_echo
        self.ends_line = True               # whether the last byte echoed was a newline
        self._sinks: dict[int, tuple[BinaryIO, TextIO]] = {}
        child: list[int] = []
        for file, stream in ((JobPaths(job_dir).stdout, sys.stdout), (JobPaths(job_dir).stderr, sys.stderr)):
            if echo:
                r, w = os.pipe()
                self._sinks[r] = (open(file, "wb", buffering=0), stream)  # noqa: SIM115
                child.append(w)
            else:
                child.append(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644))
        self.child_fds: tuple[int, int] = (child[0], child[1])

    def fds(self) -> list[int]:
        """Pipe read ends still open (none without echo)."""
        return list(self._sinks)

    def close_child_side(self) -> None:
        """After the fork: the driver must not hold the write ends, or it would never see end-of-file."""
        for fd in self.child_fds:
            os.close(fd)
        self.child_fds = (-1, -1)

    def read(self, fd: int) -> int:
        """Copy what `fd` holds now: the number of bytes, 0 when nothing is there, -1 at end-of-file (closed)."""
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return 0
        except OSError:
            data = b""
        file, echo = self._sinks[fd]
        if not data:
            file.close()
            os.close(fd)
            del self._sinks[fd]
            return -1
        file.write(data)
        self._before_echo()
        _write_through(echo, data)
        self.ends_line = data.endswith(b"\n")
        return len(data)

    def drain(self) -> None:
        """After the job ended: copy what is left, without waiting for processes it may have left behind."""
        for fd in self.fds():
            os.set_blocking(fd, False)
            while self.read(fd) > 0:
                pass

    def close(self) -> None:
        for fd, (file, _) in list(self._sinks.items()):
            file.close()
            os.close(fd)
        self._sinks.clear()
        if self.child_fds[0] >= 0:
            self.close_child_side()

