"""This host's clock and processes, as every room records and asks them."""

from __future__ import annotations

import os
from datetime import datetime, timezone


def now_iso() -> str:
    """Now, in UTC, as the records (sweep.json, the lock, task files) write times."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def process_alive(pid: int) -> bool:
    """Whether a process of this host has the id `pid`."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it exists
    return True
