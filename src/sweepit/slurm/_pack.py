"""Packed sweeps (`hydra.launcher.workers=N`), the driver's side: the jobs of each resource request go to one array
of at most N long-lived workers (`sweepit.slurm._pack_worker`), which claim and run them one after another.

The driver plans as for one Slurm job per job (each job's config and request, checked), writes the plan for the
workers, submits one array per request, then follows: a job claimed by a worker becomes, in `sweep.json`, a job
of that worker's Slurm id (`stdout.log`/`stderr.log` are the job's own files), so the follower, `sweepit status`,
`report` and `resume` read it as any other Slurm job; one that no worker has claimed yet is `queued`. When every
worker of a request has ended and some of its jobs are unclaimed (a worker ended because the next job would not fit
in its time), fresh workers are submitted for them; an array that ended without starting any job is not replaced:
its jobs are recorded as failed with the workers' log to read.
"""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sweepit._host import now_iso
from sweepit.errors import ConfigError, QueueLimitError, SweepFailedError, SweepStoppedError
from sweepit.results import (
    JobEntry,
    JobPaths,
    Manifest,
    Progress,
    Recorder,
    State,
    Status,
    failure_report,
    is_finished,
    read_record,
    record_failure,
    start_clean,
    summarize,
    write_manifest,
)
from sweepit.slurm import _cluster as cluster
from sweepit.slurm._follow import Follower
from sweepit.slurm._job_states import LOST, PACKED, Seen
from sweepit.slurm._limits import Room, dry_run_lines, held_for_limit, open_room
from sweepit.slurm._pack_worker import PackSpec, PlannedEntry, release, scan_claims, write_plan
from sweepit.slurm._request import Request, gpu_hours
from sweepit.slurm._submit import PlannedJob, Task, job_name
from sweepit.slurm._worker_driver import WorkerDriver, alive_workers

if TYPE_CHECKING:
    from sweepit.slurm._slurm_sweep import SlurmSweep

log = logging.getLogger(__name__)


@dataclass
class Shape:
    """The jobs of one resource request, and the workers that run them."""

    index: int
    request: Request               # each job's
    jobs: list[PlannedJob]
    worker: Request                # each worker's: one task on one node, the job's GPUs, its own time limit
    n_workers: int
    cores: int | None              # cpus_per_task of a worker: slots x the job's tasks x cpus_per_task
    threads: int                   # torch threads of one job

    def describe(self, slots: int) -> str:
        return (f"{len(self.jobs)} job(s) with {self.request.describe()}: {self.n_workers} worker(s) of "
                f"{self.worker.describe()}, {slots} job(s) at a time each, about "
                f"{math.ceil(len(self.jobs) / max(1, self.n_workers))} job(s) per worker")


def worker_request(r: Request, timeout_min: int) -> Request:
    """A worker of jobs with request `r`: one task on one node holding all the job's GPUs (a job of N ranks forks
    them itself, as on a workstation)."""
    if r.gres and not (r.gpus_per_node or r.gpus_per_task):  # the launcher's own --gres, as it is
        return Request(nodes=1, tasks_per_node=1, timeout_min=timeout_min, gres=r.gres)
    return Request(nodes=1, tasks_per_node=1, timeout_min=timeout_min, gpus_per_node=r.gpus_on_node or None)


