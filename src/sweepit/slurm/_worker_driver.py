"""The one driver of the worker engine's Slurm workers (`sweepit.slurm._engine`), for packed grids (`_pack.PackedSweep`)
and Optuna studies (`_optuna_workers.WorkerSweep`): it submits arrays of workers into `sweep.json`'s `workers`, follows
the jobs they take, and says how to follow, resume or cancel workers it leaves running. What the kind of work keeps:
where a job's entry comes from (a grid's claims and plan; a study's claims), when following ends, and what is done for
a worker that ended early (a grid's jobs retried or given to fresh workers; a study's retried by the workers).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweepit._host import now_iso
from sweepit.results import Manifest, Progress, open_manifest, write_manifest
from sweepit.slurm import _cluster as cluster
from sweepit.slurm._follow import Follower
from sweepit.slurm._request import Request, sbatch_parameters
from sweepit.slurm._submit import Task, fresh_folder, job_name, log_paths, next_folder, sbatch_script, submit

if TYPE_CHECKING:
    from sweepit.slurm._slurm_sweep import SlurmSweep


def add_workers(m: Manifest, ids: list[str], folder: Path, request: str, shape: int = 0) -> None:
    """The one schema of `manifest.workers`, for packed and Optuna workers alike: every worker's id and logs, the
    workers' job name and each array submitted (its shape, ids, request, when, its folder)."""
    workers = m.workers
    workers.setdefault("ids", []).extend(ids)
    for i in ids:
        stdout, stderr = log_paths(folder, i)
        workers.setdefault("stdout", {})[i], workers.setdefault("stderr", {})[i] = str(stdout), str(stderr)
    workers.setdefault("arrays", {})[ids[0].split("_", 1)[0]] = {
        "shape": shape, "ids": ids, "submitted_at": now_iso(), "request": request, "submitit_folder": str(folder)}
    write_manifest(m)


def alive_workers(m: Manifest) -> set[str]:
    """The ids of the manifest's workers (Optuna's or a packed sweep's) that are queued or running; all of them when
    Slurm cannot be asked."""
    ids = [str(i) for i in m.workers.get("ids") or []]
    if not ids:
        return set()
    rows = cluster.squeue(ids)
    if rows is None:
        return set(ids)
    name = m.workers.get("job_name")
    return {i for i in ids if (row := rows.get(i)) is not None and (not name or row.name == name)
            and (row.state in cluster.ACTIVE_STATES or row.state == "COMPLETING")}


def workers_alive(m: Manifest) -> bool:
    """Whether any worker of the manifest is queued or running (True when Slurm cannot be asked)."""
    return bool(alive_workers(m))


class WorkerDriver:
    """The driver's side of a sweep run by workers: `begin` (the sweep's lock and manifest), `submit_array`,
    `follow_until`, `detached`. A kind of work names its workers and their work for what the driver says."""

    workers = "workers"
    work = "their jobs"

    def __init__(self, sweep: SlurmSweep) -> None:
        self.sweep = sweep
        self.options = sweep.options
        self.sweep_dir: Path = sweep.sweep_dir
        self.m: Manifest  # read by begin()

    def begin(self) -> Manifest:
        """Hold the sweep's lock and read its manifest."""
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        self.sweep.lock.acquire()
        self.m = open_manifest(self.sweep_dir, launcher="slurm")
        return self.m

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
        """One sbatch call: an array of the workers (a plain job for one), added to `manifest.workers`."""
        o, m = self.options, self.m
        folder = fresh_folder(self.sweep_dir)
        name = str(m.workers.setdefault("job_name", job_name(o)))
        ids = submit(tasks, self.params(request, len(tasks), name, cores), folder, o.max_num_timeout, o.python)
        add_workers(m, ids, folder, request.describe(), shape)
        return ids

    def follower(self, progress: Progress) -> Follower:
        """The follow loop of the workers' jobs (added as the workers take them); it keeps the sweep's lock alive."""
        o = self.options
        follower = Follower(self.m, [], progress, o.poll_interval_s, o.result_grace_s, o.stderr_tail_lines)
        follower.on_poll = self.sweep.lock.touch
        return follower

    def follow_until(self, follower: Follower, look: Callable[[], bool], going: Callable[[], bool]) -> str | None:
        """Follow until `look()` says nothing is left; what to say when a stop signal (SIGINT, SIGTERM) ended the
        following early, else None. The workers never depend on it."""
        try:
            follower.progress.draw()
            stop = follower.follow(look=look, going=going)
        finally:
            follower.progress.close()
            write_manifest(self.m)
        if stop is None:
            return None
        return (f"stopped following the workers ({signal.Signals(stop).name}); they go on running.\n"
                + "\n".join(self.detached().splitlines()[1:]))

    def detached(self) -> str:
        """What a driver that does not wait (hydra.launcher.wait=false) says of the workers it leaves running."""
        workers = self.m.workers
        arrays = list(workers.get("arrays") or dict.fromkeys(str(i).split("_", 1)[0] for i in workers.get("ids") or []))
        return (f"Not waiting (hydra.launcher.wait=false): the {self.workers} (Slurm job(s) "
                f"{' '.join(arrays) or '?'}) run {self.work} on their own.\n"
                f"  follow:  sweepit status {self.sweep_dir} --watch\n  resume:  sweepit resume {self.sweep_dir}\n"
                f"  cancel:  scancel {' '.join(arrays) or '?'}")
