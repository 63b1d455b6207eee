"""Local sweeps: each job in its own forked worker process, a few at a time (the engine of hydra/launcher=local)."""

from __future__ import annotations

from sweepit.local._forkserver import ForkServer
from sweepit.local._local_sweep import LocalOptions, LocalSweep
from sweepit.local._pool import FRESH_FOR_CUDA, Job, Pool, PoolHooks
from sweepit.local._resources import DEFAULT_PRELOAD, GpuPool, preload, visible_gpus
from sweepit.local._worker import ChildSpec, child_main, end_facts, failure, picklable

__all__ = [
    "DEFAULT_PRELOAD", "FRESH_FOR_CUDA", "ChildSpec", "ForkServer", "GpuPool", "Job", "LocalOptions", "LocalSweep",
    "Pool", "PoolHooks", "child_main", "end_facts", "failure", "picklable", "preload", "visible_gpus"
]
