"""Faults injected for real into local sweeps of `task=linreg`, and what survives each: every job's result exactly
once, no metrics row lost or doubled, sweep.json in step with the results, and a resume that runs only what did not
finish (continuing from its epoch checkpoint). The README's "What survives what" table is written from these.

Covered elsewhere, not repeated here: a second driver on the same directory, and `sweepit resume` while the driver
runs, are refused with who holds the lock (tests/local/test_sweep_lock.py); a job that segfaults, raises or exits
fails alone and a resume reruns only it (tests/local/test_local_launcher.py); a full disk under one atomic write
(tests/test_files.py); `sweepit status` with a late or truncated result.json (tests/results/test_status_command.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sweepit_testing import REPO

pytestmark = pytest.mark.slow

FORK_WINDOW_DRIVER = Path(__file__).parent / "app" / "fork_window_driver.py"


def test_a_sigterm_in_the_fork_window_stops_the_job_at_once(tmp_path: Path) -> None:
    """The signal lands after the fork, before the job has its own handler. Before: the driver's inherited handler
    noted it and the job ran on (to its end, 15 s here, or until the SIGKILL after term_grace_s)."""
    done = subprocess.run([sys.executable, str(FORK_WINDOW_DRIVER), str(tmp_path / "sweep")], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["status"] == "interrupted", outcome
    assert outcome["error"] == "KeyboardInterrupt: stopped by SIGTERM"
    assert outcome["elapsed_s"] < 3.0, outcome  # not the job's 15 s, nor the 30 s grace before a SIGKILL
