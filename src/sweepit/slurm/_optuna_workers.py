"""Worker mode on Slurm: N long-lived workers in one job array, each running trial after trial in its own task
(the worker engine, `sweepit.slurm._engine`, over `sweepit.search.StudySource`); the driver only submits them and
follows.

A worker writes `<job dir>/.slurm/trial.json` as it starts a trial's job (`sweepit.slurm._engine`); the driver, and
`sweepit status` when no driver runs, adopt each such directory as a job of `sweep.json` whose Slurm id is its
worker's (`adopt_trials`). So the follower, `sweepit status`, `sweepit report` and the results table see worker
trials as they see per-trial jobs: a job's own result.json settles it, and a trial whose worker Slurm ended
before it wrote one gets one written with Slurm's word (scancel, time limit, node failure).

`sweep.json` keeps the workers' array under `workers` (ids, job name, logs): a driver started again on the
directory follows the workers still alive instead of submitting new ones.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweepit._host import now_iso
from sweepit.errors import ConfigError
from sweepit.results import JobEntry, JobPaths, Manifest, Progress, State, job_num, open_manifest, write_manifest
from sweepit.slurm import _cluster as cluster
from sweepit.slurm._follow import Follower
from sweepit.slurm._limits import open_room, wait_for_room
from sweepit.slurm._submit import PlannedJob, Task, fresh_folder, job_name, link_logs, log_paths, submit

log = logging.getLogger(__name__)
WORKER_TRIAL = "worker_trial"  # manifest extra of a worker's job: its trial number (no return value to wait for)


def adopt_trials(m: Manifest) -> list[int]:
    """Job directories that workers started and the manifest does not list yet, added as running jobs of their
    worker (logs linked); their numbers."""
    workers = m.workers
    if not workers:
        return []
    new: list[int] = []
    with contextlib.suppress(OSError):
        for path in Path(m.sweep_dir).iterdir():
            num = job_num(path) if path.is_dir() else None
            if num is None or num in m.jobs:
                continue
            try:
                record = json.loads(JobPaths(path).trial.read_text())
            except (OSError, ValueError):
                continue
            wid = str(record.get("worker"))
            stdout, stderr = workers.get("stdout", {}).get(wid), workers.get("stderr", {}).get(wid)
            m.jobs[num] = JobEntry(num=num, overrides=list(record.get("overrides") or []), job_dir=str(path),
                                   state=State.RUNNING, started_at=record.get("started_at"), extra={
                                       "slurm_job_id": wid, "slurm_array_job_id": wid.split("_", 1)[0],
                                       "slurm_job_name": workers.get("job_name"), "stdout": stdout,
                                       "stderr": stderr, WORKER_TRIAL: record.get("trial")})
            if stdout and stderr:
                with contextlib.suppress(OSError):
                    link_logs(path, Path(stdout), Path(stderr))
            new.append(num)
    return sorted(new)


def add_workers(m: Manifest, ids: list[str], folder: Path, request: str, shape: int = 0) -> None:
    """The one schema of `manifest.workers`, for packed and Optuna workers alike: every worker's id and logs, the
    workers' job name (set by the caller) and each array submitted (its shape, ids, request, when, its folder)."""
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


