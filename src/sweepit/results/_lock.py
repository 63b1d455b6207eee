"""One driver per sweep directory (`sweep.lock`, also on a cluster's shared file system): a second one would reuse job
numbers, run jobs twice into the same directories and overwrite `sweep.json`. The lock says who holds it (host, pid,
command, since when); a lock is stale, and is taken over with a message, when its process is gone (same host) or when
it has not been refreshed for `STALE_S` (another host, where the process cannot be asked)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from sweepit._files import atomic_write
from sweepit._host import now_iso, process_alive
from sweepit.errors import OutputWriteError, SweepLockedError
from sweepit.results._claims import silent_s
from sweepit.results._paths import LOCK_FILE, MANIFEST_FILE

HEARTBEAT_S = 30.0      # how often a driver refreshes its lock
STALE_S = 180.0         # a lock from another host unrefreshed this long belongs to a driver that died

log = logging.getLogger(__name__)


class SweepLock:
    def __init__(self, sweep_dir: Path) -> None:
        self.path = Path(sweep_dir) / LOCK_FILE
        self.held = False
        self._touched = 0.0

    def _record(self) -> dict[str, Any] | None:
        try:
            record = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def holder(self) -> dict[str, Any] | None:
        """The lock's record, when a live driver (not this process) holds it; None when it is free or stale."""
        record = self._record()
        if record is None or _mine(record):
            return None
        if record.get("host") == socket.gethostname():
            pid = record.get("pid")
            return record if isinstance(pid, int) and process_alive(pid) else None
        return record if silent_s(self.path) < STALE_S else None

    def acquire(self) -> None:
        """Hold the lock, taking over a stale one; SweepLockedError when a live driver holds it. A process that
        holds it already (a launcher that took it at set-up) just keeps it."""
        old = self._record()
        if old is not None and _mine(old):
            self.held = True
            return
        holder = self.holder()
        if holder is not None:
            raise SweepLockedError(describe_holder(holder, self.path.parent))
        stale = self.path.exists()
        if stale and old is not None:
            log.warning(f"taking over {self.path}: the driver that held it (pid {old.get('pid')} on "
                        f"{old.get('host')}, since {old.get('since')}) is gone")
        record = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": now_iso(),
                             "argv": list(sys.argv)}) + "\n"
        try:
            # Created in one step where there is none (another driver's, taken a moment ago, stays), replaced over
            # a stale one; either way through the one atomic write, which names the file on a full disk.
            atomic_write(self.path, record, fsync=False, replace=stale)
        except FileExistsError:
            holder = self.holder()
            raise SweepLockedError(describe_holder(holder or {}, self.path.parent)) from None
        except OutputWriteError as e:
            sweep_dir = self.path.parent
            fix = (f"Nothing of the sweep in {sweep_dir} was changed; once it can be written, `sweepit resume "
                   f"{sweep_dir}` goes on with it." if (sweep_dir / MANIFEST_FILE).exists() else
                   f"No job was started; once {sweep_dir} can be written, run the same command again, or pick "
                   "another hydra.sweep.dir.")
            raise OutputWriteError(e.errno, f"{e.strerror}. {fix}") from None
        self.held = True
        self._touched = time.monotonic()

    def touch(self) -> None:
        """Refresh the lock's time (at most every HEARTBEAT_S), so that other hosts see this driver alive."""
        if self.held and time.monotonic() - self._touched >= HEARTBEAT_S:
            self._touched = time.monotonic()
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def release(self) -> None:
        if self.held:
            self.held = False
            record = self._record()
            if record is not None and _mine(record):
                with contextlib.suppress(OSError):
                    self.path.unlink()


def own_folder(sweep_dir: Path, max_tries: int = 100) -> SweepLock:
    """The held lock of `sweep_dir`, a folder named by the clock (`${now:...}`), or of the first of `<dir>-2`,
    `<dir>-3`, ... that no other sweep has: another sweep started in the same second holds the folder the clock
    named, or has left its record there. Two such sweeps share the folder otherwise, or the second is refused."""
    sweep_dir = Path(sweep_dir)
    for i in range(1, max_tries + 1):
        folder = sweep_dir if i == 1 else sweep_dir.with_name(f"{sweep_dir.name}-{i}")
        lock = SweepLock(folder)
        old = lock._record()
        if (folder / MANIFEST_FILE).exists() and not (old is not None and _mine(old)):
            continue  # a sweep that ended already (within the same second): its folder is its own
        try:
            lock.acquire()
        except SweepLockedError:
            continue
        return lock
    raise SweepLockedError(f"a new sweep takes the first free folder of {sweep_dir}, {sweep_dir}-2, ... "
                           f"{sweep_dir}-{max_tries}, but other sweeps hold every one. Name a folder of its own: "
                           "hydra.sweep.dir=DIR.")


def _mine(record: dict[str, Any]) -> bool:
    return record.get("pid") == os.getpid() and record.get("host") == socket.gethostname()


def describe_holder(holder: dict[str, Any], sweep_dir: Path) -> str:
    command = " ".join(str(a) for a in holder.get("argv") or [])[:300]
    return (f"one driver at a time may run the sweep in {sweep_dir}, but another one does: pid {holder.get('pid')} "
            f"on {holder.get('host')}, since {holder.get('since')}" + (f" ({command})" if command else "") + ". "
            f"Follow it with `sweepit status {sweep_dir}`, or stop it (kill {holder.get('pid')}) and then run "
            f"`sweepit resume {sweep_dir}`; for a new sweep, pick another hydra.sweep.dir.")
