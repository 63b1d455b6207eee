"""What long-lived workers of one sweep share through files alone (no driver, no server), and what their engine
(`sweepit.slurm._engine`) asks of a source of work (a grid's plan, an Optuna study). A job is a worker's once it has
created its claim exclusively (`claim`: one atomic create, also on NFS); a worker whose heartbeat has been silent for
STALE_S is taken as dead (SIGKILL, a lost node), and what it held may be taken over."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sweepit._files import atomic_write
from sweepit.results._paths import SweepPaths

HEARTBEAT_S = 5.0
STALE_S = 45.0             # a worker silent this long is taken as dead (a busy shared file system may lag)
WAIT = "wait"              # a source's answer: nothing to take now, but ask again (a job may come back)


@dataclass
class Work:
    """One job a source handed to a worker, already claimed for it."""

    num: int
    overrides: list[str]
    env: dict[str, str] = field(default_factory=dict)  # the job's hydra.job.env_set additions
    job_dir: str | None = None  # planned by the driver (a grid's), else set once the job's config is composed
    token: Any = None           # the source's own handle of the work (a study's trial)


class WorkSource(Protocol):
    """Where a worker's engine takes its jobs from; every method is called in the worker's main thread."""

    ahead: int  # jobs taken beyond the free slots (their configs composed while the others run)

    def open(self, worker: str) -> None: ...  # at the worker's start: what its earlier life held, given back

    def take(self) -> Work | str | None: ...  # the next job, claimed; WAIT; None when nothing is left

    def refused(self, work: Work, error: Exception) -> bool: ...  # its config cannot be made: True when recorded

    def started(self, work: Work) -> None: ...  # its job runs now, in `work.job_dir`

    def ended(self, work: Work, returned: Any) -> None: ...  # after its result.json is written

    def give_back(self, work: Work) -> None: ...  # taken and not run to its end: for a worker to take again


def claimed(folder: Path) -> set[int]:
    """The job numbers claimed in `folder` now: one listing (nothing when the folder is not there yet)."""
    try:
        return {int(name) for name in os.listdir(folder) if name.isdigit()}
    except OSError:
        return set()


def claim(path: Path, content: str = "") -> bool:
    """Create `path` exclusively (in one step, through the one atomic write); False when another process did first.
    A path already there is answered by one stat, far cheaper than a failed create (workers try many jobs others
    hold); the exclusive create still decides every race."""
    if path.exists():
        return False
    try:
        atomic_write(path, content, fsync=False, replace=False)
    except FileExistsError:
        return False
    return True


def silent_s(path: Path) -> float:
    """Seconds since `path` was last touched (infinite when it is not there): how liveness is judged, of a worker by
    its heartbeat file and of a driver on another host by its sweep lock."""
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return float("inf")


@contextlib.contextmanager
def heartbeat(sweep_dir: Path, worker_id: str) -> Iterator[None]:
    """`with heartbeat(sweep_dir, worker_id):` touches the worker's heartbeat file every HEARTBEAT_S, in a thread."""
    path = SweepPaths(sweep_dir).heartbeat(worker_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()

    def loop() -> None:
        while True:
            with contextlib.suppress(OSError):
                path.touch()
            if stop.wait(HEARTBEAT_S):
                return

    threading.Thread(target=loop, name="sweepit-heartbeat", daemon=True).start()
    try:
        yield
    finally:
        stop.set()
