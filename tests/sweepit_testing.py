"""Paths and helpers shared by the tests (a module name no other test folder uses)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
PACKAGE_CONF = REPO / "src" / "hydra_plugins" / "sweepit" / "conf"  # the cluster profiles, for any Hydra app

# Shrinks a job to a few steps: one epoch, CPU, one thread.
TINY = ["epochs=1", "device=cpu", "trainer.threads=1"]


def run_train(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the real entry point in a subprocess, with outputs/ under `cwd`."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(REPO / "train.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def wait_until(predicate: Callable[[], bool], what: str | Callable[[], str], timeout_s: float,
               interval_s: float = 0.2) -> None:
    """Poll `predicate` until it holds; fail the test, naming `what` (or what it returns then), after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {what() if callable(what) else what}")
        time.sleep(interval_s)


@contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A real file system of `size` (tmpfs, e.g. "64k") at `mount`, to fill up; the test is skipped where mounting
    is not permitted."""
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here ({done.stderr.strip() or done.returncode}): the "
                    "full-disk test needs root or CAP_SYS_ADMIN")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)
