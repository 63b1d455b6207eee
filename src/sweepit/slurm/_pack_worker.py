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

import json
import logging
import os
import shutil
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
from sweepit.results._claims import Heartbeat, claim, workers_dir
from sweepit.results._job_files import start_clean
from sweepit.slurm import _cluster as cluster
from sweepit.slurm._task_files import TASK_DIR, record_task

log = logging.getLogger(__name__)
RECORDED_BY = "sweepit packed worker"


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


def claims_dir(sweep_dir: Path, generation: int) -> Path:
    return workers_dir(sweep_dir) / f"pack-{generation}"


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


def read_claims(sweep_dir: Path, generation: int, known: set[int]) -> dict[int, tuple[str, str | None]]:
    """The jobs claimed since `known` was: number -> (worker id, when)."""
    out: dict[int, tuple[str, str | None]] = {}
    try:
        names = os.listdir(claims_dir(sweep_dir, generation))
    except OSError:
        return out
    for name in names:
        if not name.isdigit() or int(name) in known:
            continue
        try:
            worker, _, at = (claims_dir(sweep_dir, generation) / name).read_text().strip().partition(" ")
        except OSError:
            continue
        if worker:  # an empty file is one whose content is not visible yet (another node's write): next look
            out[int(name)] = (worker, at or None)
    return out


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
        status = record_end(job, self.started_at.get(job.num), self.spec.stderr_tail_lines, RECORDED_BY)
        self.n_run += 1
        if status in ("completed", "diverged", "pruned") and job.wall_time_s is not None:
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


def run_worker(spec: PackSpec, worker: str, compose: Callable[[Job, PlannedEntry], None],
               body: Callable[[Job], Reply], clock: Callable[[], float] = time.time) -> int:
    """Claim and run this worker's jobs until none is left or the next would not fit in its time; how many ran."""
    sweep_dir = Path(spec.sweep_dir)
    started = clock()
    end = allocation_end(worker, started + spec.timeout_min * 60.0)
    entries = [e for e in read_plan(sweep_dir, spec.generation) if e.shape == spec.shape]
    hooks = _Hooks(spec, compose, worker)
    claims = claims_dir(sweep_dir, spec.generation)
    claims.mkdir(parents=True, exist_ok=True)

    def child(job: Job, child_spec: ChildSpec, conn: Connection) -> None:
        child_main(child_spec, conn, lambda: body(job))

    pool = Pool(spec.slots, GpuPool([]), use_gpus=False, threads=spec.threads, echo=False,
                term_grace_s=spec.term_grace_s, child=child, hooks=hooks, clock_ticks=False)
    cursor, out_of_time = 0, False
    log.info(f"worker {worker}: {len(entries)} job(s) of request {spec.shape} in the plan, {spec.slots} at a time, "
             f"until {time.strftime('%H:%M:%S', time.localtime(end))}")
    with Heartbeat(sweep_dir, worker):
        pool.open()
        try:
            while True:
                while pool.stop_signal is None and len(pool.running) + len(pool.queue) < spec.slots:
                    # The first round of jobs always starts (the allocation is at least one job's time limit).
                    if hooks.n_started >= spec.slots and clock() + hooks.expected_s() > end:
                        out_of_time = True
                        break
                    entry = None
                    while cursor < len(entries) and entry is None:
                        candidate = entries[cursor]
                        cursor += 1
                        if claim(claims / str(candidate.num), f"{worker} {now_iso()}"):
                            entry = candidate
                    if entry is None:
                        break
                    hooks.entries[entry.num] = entry
                    pool.submit(Job(num=entry.num, overrides=list(entry.overrides)))
                if not pool.busy():
                    break
                pool.step()
        finally:
            pool.close()
    why = (f"the next job (expected {hooks.expected_s():.0f} s) would not fit in its time left" if out_of_time
           else "no job left")
    if pool.stop_signal is not None:
        why = "stopped by a signal"
    log.info(f"worker {worker}: done after {hooks.n_run} job(s): {why}")
    return hooks.n_run
