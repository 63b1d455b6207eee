"""Local sweeps: each job in its own forked worker process, a few at a time (the engine of hydra/launcher=local).

    sweep = LocalSweep(LocalOptions(n_workers=2), sweep_dir, compose=fill_in_config_and_dir, body=run_one_job)
    statuses = sweep.run([Job(num=0, overrides=["lr=0.1"]), ...])
"""

from __future__ import annotations

from sweepit.local._local_sweep import LocalOptions, LocalSweep
from sweepit.local._pool import Job, Pool
from sweepit.local._resources import DEFAULT_PRELOAD, GpuPool, preload
from sweepit.local._run import record_end
from sweepit.local._worker import ChildSpec, Reply, child_main, failure, picklable

__all__ = [
    "DEFAULT_PRELOAD", "ChildSpec", "GpuPool", "Job", "LocalOptions", "LocalSweep", "Pool", "Reply", "child_main",
    "failure", "picklable", "preload", "record_end"
]
