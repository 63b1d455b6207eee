"""Local sweeps: each job in its own forked worker process, a few at a time (the engine of hydra/launcher=local).

    sweep = LocalSweep(LocalOptions(n_workers=2), sweep_dir, compose=fill_in_config_and_dir, body=run_one_job)
    statuses = sweep.run([Job(num=0, overrides=["lr=0.1"]), ...])
"""

from __future__ import annotations

from sweepit.local._local_sweep import LocalOptions, LocalSweep, preload
from sweepit.local._pool import Job
from sweepit.local._worker import Reply

__all__ = ["Job", "LocalOptions", "LocalSweep", "Reply", "preload"]