class PackedSweep(WorkerDriver):
    """The driver of a packed sweep: `dry_run(jobs)` or `run(jobs)`, as SlurmSweep's. `make_worker(spec)` is what
    each worker's Slurm task runs (pickled by submitit)."""

    workers = "packed workers"
    work = "the sweep's jobs"

    def __init__(self, sweep: SlurmSweep, make_worker: Callable[[PackSpec], Task]) -> None:
        super().__init__(sweep)
        self.make_worker = make_worker
        self.shapes: list[Shape] = []
        self.max_array_size = 0
        self.room: Room | None = None  # the user's queue limits (read when workers are first submitted)

    # -- the plan --------------------------------------------------------------------------------------------
    def plan(self, jobs: list[PlannedJob]) -> list[Shape]:
        """Each job's config and request (checked as for one Slurm job per job), grouped by request."""
        o = self.options
        self.max_array_size = self.sweep.plan(jobs, release=True)  # the workers compose the jobs again
        groups: dict[Request, list[PlannedJob]] = {}
        for job in jobs:
            assert job.request is not None
            groups.setdefault(job.request, []).append(job)
        part = self.sweep.facts.partition
        max_time = part.max_time_min if part is not None else None
        shapes = []
        for index, (request, group) in enumerate(groups.items()):
            if request.nodes > 1:
                raise ConfigError(
                    f"hydra.launcher.workers packs jobs of one node, but {len(group)} job(s) (e.g. job {group[0].num}) "
                    f"ask for {request.nodes} nodes ({request.describe()}). Lower their GPU count to one node's, or "
                    "set hydra.launcher.workers=0 to submit each job as its own Slurm job.")
            n_workers = min(o.workers, math.ceil(len(group) / o.slots), self.max_array_size)
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
            tasks = request.nodes * request.tasks_per_node
            cores = o.cpus_per_task * tasks * o.slots if o.cpus_per_task else None
            threads = o.cpus_per_task or 1
            shapes.append(Shape(index, request, group, worker_request(request, timeout), n_workers, cores, threads))
        self.shapes = shapes
        return shapes

    def dry_run(self, jobs: list[PlannedJob]) -> str:
        """What `run` would submit: each array's sbatch script, the workers, slots and jobs per worker, and the
        GPU-hours if every worker ran to its time limit."""
        o = self.options
        out = []
        for i, shape in enumerate(self.plan(jobs)):
            out.append(f"# {shape.describe(o.slots)}: 1 sbatch call (jobs "
                       f"{', '.join(str(j.num) for j in shape.jobs[:20])}{', ...' if len(shape.jobs) > 20 else ''})")
            out.append(self.script(shape.worker, shape.n_workers, i, shape.cores))
        hours = gpu_hours([s.worker for s in self.shapes for _ in range(s.n_workers)])
        n_workers = sum(s.n_workers for s in self.shapes)
        out += dry_run_lines(o)
        out.append(f"dry run: {len(jobs)} job(s) packed into {n_workers} worker(s) in {len(self.shapes)} sbatch "
                   f"call(s), at most {hours:.2f} GPU-hours (every worker to its time limit); nothing submitted. "
                   "Drop hydra.launcher.dry_run=true to submit.")
        return "\n".join(out)

    # -- the run ------------------------------------------------------------------------------------------------
    def run(self, jobs: list[PlannedJob]) -> dict[int, str] | None:
        """Submit the workers (or follow those still running from an earlier driver) and follow the jobs to their
        end; each job's status, or None when not waiting (`wait=false`). Raises SweepFailedError, after the results
        table, when jobs failed (and `fail_on_error`) or on Ctrl-C."""
        self.plan(jobs)
        o = self.options
        m = self.begin()
        try:
            skipped = {j.num for j in jobs if o.resume and is_finished(j.job_dir)}
            # Workers of an earlier driver are followed while a job of theirs has no result yet; once each has one they
            # are only ending (a resume right after a sweep with failures: its failed jobs run in a new generation).
            unended = any(read_record(j.job_dir).status in (None, Status.INTERRUPTED)
                          for j in jobs if j.num not in skipped)
            alive = alive_workers(m) if unended else set()
            if alive:
                generation = int(m.workers["generation"])
                log.info(f"Following the packed workers still running from before ({len(alive)} of them); sweep dir "
                         f"{self.sweep_dir}")
            else:
                generation = self._submit_plan(m, jobs, skipped)
            statuses = self._follow(m, jobs, skipped, generation) if o.wait else None
        finally:
            if self.sweep.own_lock:
                self.sweep.lock.release()
        if statuses is None:
            print(self.detached(), flush=True)
            return None
        if o.print_summary:
            print(summarize(self.sweep_dir), flush=True)
        report = failure_report(m, jobs, statuses, skipped, None, o.fail_on_error)
        if report is not None:
            raise SweepFailedError(report)
        return statuses

    def _submit_plan(self, m: Manifest, jobs: list[PlannedJob], skipped: set[int]) -> int:
        """A new generation: the plan of the jobs to run, their manifest entries, one array of workers per request."""
        generation = int(m.workers.get("generation", 0)) + 1 if m.workers.get(PACKED) else 1
        to_run = [j for j in jobs if j.num not in skipped]
        for job in jobs:
            entry = m.jobs.setdefault(job.num, JobEntry(job.num, job.overrides, str(job.job_dir)))
            entry.job_dir = str(job.job_dir)
            if job.num in skipped:
                entry.state = read_record(job.job_dir).status or Status.COMPLETED
        shape_of = {j.num: s.index for s in self.shapes for j in s.jobs}
        entries = []
        for job in to_run:
            start_clean(job.job_dir)  # checkpoint.pt is kept to resume
            shutil.rmtree(JobPaths(job.job_dir).tasks, ignore_errors=True)  # its task file says when it started
            entries.append(PlannedEntry(job.num, list(job.overrides), str(job.job_dir), shape_of[job.num],
                                        dict(job.env_set)))
            entry = m.jobs[job.num]
            entry.state, entry.pid, entry.started_at, entry.ended_at = State.QUEUED, None, None, None
            entry.extra = {PACKED: shape_of[job.num], "generation": generation,
                           "stdout": str(JobPaths(job.job_dir).stdout), "stderr": str(JobPaths(job.job_dir).stderr),
                           "gpus": job.request.n_gpus if job.request else None,
                           "timeout_min": job.request.timeout_min if job.request else None,
                           "metric": job.metric, "direction": job.direction,
                           "result_grace_s": self.options.result_grace_s}
        write_plan(self.sweep_dir, generation, entries, [s.request.describe() for s in self.shapes])
        m.workers = {PACKED: True, "generation": generation, "ids": [], "job_name": job_name(self.options),
                     "slots": self.options.slots}
        write_manifest(m)
        left = {s.index: sum(1 for j in s.jobs if j.num not in skipped) for s in self.shapes}
        self.room = open_room(self.options) if to_run else None
        free = self.room.free() if self.room is not None else None
        calls = wanted = 0
        for shape in self.shapes:
            n = min(shape.n_workers, math.ceil(left[shape.index] / self.options.slots))
            wanted += n
            if free is not None:
                n = min(n, free)
                free -= n
            if n:
                try:
                    self.submit_workers(shape, generation, n)
                except QueueLimitError as e:
                    log.warning("sweepit: " + held_for_limit(e, bool(m.workers["ids"]),
                                                             f"the workers of {shape.request.describe()}"))
                    break
                calls += 1
        n_workers = len(m.workers["ids"])
        log.info(f"Submitted {len(to_run)} of {len(jobs)} job(s) packed into {n_workers} worker(s) in {calls} sbatch "
                 f"call(s)" + (f"; {len(skipped)} finished before (skipped)" if skipped else "")
                 + (f"; more workers as the queue limit allows ({self.room.full()})"
                    if self.room is not None and n_workers < wanted else "")
                 + f"; sweep dir {self.sweep_dir}")
        return generation

    def submit_workers(self, shape: Shape, generation: int, n_workers: int) -> list[str]:
        o = self.options
        spec = PackSpec(str(self.sweep_dir), generation, shape.index, o.slots, shape.threads,
                        shape.worker.timeout_min, shape.request.timeout_min, stderr_tail_lines=o.stderr_tail_lines)
        return self.submit_array([self.make_worker(spec) for _ in range(n_workers)], shape.worker, shape.index,
                                 shape.cores)

    # -- following ------------------------------------------------------------------------------------------------
    def _follow(self, m: Manifest, jobs: list[PlannedJob], skipped: set[int], generation: int) -> dict[int, str]:
        """Follow until every job of the plan has ended (or a stop signal: then raise); each job's status."""
        progress = Progress(len(jobs))
        progress.skip(len(skipped))
        follower = self.follower(progress)
        following = _Following(self, m, generation, [j.num for j in jobs if j.num not in skipped], follower)
        def look() -> bool:
            if not following.going():
                return False
            following.adopt()
            following.top_up()
            return True

        stop = self.follow_until(follower, look, following.going)
        if stop is not None:
            raise SweepStoppedError(stop)
        return {**follower.statuses, **following.given_up}


