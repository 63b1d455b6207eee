"""The one driver of the worker engine's Slurm workers, for packed grids (`_pack.PackedSweep`) and Optuna studies
(`_optuna_workers.WorkerSweep`): it submits arrays of workers into `sweep.json`'s `workers`, follows the jobs they
take, and says how to follow, resume or cancel workers it leaves running. A kind of work says how the jobs its workers
take are found and when following ends (`watch`).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sweepit._host import now_iso
from sweepit.results import Ledger, Manifest, Progress
from sweepit.slurm import _cluster as cluster
from sweepit.slurm._follow import Follower
from sweepit.slurm._job_states import workers_alive
from sweepit.slurm._plan import Planner
from sweepit.slurm._request import Request, sbatch_parameters
from sweepit.slurm._submit import Task, fresh_folder, job_name, log_paths, next_folder, sbatch_script, submit


def worker_job(worker: str, m: Manifest) -> dict[str, Any]:
    """The Slurm facts of a job that worker `worker` runs, in its manifest entry."""
    return {"slurm_job_id": worker, "slurm_array_job_id": cluster.array_id(worker),
            "slurm_job_name": m.workers.get("job_name")}


class WorkerDriver:
    """The driver's side of a sweep run by workers: `open`, `submit_array`, `follow`. A kind of work names its workers
    and their work for what the driver says, and sets how their jobs are followed (`watch`)."""

    workers = "workers"
    work = "their jobs"

    def __init__(self, sweep: Planner) -> None:
        self.sweep = sweep
        self.options = sweep.options
        self.sweep_dir = sweep.sweep_dir
        self.m: Ledger  # read by open()

    def open(self) -> bool:
        """Hold the sweep's lock and read its manifest; True when workers of an earlier driver are still alive (then
        they are followed, and none is submitted)."""
        self.m = self.sweep.begin()
        return workers_alive(self.m)

    @property
    def waits(self) -> bool:
        return bool(self.options.wait)

    def params(self, request: Request, n_workers: int, name: str, cores: int | None = None) -> dict[str, Any]:
        """sbatch's parameters of an array of `n_workers` (`cores`: each worker's cpus_per_task, when not the
        launcher's)."""
        o = replace(self.options, cpus_per_task=cores) if cores else self.options
        params = sbatch_parameters(request, o, name)
        params["array_parallelism"] = max(1, n_workers)  # every worker at once: they are the parallelism
        return params

    def script(self, request: Request, n_workers: int, index: int = 0, cores: int | None = None) -> str:
        """The sbatch script of an array of `n_workers` (a dry run's)."""
        params = self.params(request, n_workers, job_name(self.options), cores)
        return sbatch_script(params, next_folder(self.sweep_dir, index), n_workers, self.options.python)

    def submit_array(self, tasks: list[Task], request: Request, shape: int = 0, cores: int | None = None) -> list[str]:
        """One sbatch call: an array of the workers (a plain job for one), added to `manifest.workers`, the one
        schema of packed and Optuna workers alike."""
        o, workers = self.options, self.m.workers
        folder = fresh_folder(self.sweep_dir)
        name = str(workers.setdefault("job_name", job_name(o)))
        ids = submit(tasks, self.params(request, len(tasks), name, cores), folder, o.max_num_timeout, o.python)
        workers.setdefault("ids", []).extend(ids)
        for i in ids:
            stdout, stderr = log_paths(folder, i)
            workers.setdefault("stdout", {})[i], workers.setdefault("stderr", {})[i] = str(stdout), str(stderr)
        workers.setdefault("arrays", {})[cluster.array_id(ids[0])] = {
            "shape": shape, "ids": ids, "submitted_at": now_iso(), "request": request.describe(),
            "submitit_folder": str(folder)}
        self.m.write()
        return ids

    def watch(self, follower: Follower) -> tuple[Callable[[], bool], Callable[[], bool]]:
        """The kind's `look` and `going` of the follow loop (`Follower.follow`)."""
        raise NotImplementedError

    def follow(self, progress: Progress | None = None) -> str | None:
        """Follow the workers' jobs until the kind's look says nothing is left, or say how to follow them when not
        waiting; what to say when a stop signal (SIGINT, SIGTERM) ended the following early, else None. The workers
        never depend on it."""
        if not self.options.wait:
            print(self.detached(), flush=True)
            return None
        follower = Follower(self.m, [], progress or Progress(0), self.options, self.sweep.lock.touch)
        stop = follower.follow(*self.watch(follower))
        if stop is None:
            return None
        return (f"stopped following the workers ({signal.Signals(stop).name}); they go on running.\n"
                + "\n".join(self.detached().splitlines()[1:]))

    def detached(self) -> str:
        """What a driver that does not wait (hydra.launcher.wait=false) says of the workers it leaves running."""
        workers = self.m.workers
        arrays = list(workers.get("arrays") or cluster.base_ids(str(i) for i in workers.get("ids") or []))
        return (f"Not waiting (hydra.launcher.wait=false): the {self.workers} (Slurm job(s) "
                f"{' '.join(arrays) or '?'}) run {self.work} on their own.\n"
                f"  follow:  sweepit status {self.sweep_dir} --watch\n  resume:  sweepit resume {self.sweep_dir}\n"
                f"  cancel:  scancel {' '.join(arrays) or '?'}")
