"""The one engine of long-lived Slurm workers, packed grids' and Optuna's: a loop over a source of work
(`sweepit.results.WorkSource`: a grid's plan, `GridSource`; a study, `sweepit.search.StudySource`), each job forked
from the worker's warm interpreter (the local launcher's pool, `slots` at once, each on `gpus` of the worker's GPUs) and
run by `run`. A job taken and never started, or stopped for a requeue, is given back to the source for a worker to take
again.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from sweepit._host import now_iso
from sweepit.local import ForkServer, GpuPool, Job, Pool, PoolHooks, end_facts, visible_gpus
from sweepit.results import (
    WAIT,
    JobOutcome,
    JobState,
    Recorder,
    Work,
    WorkSource,
    heartbeat,
    record_end,
)
from sweepit.slurm import _cluster as cluster
from sweepit.slurm._task_files import record_task, start_job_dir

log = logging.getLogger(__name__)
WAIT_S = 2.0  # how often an idle worker asks its source again when it said WAIT


def worker_id() -> str:
    """This Slurm task's job id as submitit and squeue print it: `123_4` in an array, else `123`."""
    array, index = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{index}" if array and index else os.environ.get("SLURM_JOB_ID", f"local-{os.getpid()}")


class Engine(PoolHooks):
    """One worker: `run` until its source has nothing left (or its time is up, or a signal stops it);
    `stop_for_requeue` before Slurm requeues it. `compose(job, work)` sets the job's directory (and what the worker
    knows of its config); `run(job)` runs it in its process, forked by `server` (the caller's, forked before it read
    any work), else by a fork server of this engine's, forked as `run` starts."""

    def __init__(self, source: WorkSource, worker: str, sweep_dir: Path, compose: Callable[[Job, Work], None],
                 run: Callable[[Job], JobOutcome], *, recorded_by: Recorder, slots: int = 1, gpus: int = 0,
                 threads: int = 1, timeout_min: float | None = None, job_timeout_min: float | None = None,
                 term_grace_s: float = 5.0, stderr_tail_lines: int = 50, clock: Callable[[], float] = time.time,
                 wait_s: float = WAIT_S, server: ForkServer | None = None) -> None:
        self.source, self.worker, self.sweep_dir = source, worker, Path(sweep_dir)
        self.compose, self.recorded_by = compose, recorded_by
        self.slots, self.timeout_min, self.job_timeout_min = slots, timeout_min, job_timeout_min
        self.stderr_tail_lines = stderr_tail_lines
        self.clock, self.wait_s = clock, wait_s
        self.works: dict[int, Work] = {}
        self.n_taken = 0
        self.started_at: dict[int, str] = {}
        self.walls: list[float] = []
        self.n_run = 0

        # Each job its own GPUs of those Slurm gave the worker, as the local launcher hands them out.
        visible = visible_gpus() if gpus else []
        if len(visible) < gpus:
            log.warning(f"worker {worker}: it sees {len(visible)} GPU(s) (CUDA_VISIBLE_DEVICES="
                        f"{os.environ.get('CUDA_VISIBLE_DEVICES')}), fewer than the {gpus} each of its jobs asks for: "
                        "its jobs share the GPUs it sees")
        self.gpus = gpus if len(visible) >= gpus else 0
        self.own_server = server is None
        self.pool = Pool(slots, GpuPool(visible if self.gpus else []), threads=threads, echo=False,
                         term_grace_s=term_grace_s, server=ForkServer(run) if server is None else server, hooks=self,
                         clock_ticks=False)

    def run(self) -> int:
        """Take and run work until the source has none, or the next job would not fit in the worker's time (packed
        grids, `job_timeout_min`: after its first round of jobs); how many jobs ran."""
        source, pool = self.source, self.pool
        end = None
        if self.job_timeout_min is not None:
            fallback = self.clock() + (self.timeout_min or 0) * 60.0
            end = cluster.end_time(self.worker) or fallback
        out_of_time = False
        if not pool.server.alive:
            pool.server.start()  # before the source is opened (a grid's plan read): no job's fork copies it
        with heartbeat(self.sweep_dir, self.worker):
            source.open(self.worker)
            pool.open()
            try:
                while True:
                    waiting = False
                    while pool.stop_signal is None and len(pool.running) + len(pool.queue) < self.slots + source.ahead:
                        if end is not None and self._out_of_time(end):
                            out_of_time = True
                            break
                        work = source.take()
                        if work is None or work is WAIT:
                            waiting = work is WAIT
                            break
                        assert isinstance(work, Work)
                        self.works[work.num] = work
                        self.n_taken += 1
                        pool.submit(Job(num=work.num, overrides=list(work.overrides)))
                    if pool.busy():
                        pool.step()
                    elif waiting and pool.stop_signal is None:
                        time.sleep(self.wait_s)
                    else:
                        break
            finally:
                for job in pool.queue:  # taken, never started (out of time, or stopped): for others to run
                    source.give_back(self.works.pop(job.num))
                try:
                    pool.close()
                finally:
                    if self.own_server:
                        pool.server.close()
        why = (f"the next job (expected {self.expected_s():.0f} s) would not fit in its time left" if out_of_time
               else "no job left")
        log.info(f"worker {self.worker}: done after {self.n_run} job(s): "
                 + ("stopped by a signal" if pool.stop_signal is not None else why))
        return self.n_run

    def _out_of_time(self, end: float) -> bool:
        """The first round of jobs always starts (the allocation is at least one job's time limit); a job that waits
        for a slot starts about one expected time from now."""
        waits = len(self.pool.running) + len(self.pool.queue) >= self.slots
        need = self.expected_s() * (2 if waits else 1)
        return self.n_taken >= self.slots and self.clock() + need > end

    def expected_s(self) -> float:
        """A job's expected time: the mean of those this worker ran, else the jobs' time limit."""
        return sum(self.walls) / len(self.walls) if self.walls else (self.job_timeout_min or 0) * 60.0

    # -- the pool's hooks ----------------------------------------------------------------------------------------
    def prepare(self, job: Job) -> bool:
        work = self.works[job.num]
        try:
            self.compose(job, work)
        except Exception as e:
            if not self.source.refused(work, e):
                raise
            self.works.pop(job.num)
            return False
        work.job_dir = str(job.job_dir)
        job.job_env = dict(work.env)
        job.n_gpus = self.gpus
        return True

    def before_fork(self, job: Job) -> None:
        start_job_dir(job.job_dir)  # a stale result of an earlier run must not stand for this one
        self.source.started(self.works[job.num])
        record_task(job.job_dir, 0, job.gpus if self.pool.use_gpus else None)

    def started(self, job: Job) -> None:
        self.started_at[job.num] = now_iso()
        log.info(f"worker {self.worker}: job {job.num} started ({' '.join(job.overrides)})")

    def ended(self, job: Job) -> None:
        seen, stderr_tail, facts = end_facts(job, self.started_at.get(job.num), self.stderr_tail_lines)
        status = record_end(job.job_dir, seen, self.recorded_by, stderr_tail=stderr_tail, **facts).status or seen
        self.n_run += 1
        if JobState.is_success(status) and job.wall_time_s is not None:
            self.walls.append(job.wall_time_s)
        log.info(f"worker {self.worker}: job {job.num} {status} after {job.wall_time_s or 0:.1f} s")
        self.source.ended(self.works.pop(job.num), job.reply.returned if job.reply is not None else None)
        job.config = None  # a worker of thousands of jobs keeps none of their configs

    def stop_for_requeue(self) -> None:
        """USR2 (time limit, preemption) or a requeue: stop the running jobs (SIGTERM: they record themselves
        `interrupted`; their last epoch checkpoint stays) and give them back to be taken again."""
        running = list(self.pool.running.values())
        works = {job.num: self.works.get(job.num) for job in running}
        self.pool.stop()  # then records each job (the hooks: the source hears it ended)
        for work in works.values():
            if work is not None:
                self.source.give_back(work)
        log.info(f"worker {self.worker}: stopped for a requeue; job(s) {', '.join(str(j.num) for j in running) or '-'} "
                 "given back to be run again")
