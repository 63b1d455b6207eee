"""What the driver gives its jobs: how many run at once, which GPUs each one owns, and the modules imported before
they are forked. Nothing here initialises CUDA: the fork server, a copy of the driver, forks."""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil
import shutil
import subprocess
import sys
from collections.abc import Sequence

from sweepit.errors import ConfigError

log = logging.getLogger(__name__)
_preloaded: set[str] = set()

# Imported once in the fork server before any job is forked: each job starts warm. Nothing here may run torch compute:
# OpenMP thread pools do not survive fork. torch._dynamo is what torch's optimizers import on first use (slowly); the
# private torch modules and sweepit's data modules are imported lazily by a first training step, which each job would
# otherwise pay for. The list warms torch training, so it is imported only where the app has imported torch or
# sweepit's own job by the time it launches (TORCH_APP): torch's import costs each server CPU time and memory.
DEFAULT_PRELOAD = [
    "torch", "torch.optim", "torch._dynamo", "torch.profiler._cupti_monitor", "torch.utils.serialization.config",
    "sweepit.train._loop", "sweepit.train.data.*", "sweepit.train._job:code_version",
]
# What every job's session imports when the job ends (its trackers, sweepit.train._session): light, and imported
# before any fork whatever the list above, so that no job of any app pays it again.
JOB_MODULES = ("sweepit.trackers",)
TORCH_APP = ("torch", "sweepit.train._entry")  # an app that has imported one of these trains with torch


def visible_gpus() -> list[str]:
    """GPU ids this process may hand out, read without touching CUDA (a CUDA driver does not survive fork):
    CUDA_VISIBLE_DEVICES when set (a Slurm allocation, a user's choice), else the GPUs the NVIDIA driver lists."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids: list[str] = []
        for item in env.split(","):
            item = item.strip()
            if not item or item.startswith("-"):
                break  # CUDA ignores everything from the first invalid id on
            ids.append(item)
        return ids
    try:
        return [str(i) for i in range(len(os.listdir("/proc/driver/nvidia/gpus")))]
    except OSError:
        pass
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(line for line in out.splitlines() if line.startswith("GPU "))]


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def resolve_n_workers(n_workers: int, threads_per_job: int, n_gpus: int, n_cpus: int,
                      n_jobs: int | None = None) -> int:
    """`n_workers`, or when 0 (auto) as `LocalOptions.n_workers` says."""
    if n_workers > 0:
        return n_workers
    if n_gpus > 0:
        return n_gpus
    workers = max(1, n_cpus // threads_per_job) if threads_per_job > 0 else max(1, n_cpus)
    return workers if n_jobs is None else max(1, min(workers, n_jobs))


def resolve_threads(threads_per_job: int, n_workers: int, n_cpus: int) -> int:
    """`threads_per_job`, or when 0 (auto): the CPU cores shared out between the workers."""
    return threads_per_job if threads_per_job > 0 else max(1, n_cpus // max(1, n_workers))


class GpuPool:
    """GPUs free to hand out; a job takes all the GPUs it needs at once, or waits."""

    def __init__(self, gpus: list[str]) -> None:
        self.all = list(gpus)
        self.free = list(gpus)

    def check(self, num: int, need: int, key: str) -> None:
        if need > len(self.all):
            raise ConfigError(
                f"{key} must be at most the {len(self.all)} GPU(s) this machine offers to the local launcher, "
                f"but job {num} sets {key}={need}. Lower {key}, or run it with hydra/launcher=slurm."
            )

    def take(self, need: int) -> list[str] | None:
        if need > len(self.free):
            return None
        taken, self.free = self.free[:need], self.free[need:]
        return taken

    def give(self, gpus: list[str]) -> None:
        free = set(self.free) | set(gpus)
        self.free = [g for g in self.all if g in free]  # in the machine's order, so that ids stay stable


def preload(names: Sequence[str]) -> None:
    """Import each module once in the fork server, before any job's fork: `module`, `module:function` (then called),
    `package.*` (the package and its modules). A module absent here is skipped; other failures are warned."""
    for name in JOB_MODULES:
        importlib.import_module(name)
    if list(names) == DEFAULT_PRELOAD and not any(name in sys.modules for name in TORCH_APP):
        log.debug("hydra.launcher.preload: the app has not imported torch nor sweepit.train.run_job, so the default "
                  "list is not imported")
        return
    for name in names:
        if name in _preloaded:
            continue
        _preloaded.add(name)
        module, _, function = name.partition(":")
        try:
            if module.endswith(".*"):
                package = importlib.import_module(module[:-2])
                for info in pkgutil.iter_modules(getattr(package, "__path__", [])):
                    importlib.import_module(f"{package.__name__}.{info.name}")
                continue
            loaded = importlib.import_module(module)
            if function:
                getattr(loaded, function)()
        except ModuleNotFoundError as e:
            log.debug(f"hydra.launcher.preload: skipped {name!r}: {e}")
        except Exception as e:
            log.warning(f"hydra.launcher.preload: {name!r} failed ({type(e).__name__}: {e}); each job will import "
                        "it itself. Fix or remove it in hydra.launcher.preload.")
