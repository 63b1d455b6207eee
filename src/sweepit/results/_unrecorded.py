"""What a job folder with no `result.json` and no sweep.json record is: the job of a launcher that keeps no record
(Hydra's basic launcher, a third-party app run unchanged). Its folder says only that it started; it is `running` while
something of it may be alive, else it `ended` without saying how. Evidence, from the cheapest: a driver holds the
sweep's lock, the folder changed lately, a process of this host holds a file in it open (Hydra's job log is open while
the job runs; a shell's working folder is no sign: a user may look around in an ended job's folder)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from sweepit.results._lock import STALE_S, SweepLock
from sweepit.results._status import JobState

# A folder silent this long, with no process of this host in it, ended: the window a driver's lock is given on
# another host, whose processes cannot be asked either.
SILENT_S = STALE_S


def unrecorded_state(folder: Path) -> JobState:
    """`running` or `ended` (its trackers' word for a job that ended without a status) for an unrecorded job."""
    if SweepLock(folder.parent).holder() is not None or _changed_s_ago(folder) < SILENT_S:
        return JobState.RUNNING
    return JobState.RUNNING if _in_use(folder) else JobState.ENDED


def _changed_s_ago(folder: Path) -> float:
    """Seconds since the folder or a file in it last changed (a job's log grows in place: its folder's time stays)."""
    newest = 0.0
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        newest = os.stat(folder).st_mtime
        for entry in entries:
            with contextlib.suppress(OSError):
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    return time.time() - newest


class _Held:
    """The folders of the files this host's processes hold open, with every folder above them: looked at once per read
    of a sweep (`new_look`), at its first unrecorded job that is silent."""

    folders: frozenset[str] | None = None

    @classmethod
    def now(cls) -> frozenset[str]:
        if cls.folders is None:
            cls.folders = frozenset(_scan())
        return cls.folders


def new_look() -> None:
    """Forget what the processes held: a new read of a sweep looks again."""
    _Held.folders = None


def _scan() -> set[str]:
    folders: set[str] = set()
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:  # no /proc (not Linux): no process seen
        return folders
    for pid in pids:
        paths = []
        with contextlib.suppress(OSError):  # (another user's process, or one gone since)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    paths.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        for path in paths:  # (a pipe's or socket's is no path)
            path = os.path.dirname(path)
            while path.startswith("/") and path not in folders:  # a folder met before has its parents in already
                folders.add(path)
                path = os.path.dirname(path) if path != "/" else ""
    return folders


def _in_use(folder: Path) -> bool:
    try:
        return os.path.realpath(folder) in _Held.now()
    except OSError:
        return False
