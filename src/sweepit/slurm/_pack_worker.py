"""A packed grid's work (`hydra.launcher.workers=N`), the plan's and claims' side: the driver writes the plan before it
submits the workers (`.workers/pack-<generation>.json`: each job's number, overrides, directory and request); a job
is a worker's once it has created `.workers/pack-<generation>/<num>` (`sweepit.results.claim`), and each job gets its
own directory, logs and records as any other job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sweepit._files import atomic_write
from sweepit._host import now_iso
from sweepit.errors import with_causes
from sweepit.local import ForkServer, Job
from sweepit.results import (
    JobOutcome,
    JobPaths,
    JobState,
    Recorder,
    SweepPaths,
    Work,
    claim,
    read_record,
    record_end,
)
from sweepit.slurm._engine import Engine

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
    gpus: int = 0              # GPUs each job takes of the worker's (its own CUDA_VISIBLE_DEVICES); 0: none
    gate: Any = None           # under a GPU budget (slurm._budget.Gate): False when the worker is not to take jobs


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
    atomic_write(SweepPaths(sweep_dir).plan(generation), json.dumps(data, separators=(",", ":")) + "\n")


def scan_claims(sweep_dir: Path, generation: int, known: dict[int, str], markers: set[str]
                ) -> tuple[dict[int, tuple[str, str | None, str]], set[int]]:
    """The claims made since the last look: number -> (worker id, when, the claim's text), for jobs not in `known`
    (number -> the claim's text when last read) and for jobs given back since (a `released-<num>-*` marker not in
    `markers`, which is updated), whose claim may be another now; and the numbers claimed now. One listing of the
    claims folder, and a read of each new claim only."""
    new: dict[int, tuple[str, str | None, str]] = {}
    present: set[int] = set()
    folder = SweepPaths(sweep_dir).claims(generation)
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


def release(sweep_dir: Path, generation: int, num: int) -> None:
    """Give job `num` back: any worker may claim it again (the driver follows it as queued meanwhile). A marker says
    so to the driver, which may see the job claimed again before it sees it unclaimed."""
    folder = SweepPaths(sweep_dir).claims(generation)
    with contextlib.suppress(FileNotFoundError):
        (folder / str(num)).unlink()
    claim(folder / f"{RELEASED}{num}-{secrets.token_hex(4)}")


class GridSource:
    """A packed grid's work: the jobs of one request in the plan, each claimed in the plan's claims folder (one job
    ahead of the free slots, so that its config is composed while the others run)."""

    ahead = 1

    def __init__(self, spec: PackSpec) -> None:
        self.spec, self.sweep_dir = spec, Path(spec.sweep_dir)
        self.claims = SweepPaths(self.sweep_dir).claims(spec.generation)
        self.entries: list[PlannedEntry] = []
        self.cursor, self.rescanned, self.worker = 0, False, ""

    def open(self, worker: str) -> None:
        self.worker = worker
        plan = json.loads(SweepPaths(self.sweep_dir).plan(self.spec.generation).read_text())
        self.entries = [PlannedEntry(**e) for e in plan["jobs"] if e["shape"] == self.spec.shape]
        self.claims.mkdir(parents=True, exist_ok=True)
        self._release_own_unfinished({e.num: e for e in self.entries})
        if self.spec.gate is not None and not self.spec.gate():
            log.warning(f"worker {worker}: the sweep's GPU-hour budget is reached; it takes no job")
            self.entries = []
        log.info(f"worker {worker}: {len(self.entries)} job(s) of request {self.spec.shape} in the plan, "
                 f"{self.spec.slots} at a time")

    def take(self) -> Work | None:
        while self.cursor < len(self.entries):
            entry = self.entries[self.cursor]
            self.cursor += 1
            if self._claim(entry.num):
                # Its task file, written as it starts, tells the driver when it runs (not when claimed).
                shutil.rmtree(JobPaths(Path(entry.job_dir)).tasks, ignore_errors=True)
                return Work(entry.num, list(entry.overrides), dict(entry.env), entry.job_dir)
            if self.cursor == len(self.entries) and not self.rescanned:
                self.cursor, self.rescanned = 0, True  # once more from the start: jobs given back since
        return None

    def refused(self, work: Work, error: Exception) -> bool:
        """Its config does not compose here (the driver composed a sample of the jobs; an override's value that only
        some jobs of their kind refuse, or this node's app differs): the job failed, with the error; the others run."""
        assert work.job_dir is not None, "a grid's jobs have planned directories"
        message = f"its config does not compose: {with_causes(error)}"
        Path(work.job_dir).mkdir(parents=True, exist_ok=True)
        record_end(work.job_dir, JobState.FAILED, Recorder.PACKED_WORKER, replace=True, error=message,
                   ended_at=now_iso())
        log.warning(f"worker {self.worker}: job {work.num} failed: {message}")
        return True

    def started(self, work: Work) -> None:
        pass  # its task file tells the driver, which planned its directory

    def ended(self, work: Work, returned: Any) -> None:
        pass  # its result.json is all the driver reads

    def give_back(self, work: Work) -> None:
        release(self.sweep_dir, self.spec.generation, work.num)

    def _claim(self, num: int) -> bool:
        if not claim(self.claims / str(num), f"{self.worker} {now_iso()}"):
            return False
        with open(SweepPaths(self.sweep_dir).claimed(self.spec.generation, self.worker), "a") as f:
            f.write(f"{num}\n")
        return True

    def _release_own_unfinished(self, entries: dict[int, PlannedEntry]) -> None:
        """Jobs this worker claimed in an earlier life (Slurm requeued it: a node failure, a preemption) that did not
        end on their own (no result, or `interrupted`): given back, so that they run again."""
        try:
            nums = {int(line) for line in SweepPaths(self.sweep_dir).claimed(self.spec.generation,
                                                                   self.worker).read_text().split() if line.isdigit()}
        except OSError:
            return
        for num in sorted(nums):
            entry = entries.get(num)
            if entry is not None and read_record(Path(entry.job_dir)).status in (None, JobState.INTERRUPTED):
                release(self.sweep_dir, self.spec.generation, num)
                log.info(f"worker {self.worker}: job {num}, which this worker ran before Slurm requeued it, is "
                         "claimable again")


class PackedWorker(Engine):
    """One worker of a packed grid: the engine over the plan's jobs of its request."""

    def __init__(self, spec: PackSpec, worker: str, compose: Callable[[Job, Work], None],
                 body: Callable[[Job], JobOutcome], clock: Callable[[], float] = time.time,
                 server: ForkServer | None = None) -> None:
        super().__init__(GridSource(spec), worker, Path(spec.sweep_dir), compose, body,
                         recorded_by=Recorder.PACKED_WORKER, slots=spec.slots, gpus=spec.gpus, threads=spec.threads,
                         timeout_min=spec.timeout_min, job_timeout_min=spec.job_timeout_min,
                         term_grace_s=spec.term_grace_s,
                         stderr_tail_lines=spec.stderr_tail_lines, clock=clock, server=server)
