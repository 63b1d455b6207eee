"""Worker mode on Slurm: N long-lived workers in one job array, each running trial after trial in its own task
(the worker engine, `sweepit.slurm._engine`, over `sweepit.search.StudySource`); the driver only submits them and
follows (`sweepit.slurm._worker_driver`, the one driver of packed and Optuna workers).

A worker's claim of a trial's job records the job's directory as it starts (`sweepit.search.started_trials`); the
driver, and `sweepit status` when no driver runs, adopt each such job into `sweep.json` with its worker's Slurm id
(`adopt_trials`). So the follower, `sweepit status`, `sweepit report` and the results table see worker
trials as they see per-trial jobs: a job's own result.json settles it, and a trial whose worker Slurm ended
before it wrote one gets one written with Slurm's word (scancel, time limit, node failure).

`sweep.json` keeps the workers' array under `workers` (ids, job name, logs): a driver started again on the
directory follows the workers still alive instead of submitting new ones.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from sweepit.errors import ConfigError
from sweepit.results import JobEntry, Manifest, Progress, State
from sweepit.search import started_trials
from sweepit.slurm._limits import open_room, wait_for_room
from sweepit.slurm._submit import PlannedJob, Task, link_logs
from sweepit.slurm._worker_driver import WorkerDriver, workers_alive

log = logging.getLogger(__name__)
WORKER_TRIAL = "worker_trial"  # manifest extra of a worker's job: its trial number (no return value to wait for)


def adopt_trials(m: Manifest) -> list[int]:
    """Jobs that workers started and the manifest does not list yet, added as running jobs of their worker (logs
    linked); their numbers."""
    workers = m.workers
    if not workers:
        return []
    new = started_trials(Path(m.sweep_dir), m.jobs)
    for num, record in new.items():
        wid, path = str(record.get("worker")), str(record.get("job_dir"))
        stdout, stderr = workers.get("stdout", {}).get(wid), workers.get("stderr", {}).get(wid)
        m.jobs[num] = JobEntry(num=num, overrides=list(record.get("overrides") or []), job_dir=path,
                               state=State.RUNNING, started_at=record.get("started_at"), extra={
                                   "slurm_job_id": wid, "slurm_array_job_id": wid.split("_", 1)[0],
                                   "slurm_job_name": workers.get("job_name"), "stdout": stdout,
                                   "stderr": stderr, WORKER_TRIAL: record.get("trial")})
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
        return (f"# {n_workers} Optuna worker(s), each {self.request.describe()}: 1 sbatch call\n"
                f"{self.script(self.request, n_workers)}\ndry run: nothing submitted. Drop hydra.launcher.dry_run=true "
                "to submit.")

    def open(self) -> bool:
        """Hold the sweep's lock and read its manifest; True when workers of an earlier driver are still alive
        (then they are followed, and none is submitted)."""
        return workers_alive(self.begin())

    def submit(self, tasks: list[Task]) -> list[str]:
        """One sbatch call: an array of the workers (a plain job for one)."""
        if len(tasks) > self.max_array_size:
            raise ConfigError(f"hydra.sweeper.workers must be at most the cluster's MaxArraySize "
                              f"({self.max_array_size}), but got workers={len(tasks)}; lower it.")
        o = self.options
        room = open_room(o)
        if room is not None:  # fewer workers ask the study for the same trials
            tasks = tasks[:wait_for_room(room, len(tasks), o.poll_interval_s, self.sweep.lock.touch)]
        self.m.workers = {}
        ids = self.submit_array(tasks, self.request)
        log.info(f"Submitted {len(ids)} Optuna worker(s) to Slurm in 1 sbatch call (job {ids[0].split('_')[0]}); "
                 f"sweep dir {self.sweep_dir}")
        return ids

    @property
    def waits(self) -> bool:
        return bool(self.options.wait)

    def follow(self) -> str | None:
        """Follow the trials the workers start until every worker has ended and every trial is recorded; what to
        say when a stop signal ended the following early, else None."""
        m = self.m
        if not self.options.wait:
            print(self.detached(), flush=True)
            return None
        follower = self.follower(Progress(0))
        for num, entry in sorted(m.jobs.items()):  # an earlier driver's trials that had not ended when it stopped
            if entry.extra.get(WORKER_TRIAL) is not None and entry.state in (State.QUEUED, State.RUNNING):
                follower.add(num)

        def adopt() -> bool:
            new = adopt_trials(m)
            for num in new:
                follower.add(num)
            return bool(new)

        def look() -> bool:  # once every worker has ended, a last look: a trial may have started since
            return adopt() or bool(follower.pending) or workers_alive(m) or adopt()

        return self.follow_until(follower, look, going=lambda: True)  # the workers end it, seen at a look
