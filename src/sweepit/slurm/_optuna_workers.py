"""Optuna's worker mode on Slurm (`hydra.sweeper.workers=N`), the driver's side: N long-lived workers in one array,
each running trial after trial. A worker's claim of a trial's job records the job's directory as it starts
(`sweepit.search.started_trials`); each such job becomes a job of its worker's Slurm id in `sweep.json`, so that the
follower, `sweepit status` and `report` see worker trials as per-trial jobs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from sweepit.errors import ConfigError
from sweepit.results import JobState, Ledger
from sweepit.search import started_trials
from sweepit.slurm._budget import for_grids_only
from sweepit.slurm._cluster import array_id
from sweepit.slurm._follow import Follower
from sweepit.slurm._job_states import WORKER_TRIAL, workers_alive
from sweepit.slurm._limits import open_room
from sweepit.slurm._plan import PlannedJob
from sweepit.slurm._submit import Task, link_logs
from sweepit.slurm._worker_driver import WorkerDriver, worker_job

log = logging.getLogger(__name__)


def adopt_trials(m: Ledger) -> list[int]:
    """Jobs that workers started and the manifest does not list yet, added as running jobs of their worker (logs
    linked); their numbers."""
    workers = m.workers
    if not workers:
        return []
    new = started_trials(Path(m.sweep_dir), m.jobs)
    for num, record in new.items():
        wid, path = str(record.get("worker")), str(record.get("job_dir"))
        stdout, stderr = workers.get("stdout", {}).get(wid), workers.get("stderr", {}).get(wid)
        m.plan(num, list(record.get("overrides") or []), path, extra={
            **worker_job(wid, m), "stdout": stdout, "stderr": stderr, WORKER_TRIAL: record.get("trial")})
        m.move(num, JobState.RUNNING, started_at=record.get("started_at"))
        if stdout and stderr:
            with contextlib.suppress(OSError):
                link_logs(Path(path), Path(stdout), Path(stderr))
    return list(new)


class WorkerSweep(WorkerDriver):
    """The driver of an Optuna study's workers (what `sweepit.search.drive` needs): submit the array (or follow the
    one still alive), then follow the trials it runs until every worker has ended."""

    workers = "Optuna workers"
    work = "the study"

    def plan(self, job: PlannedJob) -> None:
        """The workers' request: the launcher's, or the first point's job config's (`gpus_key`, `timeout_key`),
        checked against the partition; one task each (a worker runs its trials one after the other)."""
        for_grids_only(self.sweep.options)
        self.max_array_size = self.sweep.plan([job])
        assert job.request is not None
        r = job.request
        if r.nodes * r.tasks_per_node != 1:
            raise ConfigError(
                "hydra.sweeper.workers runs each worker as one Slurm task, but the job's request is "
                f"{r.nodes} node(s) x {r.tasks_per_node} task(s) ({r.describe()}).\n"
                "Ask one task per job (trainer.gpus=1, hydra.launcher.tasks_per_node=1, nodes=1), or set "
                "hydra.sweeper.workers=0.\n"
                "See docs/troubleshooting.md#optuna-worker-one-task")
        self.request = r

    def dry_run(self, n_workers: int) -> str:
        """The workers' sbatch script (an array of `n_workers`), instead of submitting it."""
        return (f"# {n_workers} Optuna worker(s), each {self.request.describe()}: 1 sbatch call\n"
                f"{self.script(self.request, n_workers)}\ndry run: nothing submitted. Drop hydra.launcher.dry_run=true "
                "to submit.")

    def submit(self, tasks: list[Task]) -> list[str]:
        """One sbatch call: an array of the workers (a plain job for one)."""
        if len(tasks) > self.max_array_size:
            raise ConfigError(f"hydra.sweeper.workers must be at most the cluster's MaxArraySize "
                              f"({self.max_array_size}), but got workers={len(tasks)}; lower it.")
        o = self.options
        self.m.workers = {}
        # As many as there is room for: fewer workers ask the study for the same trials.
        ids = open_room(o).submit_waiting(len(tasks), lambda n: self.submit_array(tasks[:n], self.request), set,
                                          "the Optuna workers", o.poll_interval_s, self.sweep.lock.touch)
        log.info(f"Submitted {len(ids)} Optuna worker(s) to Slurm in 1 sbatch call (job {array_id(ids[0])}); "
                 f"sweep dir {self.sweep_dir}")
        return ids

    def watch(self, follower: Follower) -> tuple[Callable[[], bool], Callable[[], bool]]:
        """Until every worker has ended and every trial they started is recorded."""
        for num, entry in sorted(self.m.jobs.items()):  # an earlier driver's trials that had not ended when it stopped
            if entry.extra.get(WORKER_TRIAL) is not None and JobState.is_live(entry.state):
                follower.add(num)

        def adopt() -> bool:
            new = adopt_trials(self.m)
            for num in new:
                follower.add(num)
            return bool(new)

        def look() -> bool:  # once every worker has ended, a last look: a trial may have started since
            return adopt() or bool(follower.pending) or workers_alive(self.m) or adopt()

        return look, lambda: True  # the workers end it, seen at a look