class WorkerSweep:
    """The driver's side: submit the array (or adopt the one still alive), then follow the trials it runs."""

    def __init__(self, sweep: Any) -> None:  # a SlurmSweep: its options, lock and cluster facts
        self.sweep = sweep
        self.options = sweep.options
        self.sweep_dir: Path = sweep.sweep_dir
        self.manifest: Manifest | None = None

    def plan(self, job: PlannedJob) -> None:
        """The workers' request: the launcher's, or the first point's job config's (`gpus_key`, `timeout_key`),
        checked against the partition; one task each (a worker runs its trials one after the other)."""
        self.max_array_size = self.sweep.plan([job])
        assert job.request is not None
        r = job.request
        if r.nodes * r.tasks_per_node != 1:
            raise ConfigError(
                "hydra.sweeper.workers runs each worker as one Slurm task that trains its trials one after the "
                f"other, but the job's request is {r.nodes} node(s) x {r.tasks_per_node} task(s) ({r.describe()}). "
                "Use one task per job (trainer.gpus=1, hydra.launcher.tasks_per_node=1, nodes=1), or "
                "hydra.sweeper.workers=0 to submit each trial as its own job.")
        self.request = r

    def dry_run(self, n_workers: int) -> str:
        """The workers' sbatch script (an array of `n_workers`), instead of submitting it."""
        from sweepit.slurm._request import sbatch_parameters
        from sweepit.slurm._submit import next_folder, sbatch_script

        params = sbatch_parameters(self.request, self.options, job_name(self.options))
        params["array_parallelism"] = max(n_workers, 1)
        script = sbatch_script(params, next_folder(self.sweep_dir), n_workers, self.options.python)
        return (f"# {n_workers} Optuna worker(s), each {self.request.describe()}: 1 sbatch call\n{script}\n"
                f"dry run: nothing submitted. Drop hydra.launcher.dry_run=true to submit.")

    def open(self) -> bool:
        """Hold the sweep's lock and read its manifest; True when workers of an earlier driver are still alive
        (then they are followed, and none is submitted)."""
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        self.sweep.lock.acquire()
        self.manifest = open_manifest(self.sweep_dir, launcher="slurm")
        return workers_alive(self.manifest)

    def submit(self, tasks: list[Task]) -> list[str]:
        """One sbatch call: an array of the workers (a plain job for one)."""
        from sweepit.slurm._request import sbatch_parameters

        assert self.manifest is not None
        if len(tasks) > self.max_array_size:
            raise ConfigError(f"hydra.sweeper.workers must be at most the cluster's MaxArraySize "
                              f"({self.max_array_size}), but got workers={len(tasks)}; lower it.")
        o, name = self.options, job_name(self.options)
        room = open_room(o)
        if room is not None:  # fewer workers ask the study for the same trials
            tasks = tasks[:wait_for_room(room, len(tasks), o.poll_interval_s, self.sweep.lock.touch)]
        folder = fresh_folder(self.sweep_dir)
        params = sbatch_parameters(self.request, o, name)
        params["array_parallelism"] = max(len(tasks), 1)  # every worker at once: they are the parallelism
        ids = submit(tasks, params, folder, o.max_num_timeout, o.python)
        self.manifest.workers = {"job_name": name}
        add_workers(self.manifest, ids, folder, self.request.describe())
        log.info(f"Submitted {len(ids)} Optuna worker(s) to Slurm in 1 sbatch call (job {ids[0].split('_')[0]}); "
                 f"sweep dir {self.sweep_dir}")
        return ids

    @property
    def waits(self) -> bool:
        return bool(self.options.wait)

    def follow(self, on_poll: Callable[[], None] = lambda: None) -> str | None:
        """Follow the trials the workers start until every worker has ended and every trial is recorded; what to
        say when a stop signal (SIGINT, SIGTERM) ended the following early, else None. The workers never depend
        on it."""
        assert self.manifest is not None
        m, o = self.manifest, self.options
        if not o.wait:
            print(self.detached(), flush=True)
            return None
        progress = Progress(0)
        follower = Follower(m, [], progress, o.poll_interval_s, o.result_grace_s, o.stderr_tail_lines)
        def poll() -> None:
            self.sweep.lock.touch()
            on_poll()

        follower.on_poll = poll
        for num, entry in sorted(m.jobs.items()):  # an earlier driver's trials that had not ended when it stopped
            if entry.extra.get(WORKER_TRIAL) is not None and entry.state in (State.QUEUED, State.RUNNING):
                follower.add(num)
        def look() -> bool:
            for num in adopt_trials(m):
                follower.add(num)
            if follower.pending or workers_alive(m):
                return True
            new = adopt_trials(m)  # a last look: a trial may have started since
            for num in new:
                follower.add(num)
            return bool(new)

        try:
            stop = follower.follow(look=look, going=lambda: True)  # the workers end it, seen at a look
        finally:
            progress.close()
            write_manifest(m)
        return None if stop is None else stopped(self.detached(), signal.Signals(stop).name)

    def detached(self) -> str:
        ids = list(self.manifest.workers.get("ids") or []) if self.manifest else []
        return detached("Optuna workers", "the study", [ids[0].split("_", 1)[0]] if ids else ["?"], self.sweep_dir)


def detached(workers: str, work: str, arrays: list[str], sweep_dir: Path) -> str:
    """What a driver that does not wait (hydra.launcher.wait=false) says of the workers it leaves running."""
    return (f"Not waiting (hydra.launcher.wait=false): the {workers} (Slurm job(s) {' '.join(arrays)}) run {work} on "
            f"their own.\n  follow:  sweepit status {sweep_dir} --watch\n  resume:  sweepit resume {sweep_dir}\n"
            f"  cancel:  scancel {' '.join(arrays)}")


def stopped(detached: str, why: str) -> str:
    """What a driver stopped by a signal says: the workers go on."""
    return f"stopped following the workers ({why}); they go on running.\n" + "\n".join(detached.splitlines()[1:])
