"""One worker of a packed sweep (`hydra.launcher.workers=N`), inside its Slurm allocation: it claims the sweep's
jobs of its resource request one after another and runs each in a process forked from its warm interpreter (the
local launcher's pool, `slots` at once), until no job is left, its time is up, or Slurm stops it.

The plan is a file the driver writes before it submits the workers (`.workers/pack-<generation>.json`: each job's
number, overrides, directory and request); a job is a worker's once it has created `.workers/pack-<generation>/<num>`
(`sweepit.results._claims.claim`). Each job gets its own directory as any other job: `.hydra/`, `stdout.log`,
`stderr.log` (its own output, not the worker's), `metrics.jsonl`, `result.json`; a job that dies without a result
gets one written here (`record_end`, as the local launcher's driver writes it).

Wall time: after its first round of `slots` jobs (the allocation holds at least one job's time limit), the worker
starts a job only when the job's expected time (the mean of the jobs it has run, else the job's own time limit) fits
in what is left of its allocation; otherwise it ends, and the driver gives the jobs left to fresh workers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from sweepit._files import atomic_write
from sweepit._host import now_iso
from sweepit.local._pool import Job, Pool
from sweepit.local._resources import GpuPool
from sweepit.local._run import record_end
from sweepit.local._worker import ChildSpec, Reply, child_main
from sweepit.results import Recorder, Status
from sweepit.results._claims import Heartbeat, claim, claims_dir, workers_dir
from sweepit.results._job_files import start_clean
from sweepit.results._manifest import result_status
from sweepit.slurm import _cluster as cluster
from sweepit.slurm._task_files import TASK_DIR, record_task

log = logging.getLogger(__name__)
RELEASED = "released-"   # `released-<num>-<token>` in the claims folder: job `num` was given back


@dataclass(frozen=True)
class PackSpec:
    """What one array of workers needs (pickled into each worker's task)."""

    sweep_dir: str
    generation: int            # the driver's submission this array belongs to: its plan and claims
    shape: int                 # the resource request whose jobs the workers run (index in the plan)
    slots: int                 # jobs at once per worker
    threads: int               # torch threads of each job (OMP_NUM_THREADS)
    timeout_min: int           # the workers' own time limit
    job_timeout_min: int       # the jobs' time limit: their expected time before any has finished
    term_grace_s: float = 5.0  # SIGTERM to SIGKILL of a job stopped with its worker
    stderr_tail_lines: int = 50


def plan_file(sweep_dir: Path, generation: int) -> Path:
    return workers_dir(sweep_dir) / f"pack-{generation}.json"


@dataclass
class PlannedEntry:
    """One job of the plan, as the worker composes it again: its number, overrides, directory and request."""

    num: int
    overrides: list[str]
    job_dir: str
    shape: int
    env: dict[str, str]


def write_plan(sweep_dir: Path, generation: int, entries: list[PlannedEntry], shapes: list[str]) -> None:
    """The plan of one submission (written once, before the workers are submitted)."""
    data = {"generation": generation, "shapes": shapes, "jobs": [asdict(e) for e in entries]}
    atomic_write(plan_file(sweep_dir, generation), json.dumps(data, separators=(",", ":")) + "\n")


def read_plan(sweep_dir: Path, generation: int) -> list[PlannedEntry]:
    data = json.loads(plan_file(sweep_dir, generation).read_text())
    return [PlannedEntry(**e) for e in data["jobs"]]


def scan_claims(sweep_dir: Path, generation: int, known: dict[int, str], markers: set[str]
                ) -> tuple[dict[int, tuple[str, str | None, str]], set[int]]:
    """The claims made since the last look: number -> (worker id, when, the claim's text), for jobs not in `known`
    (number -> the claim's text when last read) and for jobs given back since (a `released-<num>-*` marker not in
    `markers`, which is updated), whose claim may be another now; and the numbers claimed now. One listing of the
    claims folder, and a read of each new claim only."""
    new: dict[int, tuple[str, str | None, str]] = {}
    present: set[int] = set()
    folder = claims_dir(sweep_dir, generation)
    try:
        names = os.listdir(folder)
    except OSError:
        return new, present
    reread: set[int] = set()
    for name in names:
        if name.isdigit():
            present.add(int(name))
        elif name.startswith(RELEASED) and name not in markers:
            markers.add(name)
            head = name[len(RELEASED):].split("-", 1)[0]
            if head.isdigit():
                reread.add(int(head))
    for num in sorted(present):
        if num in known and num not in reread:
            continue
        try:
            text = (folder / str(num)).read_text().strip()
        except OSError:
            continue
        worker, _, at = text.partition(" ")
        if worker and known.get(num) != text:  # an empty file's content is not visible yet (another node): next look
            new[num] = (worker, at or None, text)
    return new, present


def allocation_end(job_id: str, fallback_s: float) -> float:
    """When this worker's allocation ends (epoch seconds): Slurm's EndTime, else `fallback_s`."""
    end = cluster.end_time(job_id)
    return end if end is not None else fallback_s


class _Hooks:
    """The pool's hooks inside a worker: compose each job, record its start and end in its own directory."""

    def __init__(self, spec: PackSpec, compose: Callable[[Job, PlannedEntry], None], worker: str) -> None:
        self.spec, self.compose, self.worker = spec, compose, worker
        self.entries: dict[int, PlannedEntry] = {}
        self.started_at: dict[int, str] = {}
        self.walls: list[float] = []
        self.n_started = self.n_run = 0

    def prepare(self, job: Job) -> bool:
        self.compose(job, self.entries[job.num])
        return True

    def before_fork(self, job: Job) -> None:
        start_clean(job.job_dir)  # a stale result of an earlier run must not stand for this one
        shutil.rmtree(job.job_dir / TASK_DIR, ignore_errors=True)
        record_task(job.job_dir, 0)

    def started(self, job: Job) -> None:
        self.n_started += 1
        self.started_at[job.num] = now_iso()
        log.info(f"worker {self.worker}: job {job.num} started ({' '.join(job.overrides)})")

    def ended(self, job: Job) -> None:
        status = record_end(job, self.started_at.get(job.num), self.spec.stderr_tail_lines, Recorder.PACKED_WORKER)
        self.n_run += 1
        if status in (Status.COMPLETED, Status.DIVERGED, Status.PRUNED) and job.wall_time_s is not None:
            self.walls.append(job.wall_time_s)
        log.info(f"worker {self.worker}: job {job.num} {status} after {job.wall_time_s or 0:.1f} s")
        job.config = None  # a worker of thousands of jobs keeps none of their configs

    def tick(self) -> None:
        pass

    def before_echo(self) -> None:
        pass

    def expected_s(self) -> float:
        """A job's expected time: the mean of those this worker ran, else the jobs' time limit."""
        return sum(self.walls) / len(self.walls) if self.walls else self.spec.job_timeout_min * 60.0


def own_claims_file(sweep_dir: Path, generation: int, worker: str) -> Path:
    """The jobs a worker has claimed, one number a line: a worker that Slurm requeued (same id) finds them again."""
    return claims_dir(sweep_dir, generation) / f"{worker}.claimed"


def release(sweep_dir: Path, generation: int, num: int) -> None:
    """Give job `num` back: any worker may claim it again (the driver follows it as queued meanwhile). A marker says
    so to the driver, which may see the job claimed again before it sees it unclaimed."""
    folder = claims_dir(sweep_dir, generation)
    with contextlib.suppress(FileNotFoundError):
        (folder / str(num)).unlink()
    claim(folder / f"{RELEASED}{num}-{secrets.token_hex(4)}")


class PackedWorker:
    """One worker's loop (`run`), and its stop before Slurm requeues it (`stop_for_requeue`)."""

    def __init__(self, spec: PackSpec, worker: str, compose: Callable[[Job, PlannedEntry], None],
                 body: Callable[[Job], Reply], clock: Callable[[], float] = time.time) -> None:
        self.spec, self.worker, self.clock = spec, worker, clock
        self.sweep_dir = Path(spec.sweep_dir)
        self.claims = claims_dir(self.sweep_dir, spec.generation)
        self.hooks = _Hooks(spec, compose, worker)

        def child(job: Job, child_spec: ChildSpec, conn: Connection) -> None:
            child_main(child_spec, conn, lambda: body(job))

        self.pool = Pool(spec.slots, GpuPool([]), use_gpus=False, threads=spec.threads, echo=False,
                         term_grace_s=spec.term_grace_s, child=child, hooks=self.hooks, clock_ticks=False)

    def run(self) -> int:
        """Claim and run this worker's jobs until none is left or the next would not fit in its time; how many ran."""
        spec, hooks, pool = self.spec, self.hooks, self.pool
        end = allocation_end(self.worker, self.clock() + spec.timeout_min * 60.0)
        entries = [e for e in read_plan(self.sweep_dir, spec.generation) if e.shape == spec.shape]
        self.claims.mkdir(parents=True, exist_ok=True)
        self._release_own_unfinished({e.num: e for e in entries})
        cursor, out_of_time, rescanned = 0, False, False
        log.info(f"worker {self.worker}: {len(entries)} job(s) of request {spec.shape} in the plan, {spec.slots} at a "
                 f"time, until {time.strftime('%H:%M:%S', time.localtime(end))}")
        with Heartbeat(self.sweep_dir, self.worker):
            pool.open()
            try:
                while True:
                    # One job more than the slots is claimed, so that its config is composed while the others run.
                    while pool.stop_signal is None and len(pool.running) + len(pool.queue) < spec.slots + 1:
                        # The first round of jobs always starts (the allocation is at least one job's time limit); a
                        # job that waits for a slot starts about one expected time from now.
                        waits = len(pool.running) + len(pool.queue) >= spec.slots
                        need = hooks.expected_s() * (2 if waits else 1)
                        if len(hooks.entries) >= spec.slots and self.clock() + need > end:
                            out_of_time = True
                            break
                        entry = None
                        while cursor < len(entries) and entry is None:
                            candidate = entries[cursor]
                            cursor += 1
                            if self._claim(candidate.num):
                                entry = candidate
                            if cursor == len(entries) and entry is None and not rescanned:
                                cursor, rescanned = 0, True  # once more from the start: jobs given back since
                        if entry is None:
                            break
                        # Its task file, written as it starts, tells the driver when it runs (not when claimed).
                        shutil.rmtree(Path(entry.job_dir) / TASK_DIR, ignore_errors=True)
                        hooks.entries[entry.num] = entry
                        pool.submit(Job(num=entry.num, overrides=list(entry.overrides)))
                    if not pool.busy():
                        break
                    pool.step()
            finally:
                for job in pool.queue:  # claimed, never started (out of time, or stopped): for others to run
                    release(self.sweep_dir, spec.generation, job.num)
                pool.close()
        why = (f"the next job (expected {hooks.expected_s():.0f} s) would not fit in its time left" if out_of_time
               else "no job left")
        if pool.stop_signal is not None:
            why = "stopped by a signal"
        log.info(f"worker {self.worker}: done after {hooks.n_run} job(s): {why}")
        return hooks.n_run

    def _claim(self, num: int) -> bool:
        if not claim(self.claims / str(num), f"{self.worker} {now_iso()}"):
            return False
        with open(own_claims_file(self.sweep_dir, self.spec.generation, self.worker), "a") as f:
            f.write(f"{num}\n")
        return True

    def _release_own_unfinished(self, entries: dict[int, PlannedEntry]) -> None:
        """Jobs this worker claimed in an earlier life (Slurm requeued it: a node failure, a preemption) that did not
        end on their own (no result, or `interrupted`): given back, so that they run again."""
        try:
            nums = {int(line) for line in own_claims_file(self.sweep_dir, self.spec.generation,
                                                         self.worker).read_text().split() if line.isdigit()}
        except OSError:
            return
        for num in sorted(nums):
            entry = entries.get(num)
            if entry is not None and result_status(Path(entry.job_dir)) in (None, Status.INTERRUPTED):
                release(self.sweep_dir, self.spec.generation, num)
                log.info(f"worker {self.worker}: job {num}, which this worker ran before Slurm requeued it, is "
                         "claimable again")

    def stop_for_requeue(self) -> None:
        """USR2 (time limit, preemption) or a requeue: stop the running jobs (SIGTERM: they record themselves
        `interrupted`; their last epoch checkpoint stays) and give them back to be claimed again."""
        pool = self.pool
        running = list(pool.running.values())
        for job in running:
            job.stopped = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(job.pid or 0, signal.SIGTERM)
        deadline = time.monotonic() + self.spec.term_grace_s
        for job in running:
            if job.proc is not None:
                job.proc.join(max(0.0, deadline - time.monotonic()))
        pool._kill_all()  # SIGKILL what is left, then record each job (the pool's hooks)
        for job in running:
            release(self.sweep_dir, self.spec.generation, job.num)
        log.info(f"worker {self.worker}: stopped for a requeue; job(s) {', '.join(str(j.num) for j in running) or '-'} "
                 "given back to be run again")
