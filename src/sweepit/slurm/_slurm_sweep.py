"""The driver side of a Slurm sweep: plan each job's request, submit the job arrays, follow them, and say what
each job ended as and returned.

The launcher says how to prepare a job (compose its config, name its directory) and what each of its Slurm
tasks runs (a picklable callable); this module does the rest, for a fixed list of jobs (`run`, or `dry_run`)
or for jobs that come one by one as a sweeper asks (`start`, `wait_any`, `close`).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sweepit._host import now_iso
from sweepit._signals import StopSignals
from sweepit.errors import ConfigError, QueueLimitError, SweepFailedError, SweepStoppedError
from sweepit.results import (
    FAILED_STATUSES,
    JobEntry,
    Manifest,
    Progress,
    State,
    Status,
    SweepLock,
    failure_report,
    is_finished,
    open_manifest,
    read_manifest,
    read_record,
    summarize,
    write_manifest,
)
from sweepit.slurm._cluster import scancel
from sweepit.slurm._follow import Follower
from sweepit.slurm._job_states import CANCELLED_BY_DRIVER, look
from sweepit.slurm._limits import Room, held_for_limit, open_room, wait_for_room
from sweepit.slurm._pack import PackedSweep
from sweepit.slurm._pack_worker import PackSpec
from sweepit.slurm._request import ClusterFacts, SlurmOptions, asked, place
from sweepit.slurm._submit import Feeder, PlannedJob, Task, dry_run_text, returned, submit_jobs

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """How a job ended, for the sweeper: its status (None: not followed, `wait=false`) and what its task
    returned (`has_returned` False: it did not return, e.g. it failed or was killed first)."""

    status: str | None
    has_returned: bool = False
    returned: Any = None


def check_one_by_one(o: SlurmOptions) -> None:
    """Options that a search submitting its trials one by one (the Optuna sweeper) cannot use: refused before the
    search opens its study, so that nothing is written."""
    if o.workers:
        raise ConfigError("hydra.launcher.workers packs a fixed list of jobs (a grid) into long-lived workers, so "
                          "an adaptive search, whose next trial depends on the last ones, cannot use it; but got "
                          f"workers={o.workers}. For Optuna on Slurm use hydra.sweeper.workers=N (workers that ask "
                          "the study for trials), or drop hydra.launcher.workers.")
    if o.dry_run:
        raise ConfigError("hydra.launcher.dry_run shows the submission of a fixed list of jobs, so an adaptive "
                          "search (whose next trial depends on the last ones) cannot use it, but got "
                          "dry_run=true. Drop hydra.launcher.dry_run, or dry-run a grid of the same space with "
                          "the basic sweeper.")


class SlurmSweep:
    """One sweep directory's Slurm run. `compose(job)` fills in the job's config and directory; `make_task(job)`
    is what each of its Slurm tasks runs (pickled by submitit)."""

    def __init__(self, options: SlurmOptions, sweep_dir: Path, compose: Callable[[PlannedJob], None],
                 make_task: Callable[[PlannedJob], Task], lock: SweepLock | None = None,
                 facts: ClusterFacts | None = None, make_worker: Callable[[PackSpec], Task] | None = None,
                 release_config: Callable[[PlannedJob], None] | None = None) -> None:
        self.options = options
        # What Slurm said of itself (partition, MaxArraySize): asked at the first plan, kept for the sweep; a
        # launcher passes one for all its batches.
        self.facts = facts if facts is not None else ClusterFacts()
        self.sweep_dir = sweep_dir
        self.compose = compose
        self.make_task = make_task
        self.make_worker = make_worker  # what each worker of a packed sweep runs (hydra.launcher.workers=N)
        # What the launcher keeps of a job's config once it is planned, when the config is not to be kept (it sets
        # job.config to something lighter); by default, the config itself.
        self.release_config: Callable[[PlannedJob], None] = release_config or (lambda job: None)
        self._open: tuple[Manifest, Follower, Progress] | None = None  # the run of start()/wait_any()
        self._started: dict[int, PlannedJob] = {}
        # One driver per sweep directory: a lock of the caller's (held for the whole sweep), or one per run.
        self.own_lock = lock is None
        self.lock = SweepLock(sweep_dir) if lock is None else lock
        self._cancelled = False  # the jobs in flight were cancelled (Ctrl-C): wait for Slurm to end them
        self._room: Room | None = None  # the queue limits of the run of start()/wait_any()

    # -- before anything is submitted ----------------------------------------------------------------------
    def plan(self, jobs: list[PlannedJob], release: bool = False) -> int:
        """Compose each job and set its request, checked against the options and the partition (ConfigError,
        SlurmError); returns the most jobs one array may hold. `release`: let go of each job's config once read (a
        packed sweep's workers compose the jobs again; 100,000 composed configs would not fit), by `release_config`."""
        o = self.options
        asks = []
        for job in jobs:
            self.compose(job)
            asks.append(asked(job.num, _select(job.config, o.gpus_key), _select(job.config, o.timeout_key), o))
            job.read_config()
            if release:
                self.release_config(job)
        requests, max_array_size = place(asks, o, self.facts)
        for job, request in zip(jobs, requests, strict=True):
            job.request = request
        return max_array_size

    def dry_run(self, jobs: list[PlannedJob]) -> str:
        """What `run` would submit: each request's sbatch script, the job count and the GPU-hours."""
        if self.options.workers:
            return self._packed().dry_run(jobs)
        return dry_run_text(jobs, self.sweep_dir, self.plan(jobs), self.options)

    def _packed(self) -> PackedSweep:
        assert self.make_worker is not None, "a packed sweep (hydra.launcher.workers=N) needs make_worker"
        return PackedSweep(self, self.make_worker)

    # -- a fixed list of jobs --------------------------------------------------------------------------------
    def run(self, jobs: list[PlannedJob]) -> dict[int, Outcome]:
        """Submit `jobs` and follow them to their end (or detach, `wait=false`); each one's Outcome. Raises
        SweepFailedError, after the results table, when jobs failed (and `fail_on_error`) or on Ctrl-C."""
        if self.options.workers:
            statuses = self._packed().run(jobs)
            if statuses is None:
                return {j.num: Outcome(None) for j in jobs}
            manifest = read_manifest(self.sweep_dir)
            return {j.num: _outcome(manifest.jobs[j.num], statuses.get(j.num)) for j in jobs}
        max_array_size = self.plan(jobs)
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        self.lock.acquire()
        try:
            return self._run(jobs, max_array_size)
        finally:
            if self.own_lock:
                self.lock.release()

    def _run(self, jobs: list[PlannedJob], max_array_size: int) -> dict[int, Outcome]:
        o = self.options
        manifest = open_manifest(self.sweep_dir, launcher="slurm")
        skipped, adopted, to_submit = self._sort_out(jobs, manifest)
        for job in to_submit:
            manifest.jobs[job.num] = JobEntry(num=job.num, overrides=job.overrides, job_dir=str(job.job_dir),
                                              state=State.NOT_STARTED)
        write_manifest(manifest)
        feeder = Feeder(to_submit, manifest, o, max_array_size, self.make_task,
                        open_room(o) if to_submit else None)
        following = sorted([j.num for j in adopted] + [j.num for j in feeder.feed()])
        log.info(_submitted(len(jobs), feeder.ids, len(skipped), len(adopted), self.sweep_dir, len(feeder.held)))
        if not o.wait:
            feeder.leave()
            write_manifest(manifest)  # whole, journal folded in: what a reader of sweep.json alone expects
            print(_detached(manifest, following, self.sweep_dir, len(feeder.held)), flush=True)
            return {j.num: Outcome(None) for j in jobs}
        progress = Progress(len(jobs))
        progress.skip(len(skipped))
        follower = Follower(manifest, following, progress, o.poll_interval_s, o.result_grace_s, o.stderr_tail_lines)

        def on_poll() -> None:
            self.lock.touch()
            for job in feeder.feed():
                follower.add(job.num, counted=True)

        follower.on_poll = on_poll
        follower.more = lambda: bool(feeder.held)
        try:
            progress.draw()
            follower.run()
        finally:
            progress.close()
            write_manifest(manifest)  # whole, journal folded in
        if follower.stop_signal is not None:
            raise SweepStoppedError(_stopped(manifest, list(follower.pending), follower.stop_signal, self.sweep_dir))
        if o.print_summary:
            print(summarize(self.sweep_dir), flush=True)
        report = failure_report(manifest, jobs, dict(follower.statuses), {j.num for j in skipped}, None,
                                o.fail_on_error)
        if report is not None:
            raise SweepFailedError(report)
        return {j.num: _outcome(manifest.jobs[j.num], follower.statuses.get(j.num)) for j in jobs}

    def _sort_out(self, jobs: list[PlannedJob], manifest: Manifest
                  ) -> tuple[list[PlannedJob], list[PlannedJob], list[PlannedJob]]:
        """(finished before, still in Slurm's hands, to submit): only a resume skips or adopts jobs."""
        if not self.options.resume:
            return [], [], list(jobs)
        known = {j.num: manifest.jobs[j.num] for j in jobs
                 if j.num in manifest.jobs and manifest.jobs[j.num].job_dir == str(j.job_dir)}
        seen = look(known.values())
        skipped, adopted, to_submit = [], [], []
        for job in jobs:
            s = seen.get(job.num)
            if is_finished(job.job_dir):
                skipped.append(job)
                entry = manifest.jobs.setdefault(job.num, JobEntry(job.num, job.overrides, str(job.job_dir)))
                entry.state = read_record(job.job_dir).status or Status.COMPLETED
            elif s is not None and not s.final and not s.dead:
                adopted.append(job)  # queued or running from an earlier submission: follow it, do not submit again
            else:
                to_submit.append(job)
        return skipped, adopted, to_submit

    # -- jobs one by one, as a sweeper asks (the Optuna sweeper's AsyncLauncher protocol) -------------------
    def start(self, job: PlannedJob) -> None:
        """Submit `job` now (one sbatch call); `wait_any` follows it with the others in flight."""
        o = self.options
        check_one_by_one(o)
        max_array_size = self.plan([job])
        if self._open is None:
            self.sweep_dir.mkdir(parents=True, exist_ok=True)
            self.lock.acquire()  # released by close()
            progress = Progress(0)
            manifest = open_manifest(self.sweep_dir, launcher="slurm")
            follower = Follower(manifest, [], progress, o.poll_interval_s, o.result_grace_s, o.stderr_tail_lines)
            follower.on_poll = self.lock.touch
            self._open = manifest, follower, progress
            self._room = open_room(o)
        manifest, follower, _ = self._open
        manifest.jobs[job.num] = JobEntry(num=job.num, overrides=job.overrides, job_dir=str(job.job_dir),
                                          state=State.NOT_STARTED)
        said = False
        while True:
            if self._room is not None:  # the sweep's own jobs that end (the follower's looks) free room
                wait_for_room(self._room, 1, o.poll_interval_s, follower.poll)
            try:
                submit_jobs([job], manifest, o, max_array_size, self.make_task)
                break
            except QueueLimitError as e:
                why = held_for_limit(e, bool(follower.pending), f"trial job {job.num}")
                if not said:
                    log.warning(f"sweepit: {why}")
                    said = True
                follower.poll()
                time.sleep(o.poll_interval_s)
        self._started[job.num] = job
        follower.add(job.num)

    def wait_any(self, timeout_s: float | None = None) -> list[tuple[PlannedJob, Outcome]]:
        """Follow the jobs in flight (one squeue call every `poll_interval_s`) until one of them ends or
        `timeout_s` passes; each job that ended since the last call, with its Outcome.

        Ctrl-C (or SIGTERM) cancels every job in flight with scancel; they come back as `interrupted` once
        Slurm has ended them, so the sweeper stops with its message. A second one stops waiting for that."""
        assert self._open is not None, "start() a job before wait_any()"
        manifest, follower, _ = self._open
        deadline = None if timeout_s is None else time.monotonic() + timeout_s

        def second_stops(signum: int) -> None:
            if len(stop.received) > 1:
                raise KeyboardInterrupt(f"stopped by a second {signal.Signals(signum).name}")

        def ended() -> list[int]:
            return [n for n in self._started if n in follower.statuses]

        with StopSignals(on_signal=second_stops) as stop:
            while not ended() and follower.pending and (deadline is None or time.monotonic() < deadline):
                if stop.first is not None and not self._cancelled:
                    self._cancel_in_flight(manifest, follower, signal.Signals(stop.first).name)
                next_look = time.monotonic() + self.options.poll_interval_s
                follower.poll()
                while ((stop.first is None or self._cancelled) and not ended()
                       and time.monotonic() < min(next_look, deadline or next_look)):
                    time.sleep(0.1)
                    follower.settle()
        return [(self._started.pop(n), _outcome(manifest.jobs[n], follower.statuses[n])) for n in ended()]

    def _cancel_in_flight(self, manifest: Manifest, follower: Follower, why: str) -> None:
        self._cancelled = True
        left = [n for n in follower.pending if n in self._started]
        ids = [str(manifest.jobs[n].extra["slurm_job_id"]) for n in left if manifest.jobs[n].extra.get("slurm_job_id")]
        if ids:
            scancel(ids)
            for n in left:  # read back once squeue and sacct have forgotten the job (no accounting, or purged)
                manifest.jobs[n].extra[CANCELLED_BY_DRIVER] = now_iso()
            write_manifest(manifest, left)
            log.warning(f"{why}: cancelled {len(ids)} Slurm job(s) still in flight: {', '.join(ids)} (jobs "
                        f"{', '.join(map(str, left))})")

    def close(self) -> None:
        """End the run of start()/wait_any(). Jobs still in flight (the sweeper stopped on an error) are
        cancelled with scancel, since no one will read their results; the manifest records them."""
        if self._open is None:
            return
        manifest, follower, progress = self._open
        self._open = None
        left = [n for n in follower.pending if n in self._started]
        try:
            if left and not self._cancelled:
                self._cancel_in_flight(manifest, follower, "the search stopped")
            for n in left:
                manifest.jobs[n].state, manifest.jobs[n].ended_at = Status.INTERRUPTED, now_iso()
        finally:
            progress.close()
            write_manifest(manifest)
            self._started.clear()
            self._cancelled = False
            if self.own_lock:
                self.lock.release()


