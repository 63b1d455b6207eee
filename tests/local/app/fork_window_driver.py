"""A local sweep of one job whose SIGTERM arrives in the fork window: right after the fork, before the job has
installed its own handler (what a Ctrl-C a moment after a job starts does). Run as a script:

    python fork_window_driver.py SWEEP_DIR

The at-fork hook sends the signal deterministically in that window; the job's body would sleep 15 s. Prints the
job's status and how long the sweep took, as JSON, on the last line.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

from sweepit.errors import SweepFailedError
from sweepit.local import Job, LocalOptions, LocalSweep
from sweepit.results import JobOutcome
from sweepit.results._job_files import read_result

BODY_S = 15.0


def main(sweep_dir: Path) -> None:
    def compose(job: Job) -> None:
        job.config = OmegaConf.create({"trainer": {"gpus": 1}})
        job.job_dir = sweep_dir / f"{job.num}_x"
        job.job_dir.mkdir(parents=True, exist_ok=True)

    def body(job: Job) -> JobOutcome:
        time.sleep(BODY_S)
        return JobOutcome("completed", 1.0, has_returned=True)

    # In the child, between the fork and anything the job runs: the window where a stop signal not held over the
    # fork would land on the driver's handler (inherited, it only notes the signal) and be lost.
    os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.SIGTERM))
    sweep = LocalSweep(LocalOptions(n_workers=1, term_grace_s=30.0, print_summary=False, preload=[]), sweep_dir,
                       compose=compose, body=body)
    t0 = time.monotonic()
    with contextlib.suppress(SweepFailedError):  # the job was interrupted
        sweep.run([Job(num=0, overrides=["x=0"])])
    elapsed_s = time.monotonic() - t0
    result = read_result(sweep_dir / "0_x") or {}
    print(json.dumps({"status": result.get("status"), "error": result.get("error"), "elapsed_s": elapsed_s}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