# Slurm states of a worker that ended while running a job, after which the job is given to another worker (at most
# MAX_RETRIES times): the worker crashed or was killed (SIGKILL: FAILED), lost its node, its memory, or was preempted
# without a requeue. Not CANCELLED (someone stopped it) nor TIMEOUT (its requeues were spent): those jobs end
# `interrupted`, and `sweepit resume` runs them again.
RETRY_STATES = ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", LOST)
MAX_RETRIES = 2


class _Following:
    """The driver's bookkeeping of one packed run: which jobs workers have claimed (adopted into the manifest as
    jobs of the worker's Slurm id), which were given back, which arrays ran anything, which jobs were given up."""

    def __init__(self, sweep: PackedSweep, m: Manifest, generation: int, todo: list[int], follower: Follower) -> None:
        self.sweep, self.m, self.generation, self.todo, self.follower = sweep, m, generation, todo, follower
        self.todo_set = set(todo)  # a resumed driver's: the jobs that had not finished (claims of others are old)
        self.adopted: dict[int, str] = {}     # job -> the text of its claim when adopted (worker, when)
        self.markers: set[str] = set()        # the release markers seen
        self.ran: set[str] = set()            # arrays whose workers claimed a job
        self.given_up: dict[int, str] = {}
        self.refused: set[str] | None = None  # the workers in the queue when sbatch last refused more for a limit
        self.shape_of = {j.num: s.index for s in sweep.shapes for j in s.jobs}
        follower.retry = self.retry
        for num in todo:  # claimed under an earlier driver of this generation: followed again
            if m.jobs[num].extra.get("slurm_job_id"):
                self.adopted[num] = ""  # its claim is read again at the first look
                follower.add(num, counted=True)

    def going(self) -> bool:
        """Whether a job of the plan has not ended: counted, not listed (asked every 0.1 s, with 100,000 jobs)."""
        return len(self.follower.statuses) + len(self.given_up) < len(self.todo)

    def left(self) -> list[int]:
        return [n for n in self.todo if n not in self.follower.statuses and n not in self.given_up]

    def adopt(self) -> None:
        """Jobs claimed since the last look become jobs of their worker's Slurm id; jobs given back (a worker stopped
        for a requeue) are queued again."""
        m, follower = self.m, self.follower
        claimed, present = scan_claims(self.sweep.sweep_dir, self.generation, self.adopted, self.markers)
        changed = []
        for num in [n for n in self.adopted if n not in present and n not in follower.statuses]:
            self._unadopt(num)
            changed.append(num)
        for num, (worker, _, text) in sorted(claimed.items()):
            entry = m.jobs.get(num)
            if num not in self.todo_set or entry is None or entry.extra.get(PACKED) is None or num in follower.statuses:
                continue
            entry.extra.update(slurm_job_id=worker, slurm_array_job_id=worker.split("_", 1)[0],
                               slurm_job_name=m.workers.get("job_name"))
            # Queued until the follower sees it started: a worker claims one job ahead of a free slot.
            entry.state, entry.started_at, entry.ended_at = State.QUEUED, None, None
            self.ran.add(worker.split("_", 1)[0])
            if num not in follower.pending:
                follower.add(num, counted=True)
            self.adopted[num] = text
            changed.append(num)
        if changed:
            write_manifest(m, changed)

    def _unadopt(self, num: int) -> None:
        entry = self.m.jobs[num]
        for key in ("slurm_job_id", "slurm_array_job_id", "slurm_job_name", "slurm_state", "node"):
            entry.extra.pop(key, None)
        entry.state, entry.started_at, entry.ended_at = State.QUEUED, None, None
        self.follower.drop(num)
        self.adopted.pop(num, None)

    def retry(self, num: int, seen: Seen) -> bool:
        """The follower's hook for a job that has ended: True (and the job given back) when its worker ended under it
        for a reason another worker need not share (RETRY_STATES), at most MAX_RETRIES times."""
        entry = self.m.jobs[num]
        if entry.extra.get(PACKED) is None or not seen.final or not (seen.dead or seen.state == Status.INTERRUPTED):
            return False
        retries = int(entry.extra.get("retries") or 0)
        if seen.slurm_state not in RETRY_STATES or retries >= MAX_RETRIES:
            return False
        worker = entry.extra.get("slurm_job_id")
        release(self.sweep.sweep_dir, self.generation, num)
        self._unadopt(num)
        entry.extra["retries"] = retries + 1
        write_manifest(self.m, [num])
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
        room = self.sweep.room
        for index, nums in by_shape.items():
            arrays = [a for a, info in (self.m.workers.get("arrays") or {}).items() if int(info["shape"]) == index]
            shape = self.sweep.shapes[index]
            wanted = min(shape.n_workers, math.ceil(len(nums) / self.sweep.options.slots))
            n_alive = sum(i.split("_", 1)[0] in arrays for i in alive)
            if n_alive:
                if room is not None and n_alive < wanted:  # held back by the queue limit: more as room frees
                    self._more_workers(shape, min(wanted - n_alive, room.free()), len(nums))
                continue
            self.adopt()  # a job claimed (and ended) since the last look counts
            nums = [n for n in nums if n not in self.adopted]
            if not nums:
                continue
            last = arrays[-1] if arrays else None
            cancelled = self._cancelled(last) if last is not None else None
            if cancelled is not None:
                self.follower.say(f"sweepit: worker {cancelled} was cancelled: {len(nums)} job(s) of request "
                                  f"{self.sweep.shapes[index].request.describe()} not started (`sweepit resume "
                                  f"{self.sweep.sweep_dir}` runs them)")
                for num in nums:
                    self.m.jobs[num].state = self.given_up[num] = State.NOT_STARTED
                    self.follower.progress.skip()
                write_manifest(self.m, nums)
                continue
            if last is not None and last not in self.ran:
                logs = self.m.workers["stderr"].get(self.m.workers["arrays"][last]["ids"][0], "?")
                error = (f"no packed worker started this job: the workers of Slurm job {last} ended without "
                         f"starting any (their log: {logs}); `sweepit resume {self.sweep.sweep_dir}` submits new ones")
                for num in nums:
                    self._give_up(num, error)
                continue
            n = min(shape.n_workers, math.ceil(len(nums) / self.sweep.options.slots))
            if room is not None:
                n = min(n, room.free())
            self._more_workers(shape, n, len(nums), fresh=bool(arrays))

    def _more_workers(self, shape: Shape, n: int, n_jobs: int, fresh: bool = False) -> None:
        """Submit `n` more workers for `shape` (none when 0); a refusal by sbatch for a limit on jobs per user waits for
        room while workers of the sweep's are in the queue (sbatch is asked again once one of them has ended)."""
        if n <= 0:
            return
        if self.refused is not None and self.refused <= alive_workers(self.m):
            return  # refused for a limit, and none of the workers then in the queue has ended since: no room yet
        try:
            ids = self.sweep.submit_workers(shape, self.generation, n)
        except QueueLimitError as e:
            alive = alive_workers(self.m)
            why = held_for_limit(e, bool(alive), "more workers")
            if self.refused is None:
                self.follower.say(f"sweepit: {why}")
            self.refused = alive
            return
        self.refused = None
        array = ids[0].split("_", 1)[0]
        why = "left unclaimed by workers that ended" if fresh else "waiting for workers"
        self.follower.say(f"sweepit: {n_jobs} job(s) of request {shape.request.describe()} {why}: {n} "
                          f"{'fresh' if fresh else 'more'} worker(s) submitted (Slurm job {array})")

    def _cancelled(self, array: str) -> str | None:
        """A worker of `array` that ended CANCELLED (someone stopped the workers: no fresh ones then), or None."""
        ids = [str(i) for i in self.m.workers["arrays"][array]["ids"]]
        rows = cluster.squeue(ids) or {}
        missing = [i for i in ids if i not in rows]
        if missing:
            rows.update(cluster.sacct(missing) or {})
        return next((i for i in ids if (row := rows.get(i)) is not None and row.state == "CANCELLED"), None)

    def _give_up(self, num: int, error: str) -> None:
        entry = self.m.jobs[num]
        entry.state = self.given_up[num] = record_failure(entry.job_dir, error, Recorder.PACKED_DRIVER)
        entry.ended_at = now_iso()
        self.follower.progress.start()
        self.follower.progress.finish(num, Status.FAILED, None)
        write_manifest(self.m, [num])