def _select(config: Any, key: str | None) -> Any:
    return None if key is None else OmegaConf.select(config, key, default=None)


def _outcome(entry: JobEntry, status: str | None) -> Outcome:
    """The job's Outcome; a job that finished before (a resume skipped it) has its status from its result."""
    if status in FAILED_STATUSES or (status is None and entry.state in FAILED_STATUSES):
        return Outcome(status)
    has_returned, value = returned(entry)
    return Outcome(status, has_returned, value)


# -- what the driver tells the user ----------------------------------------------------------------------------
def _arrays(ids: list[str]) -> list[str]:
    """The Slurm job ids to give scancel: an array's id stands for all its tasks."""
    return sorted({i.split("_", 1)[0] for i in ids}, key=int)


def _submitted(n_jobs: int, ids: list[str], n_skipped: int, n_adopted: int, sweep_dir: Path, n_held: int = 0) -> str:
    arrays = _arrays(ids)
    parts = [f"Submitted {len(ids)} of {n_jobs} job(s) to Slurm in {len(arrays)} sbatch call(s)"
             + (f" (job ids {', '.join(arrays)})" if arrays else "")]
    if n_skipped:
        parts.append(f"{n_skipped} finished before (skipped)")
    if n_adopted:
        parts.append(f"{n_adopted} still queued or running from before (followed, not submitted again)")
    if n_held:
        parts.append(f"{n_held} held back by the queue limit (submitted as earlier ones end)")
    return "; ".join(parts) + f"; sweep dir {sweep_dir}"


