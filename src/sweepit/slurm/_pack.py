"""Packed sweeps (`hydra.launcher.workers=N`), the driver's side: the jobs of each resource request go to one array of
at most N long-lived workers (`_pack_worker`). A job a worker has claimed becomes, in `sweep.json`, a job of that
worker's Slurm id, so the follower, `sweepit status`, `report` and `resume` read it as any other Slurm job.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from sweepit.errors import ConfigError, SweepStoppedError
from sweepit.results import (
    JobPaths,
    JobState,
    Progress,
    Recorder,
    read_record,
)
from sweepit.slurm import _cluster as cluster
from sweepit.slurm._budget import BUDGET_KEY, Gate, check, dry_run_line, refusal, stopped
from sweepit.slurm._follow import Follower
from sweepit.slurm._job_states import LOST, PACKED, Seen, alive_workers
from sweepit.slurm._limits import Room, dry_run_lines, open_room
from sweepit.slurm._pack_worker import PackSpec, PlannedEntry, release, scan_claims, write_plan
from sweepit.slurm._plan import PlannedJob, Planner, by_request
from sweepit.slurm._request import Request, gpu_hours, gres_times
from sweepit.slurm._submit import Task, job_name
from sweepit.slurm._task_files import start_job_dir
from sweepit.slurm._worker_driver import WorkerDriver, worker_job

log = logging.getLogger(__name__)
# Slurm states of a worker that ended while running a job, after which the job is given to another worker (at most
# MAX_RETRIES times): the worker crashed or was killed (SIGKILL: FAILED), lost its node, its memory, or was preempted
# without a requeue. Not CANCELLED (someone stopped it) nor TIMEOUT (its requeues were spent): those jobs end
# `interrupted`, and `sweepit resume` runs them again.
RETRY_STATES = ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", LOST)
MAX_RETRIES = 2


@dataclass
class Shape:
    """The jobs of one resource request, and the workers that run them."""

    index: int
    request: Request               # each job's
    jobs: list[PlannedJob]
    worker: Request                # each worker's: one task on one node, slots x the job's GPUs, its own time limit
    n_workers: int
    cores: int | None              # cpus_per_task of a worker: slots x the job's tasks x cpus_per_task

    def describe(self, slots: int) -> str:
        return (f"{len(self.jobs)} job(s) with {self.request.describe()}: {self.n_workers} worker(s) of "
                f"{self.worker.describe()}, {slots} job(s) at a time each, about "
                f"{math.ceil(len(self.jobs) / max(1, self.n_workers))} job(s) per worker")


def worker_request(r: Request, timeout_min: int, slots: int) -> Request:
    """A worker of `slots` jobs at once with request `r`: one task on one node holding the GPUs of `slots` jobs, so
    that each job has its own (a job of N ranks forks them itself, as on a workstation)."""
    if r.gres and not (r.gpus_per_node or r.gpus_per_task):  # the launcher's own --gres, its GPUs times slots
        return Request(nodes=1, tasks_per_node=1, timeout_min=timeout_min, gres=gres_times(r.gres, slots))
    return Request(nodes=1, tasks_per_node=1, timeout_min=timeout_min, gpus_per_node=r.gpus_on_node * slots or None)


class PackedSweep(WorkerDriver):
    """The driver of a packed sweep, `dry_run(jobs)` or `run(jobs)` as SlurmSweep's, and the bookkeeping of its run:
    which jobs workers have claimed (adopted into the manifest as jobs of the worker's Slurm id), which were given
    back, which arrays ran anything, which jobs were given up. `make_worker(spec)` is what each worker runs."""

    workers = "packed workers"
    work = "the sweep's jobs"

    def __init__(self, sweep: Planner, make_worker: Callable[[PackSpec], Task]) -> None:
        super().__init__(sweep)
        self.make_worker = make_worker
        self.shapes: list[Shape] = []
        self.shape_of: dict[int, int] = {}    # job -> the index of its shape
        self.room = Room(None)                # the user's queue limits (read when workers are first submitted)
        self.generation = 0                   # the plan and claims followed
        self.todo: dict[int, None] = {}       # the jobs to run, in order (a resume's: those not finished before)
        self.adopted: dict[int, str] = {}     # job -> the text of its claim when adopted (worker, when)
        self.markers: set[str] = set()        # the release markers seen
        self.ran: set[str] = set()            # arrays whose workers claimed a job
        self.given_up: set[int] = set()       # jobs no worker will run: not started, or failed
        self.follower: Follower               # set by watch()

    # -- the plan --------------------------------------------------------------------------------------------
    def plan(self, jobs: list[PlannedJob]) -> list[Shape]:
        """Each job's config and request (checked as for one Slurm job per job), grouped by request."""
        o = self.options
        max_array_size = self.sweep.plan(jobs)  # the workers compose the jobs
        part = self.sweep.facts.partition
        max_time = part.max_time_min if part is not None else None
        node_gpus = o.node_gpus or (part.gpus_per_node if part is not None else 0)
        for index, (request, group) in enumerate(by_request(jobs).items()):
            assert request is not None
            if request.nodes > 1:
                raise ConfigError(
                    f"hydra.launcher.workers packs jobs of one node, but {len(group)} job(s) (e.g. job {group[0].num}) "
                    f"ask for {request.nodes} nodes ({request.describe()}). Lower their GPU count to one node's, or "
                    "set hydra.launcher.workers=0 to submit each job as its own Slurm job.")
            if node_gpus and request.gpus_on_node * o.slots > node_gpus:
                raise ConfigError(
                    f"hydra.launcher.slots x a job's GPUs must fit on one node, at most {node_gpus} GPUs (each job a "
                    f"worker runs at once has GPUs of its own), but slots={o.slots} x {request.gpus_on_node} GPU(s) "
                    f"(job {group[0].num}) is {request.gpus_on_node * o.slots}. Lower hydra.launcher.slots to "
                    f"{node_gpus // request.gpus_on_node} or less.")
            n_workers = min(o.workers, math.ceil(len(group) / o.slots), max_array_size)
            rounds = math.ceil(len(group) / (n_workers * o.slots))
            if o.worker_timeout_min is not None:
                if o.worker_timeout_min < request.timeout_min:
                    raise ConfigError(
                        f"hydra.launcher.worker_timeout_min must be at least the jobs' own time limit, "
                        f"{request.timeout_min} min (job {group[0].num}), or no worker could start one; but got "
                        f"worker_timeout_min={o.worker_timeout_min}. Raise it, or set it to null (each worker's share "
                        "of the jobs at their time limits).")
                timeout = o.worker_timeout_min
            else:
                timeout = request.timeout_min * rounds + 1  # a minute for the worker's own start
                if max_time is not None:
                    timeout = max(min(timeout, max_time), request.timeout_min)
            cores = o.cpus_per_task * request.tasks_per_node * o.slots if o.cpus_per_task else None
            worker = worker_request(request, timeout, o.slots)
            self.shapes.append(Shape(index, request, group, worker, n_workers, cores))
            self.shape_of.update(dict.fromkeys((j.num for j in group), index))
        return self.shapes

    def dry_run(self, jobs: list[PlannedJob]) -> tuple[str, str | None]:
        """What `run` would submit: each array's sbatch script, the workers, slots and jobs per worker, and the
        GPU-hours if every worker ran to its time limit; and why the budget would refuse it (None when it would not)."""
        o = self.options
        out = []
        for i, shape in enumerate(self.plan(jobs)):
            out.append(f"# {shape.describe(o.slots)}: 1 sbatch call (jobs "
                       f"{', '.join(str(j.num) for j in shape.jobs[:20])}{', ...' if len(shape.jobs) > 20 else ''})")
            out.append(self.script(shape.worker, shape.n_workers, i, shape.cores))
        hours = gpu_hours([s.worker for s in self.shapes for _ in range(s.n_workers)])
        n_workers = sum(s.n_workers for s in self.shapes)
        out += dry_run_lines(o) + dry_run_line(o, hours)
        out.append(f"dry run: {len(jobs)} job(s) packed into {n_workers} worker(s) in {len(self.shapes)} sbatch "
                   f"call(s), at most {hours:.2f} GPU-hours (every worker to its time limit); nothing submitted. "
                   "Drop hydra.launcher.dry_run=true to submit.")
        workers = [(i, s.worker) for s in self.shapes for i in range(s.n_workers)]
        return "\n".join(out), refusal(o, workers, unit="worker")

    # -- the run ------------------------------------------------------------------------------------------------
    def run(self, jobs: list[PlannedJob]) -> dict[int, str] | None:
        """Submit the workers (or follow those still running from an earlier driver) and follow the jobs to their
        end; each job's status, or None when not waiting (`wait=false`). Raises SweepFailedError, after the results
        table, when jobs failed (and `fail_on_error`) or on Ctrl-C."""
        self.plan(jobs)
        try:
            alive = self.open()
            skipped = self.sweep.skip_finished(self.m, jobs)
            self.todo = dict.fromkeys(j.num for j in jobs if j.num not in skipped)
            # Workers of an earlier driver are followed while a job of theirs has no result yet; once each has one they
            # are only ending (a resume right after a sweep with failures: its failed jobs run in a new generation).
            if alive and any(read_record(j.job_dir).status in (None, JobState.INTERRUPTED)
                             for j in jobs if j.num in self.todo):
                self.generation = int(self.m.workers["generation"])
                log.info(f"Following the packed workers still running from before ({len(alive_workers(self.m))} of "
                         f"them); sweep dir {self.sweep_dir}")
            else:
                self._submit_plan(jobs)
            progress = Progress(len(jobs))
            progress.skip(len(skipped))
            stop = self.follow(progress)
        finally:
            self.sweep.end()
        if not self.options.wait:
            return None
        if stop is not None:
            raise SweepStoppedError(stop)
        self.sweep.finish(self.m, jobs, skipped)
        return {n: self.m.jobs[n].state for n in self.todo}

    def _submit_plan(self, jobs: list[PlannedJob]) -> None:
        """A new generation: the plan of the jobs to run, their manifest entries, one array of workers per request."""
        m, o = self.m, self.options
        wanted_of = [min(s.n_workers, math.ceil(sum(j.num in self.todo for j in s.jobs) / o.slots))
                     for s in self.shapes]
        check(o, self.sweep_dir, [(i, s.worker) for s, n in zip(self.shapes, wanted_of, strict=True)
                                  for i in range(n)], unit="worker")  # before anything is written or submitted
        self.generation = int(m.workers.get("generation", 0)) + 1 if m.workers.get(PACKED) else 1
        entries = []
        for job in jobs:
            if job.num not in m.jobs:
                m.plan(job.num, job.overrides, str(job.job_dir), JobState.NOT_STARTED)
            m.jobs[job.num].job_dir = str(job.job_dir)
            if job.num not in self.todo:
                continue
            start_job_dir(job.job_dir)
            index = self.shape_of[job.num]
            entries.append(PlannedEntry(job.num, list(job.overrides), str(job.job_dir), index, dict(job.env_set)))
            m.move(job.num, JobState.QUEUED, again=True, pid=None, started_at=None, ended_at=None, extra={
                PACKED: index, "generation": self.generation, "stdout": str(JobPaths(job.job_dir).stdout),
                "stderr": str(JobPaths(job.job_dir).stderr), **job.planned(o)})
        write_plan(self.sweep_dir, self.generation, entries, [s.request.describe() for s in self.shapes])
        m.workers = {PACKED: True, "generation": self.generation, "ids": [], "job_name": job_name(o), "slots": o.slots}
        m.write()
        self.room = open_room(o) if self.todo else Room(None)
        calls = wanted = 0
        for shape, n in zip(self.shapes, wanted_of, strict=True):
            wanted += n
            calls += bool(self.room.submit(n, partial(self.submit_workers, shape), lambda: set(m.workers["ids"]),
                                           f"the workers of {shape.request.describe()}", log.warning))
        n_workers, n_skipped = len(m.workers["ids"]), len(jobs) - len(self.todo)
        limits = self.room.limits
        log.info(f"Submitted {len(self.todo)} of {len(jobs)} job(s) packed into {n_workers} worker(s) in {calls} "
                 f"sbatch call(s)" + (f"; {n_skipped} finished before (skipped)" if n_skipped else "")
                 + (f"; more workers as the queue limit allows ({limits.full()})"
                    if limits is not None and n_workers < wanted else "")
                 + f"; sweep dir {self.sweep_dir}")

    def submit_workers(self, shape: Shape, n_workers: int) -> list[str]:
        o = self.options
        spec = PackSpec(str(self.sweep_dir), self.generation, shape.index, o.slots, o.cpus_per_task or 1,
                        shape.worker.timeout_min, shape.request.timeout_min, stderr_tail_lines=o.stderr_tail_lines,
                        gpus=shape.request.gpus_on_node,
                        gate=Gate(self.sweep_dir, shape.worker) if o.budget_gpu_hours is not None else None)
        return self.submit_array([self.make_worker(spec) for _ in range(n_workers)], shape.worker, shape.index,
                                 shape.cores)

    # -- following ------------------------------------------------------------------------------------------------
    def watch(self, follower: Follower) -> tuple[Callable[[], bool], Callable[[], bool]]:
        """Until every job of the plan has ended: at each look, the claims made since and fresh workers if needed."""
        self.follower = follower
        follower.retry = self.retry
        for num in self.todo:  # claimed under an earlier driver of this generation: followed again
            if self.m.jobs[num].extra.get("slurm_job_id"):
                self.adopted[num] = ""  # its claim is read again at the first look
                follower.add(num, counted=True)

        def look() -> bool:
            if not self.going():
                return False
            self.adopt()
            self.top_up()
            return True

        return look, self.going

    def going(self) -> bool:
        """Whether a job of the plan has not ended: counted, not listed (asked every 0.1 s, with 100,000 jobs)."""
        return len(self.follower.done) + len(self.given_up) < len(self.todo)

    def left(self) -> list[int]:
        return [n for n in self.todo if n not in self.follower.done and n not in self.given_up]

    def adopt(self) -> None:
        """Jobs claimed since the last look become jobs of their worker's Slurm id; jobs given back (a worker stopped
        for a requeue) are queued again."""
        m, follower = self.m, self.follower
        claimed, present = scan_claims(self.sweep_dir, self.generation, self.adopted, self.markers)
        changed = []
        for num in [n for n in self.adopted if n not in present and n not in follower.done]:
            if self._unadopt(num):
                changed.append(num)
        for num, (worker, _, text) in sorted(claimed.items()):
            entry = m.jobs.get(num)
            if num not in self.todo or entry is None or entry.extra.get(PACKED) is None or num in follower.done:
                continue
            entry.extra.update(worker_job(worker, m))
            # Queued until the follower sees it started: a worker claims one job ahead of a free slot.
            m.move(num, JobState.QUEUED, started_at=None, ended_at=None)
            self.ran.add(cluster.array_id(worker))
            if num not in follower.pending:
                follower.add(num, counted=True)
            self.adopted[num] = text
            changed.append(num)
        if changed:
            m.write(changed)

    def _unadopt(self, num: int) -> bool:
        """Job `num` back to the queue, no worker's job any more; False when its own record of its end came meanwhile
        (the ledger's `requeue` refuses: that end stands, and the follower takes it)."""
        if not self.m.requeue(num):
            return False
        entry = self.m.jobs[num]
        for key in ("slurm_job_id", "slurm_array_job_id", "slurm_job_name", "slurm_state", "node"):
            entry.extra.pop(key, None)
        self.follower.drop(num)
        self.adopted.pop(num, None)
        return True

    def retry(self, num: int, seen: Seen) -> bool:
        """The follower's hook for a job that has ended: True (and the job given back) when its worker ended under it
        for a reason another worker need not share (RETRY_STATES), at most MAX_RETRIES times."""
        entry = self.m.jobs[num]
        if entry.extra.get(PACKED) is None or not seen.final or not (seen.dead or seen.state == JobState.INTERRUPTED):
            return False
        retries = int(entry.extra.get("retries") or 0)
        if seen.slurm_state not in RETRY_STATES or retries >= MAX_RETRIES:
            return False
        worker = entry.extra.get("slurm_job_id")
        if not self._unadopt(num):
            return False  # it ended by its own record meanwhile
        release(self.sweep_dir, self.generation, num)
        entry.extra["retries"] = retries + 1
        self.m.write([num])
        self.follower.say(f"sweepit: job {num}: its worker {worker} ended ({seen.slurm_state}) while running it; "
                          f"given to another worker (retry {retries + 1} of {MAX_RETRIES})")
        return True

    def top_up(self) -> None:
        """Fresh workers for a request whose workers have all ended with jobs unclaimed; or, when its last array
        ended without starting any job, those jobs recorded as failed."""
        unclaimed = [n for n in self.left() if n not in self.adopted]
        if not unclaimed:
            return
        by_shape: dict[int, list[int]] = {}
        for num in unclaimed:
            by_shape.setdefault(self.shape_of[num], []).append(num)
        alive = alive_workers(self.m)
        for index, nums in by_shape.items():
            arrays = [a for a, info in (self.m.workers.get("arrays") or {}).items() if int(info["shape"]) == index]
            shape = self.shapes[index]
            wanted = min(shape.n_workers, math.ceil(len(nums) / self.options.slots))
            n_alive = sum(cluster.array_id(i) in arrays for i in alive)
            if n_alive:  # some held back by the queue limit: more as room frees
                if self.room.limits is not None and n_alive < wanted:
                    self._more_workers(shape, wanted - n_alive, len(nums))
                continue
            self.adopt()  # a job claimed (and ended) since the last look counts
            nums = [n for n in nums if n not in self.adopted]
            if not nums:
                continue
            last = arrays[-1] if arrays else None
            cancelled = self._cancelled(last) if last is not None else None
            if cancelled is not None or stopped(self.sweep_dir):
                why = (f"worker {cancelled} was cancelled" if cancelled is not None else
                       f"the GPU-hour budget is reached ({BUDGET_KEY})")
                self.follower.say(f"sweepit: {why}: {len(nums)} job(s) of request "
                                  f"{self.shapes[index].request.describe()} not started (`sweepit resume "
                                  f"{self.sweep_dir}` runs them)")
                for num in nums:
                    self.m.move(num, JobState.NOT_STARTED)
                    self.given_up.add(num)
                    self.m.jobs[num].extra["not_started"] = why
                    self.follower.progress.skip()
                self.m.write(nums)
                continue
            if last is not None and last not in self.ran:
                logs = self.m.workers["stderr"].get(self.m.workers["arrays"][last]["ids"][0], "?")
                error = (f"no packed worker started this job: the workers of Slurm job {last} ended without "
                         f"starting any (their log: {logs}); `sweepit resume {self.sweep_dir}` submits new ones")
                for num in nums:
                    self._give_up(num, error)
                continue
            n = min(shape.n_workers, math.ceil(len(nums) / self.options.slots))
            self._more_workers(shape, n, len(nums), fresh=bool(arrays))

    def _more_workers(self, shape: Shape, n: int, n_jobs: int, fresh: bool = False) -> None:
        """Submit up to `n` more workers for `shape`, as many as the queue limits leave room for."""
        ids = self.room.submit(n, partial(self.submit_workers, shape), lambda: alive_workers(self.m), "more workers",
                               self.follower.say)
        if not ids:
            return
        why = "left unclaimed by workers that ended" if fresh else "waiting for workers"
        self.follower.say(f"sweepit: {n_jobs} job(s) of request {shape.request.describe()} {why}: {len(ids)} "
                          f"{'fresh' if fresh else 'more'} worker(s) submitted (Slurm job {cluster.array_id(ids[0])})")

    def _cancelled(self, array: str) -> str | None:
        """A worker of `array` that ended CANCELLED (someone stopped the workers: no fresh ones then), or None."""
        ids = [str(i) for i in self.m.workers["arrays"][array]["ids"]]
        rows = cluster.squeue(ids) or {}
        missing = [i for i in ids if i not in rows]
        if missing:
            rows.update(cluster.sacct(missing) or {})
        return next((i for i in ids if (row := rows.get(i)) is not None and row.state == "CANCELLED"), None)

    def _give_up(self, num: int, error: str) -> None:
        self.m.fail(num, error, Recorder.PACKED_DRIVER)
        self.given_up.add(num)
        self.follower.progress.start()
        self.follower.progress.finish(num, JobState.FAILED, None)
        self.m.write([num])