def _detached(manifest: Manifest, nums: list[int], sweep_dir: Path, n_held: int = 0) -> str:
    ids = [str(manifest.jobs[n].extra.get("slurm_job_id")) for n in nums]
    lines = [f"Not waiting (hydra.launcher.wait=false): {len(ids)} job(s) in Slurm: {' '.join(ids)}"]
    if n_held:
        lines.append(f"  {n_held} job(s) not submitted, held back by the queue limit: `sweepit resume {sweep_dir}` "
                     "submits them as these end (it follows the sweep)")
    lines += [f"  follow:  sweepit status {sweep_dir} --watch   (to the end, then writes the report)",
              f"  resume:  sweepit resume {sweep_dir}   (submits again only the jobs that did not complete)"]
    if ids:
        lines.append(f"  cancel:  scancel {' '.join(_arrays(ids))}")
    return "\n".join(lines)


def _stopped(manifest: Manifest, pending: list[int], signum: int | None, sweep_dir: Path) -> str:
    name = signal.Signals(signum or signal.SIGINT).name
    ids = [str(manifest.jobs[n].extra.get("slurm_job_id")) for n in pending]
    return (f"stopped following the sweep ({name}); its {len(ids)} job(s) still in Slurm go on.\n"
            f"  follow:  sweepit status {sweep_dir}\n"
            f"  cancel:  scancel {' '.join(_arrays(ids))}")
