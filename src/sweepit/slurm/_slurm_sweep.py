"""The driver of a Slurm sweep whose jobs are each a Slurm job: for a fixed list of jobs (`run`, `dry_run`; a packed
sweep's go to `_pack.PackedSweep`) or for jobs that come one by one as a sweeper asks (`start`, `wait_any`, `close`).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from sweepit._host import now_iso
from sweepit._signals import StopSignals
from sweepit.errors import ConfigError, SweepStoppedError
from sweepit.results import (
    JobEntry,
    JobOutcome,
    JobState,
    Ledger,
    Progress,
    SweepLock,
)
from sweepit.slurm import _budget as budget
from sweepit.slurm._cluster import base_ids, scancel
from sweepit.slurm._follow import Follower
from sweepit.slurm._job_states import CANCELLED_BY_DRIVER, look, slurm_id
from sweepit.slurm._limits import QueueLimits, Room, open_room, read_limits_meanwhile
from sweepit.slurm._pack import PackedSweep
from sweepit.slurm._pack_worker import PackSpec
from sweepit.slurm._place import ClusterFacts
from sweepit.slurm._plan import PlannedJob, Planner
from sweepit.slurm._request import SlurmOptions
from sweepit.slurm._submit import Feeder, Task, arrays, dry_run_text, returned, submit_jobs

log = logging.getLogger(__name__)


def check_one_by_one(o: SlurmOptions) -> None:
    """Options that a search submitting its trials one by one (the Optuna sweeper) cannot use: refused before the
    search opens its study, so that nothing is written."""
    if o.workers:
        raise ConfigError("hydra.launcher.workers packs a fixed list of jobs (a grid) into long-lived workers, but "
                          f"an adaptive search got workers={o.workers}.\n"
                          "Use hydra.sweeper.workers=N for Optuna's own workers, or drop hydra.launcher.workers.\n"
                          "See docs/troubleshooting.md#grid-only-keys")
    if o.dry_run:
        raise ConfigError("hydra.launcher.dry_run shows the submission of a fixed list of jobs, so an adaptive "
                          "search (whose next trial depends on the last ones) cannot use it, but got "
                          "dry_run=true. Drop hydra.launcher.dry_run, or dry-run a grid of the same space with "
                          "the basic sweeper.")
    budget.for_grids_only(o)


class SlurmSweep(Planner):
    """One sweep directory's Slurm run. `make_task(job)` is what each of its Slurm tasks runs, `make_worker(spec)` what
    each worker of a packed sweep runs (`hydra.launcher.workers=N`); both are pickled by submitit."""

    def __init__(self, options: SlurmOptions, sweep_dir: Path,
                 plan_job: Callable[[PlannedJob, tuple[str, ...]], dict[str, Any]],
                 make_task: Callable[[PlannedJob], Task], lock: SweepLock | None = None,
                 facts: ClusterFacts | None = None, make_worker: Callable[[PackSpec], Task] | None = None) -> None:
        super().__init__(options, sweep_dir, plan_job, lock, facts)
        self.make_task = make_task
        self.make_worker = make_worker
        self._follower: Follower | None = None  # the run of start()/wait_any()
        self._started: dict[int, PlannedJob] = {}
        self._cancelled = False  # the jobs in flight were cancelled (Ctrl-C): wait for Slurm to end them
        self._room = Room(None)  # the queue limits of the run of start()/wait_any()
        # What the driver does meanwhile, once a fixed list of jobs is out and followed (the end's report imports).
        self.while_jobs_run: Callable[[], None] | None = None

    def dry_run(self, jobs: list[PlannedJob]) -> tuple[str, str | None]:
        """What `run` would submit: each request's sbatch script, the job count and the GPU-hours; and why the
        budget would refuse it (None when it would not): a dry run of a refused sweep fails, as `sbatch --test-only`
        does."""
        if self.options.workers:
            return self._packed().dry_run(jobs)
        return dry_run_text(jobs, self.sweep_dir, self.plan(jobs), self.options)

    def _packed(self) -> PackedSweep:
        assert self.make_worker is not None, "a packed sweep (hydra.launcher.workers=N) needs make_worker"
        return PackedSweep(self, self.make_worker)

    # -- a fixed list of jobs --------------------------------------------------------------------------------
    def run(self, jobs: list[PlannedJob]) -> dict[int, JobOutcome]:
        """Submit `jobs` and follow them to their end (or detach, `wait=false`); how each one ended. Raises
        SweepFailedError, after the results table, when jobs failed (and `fail_on_error`) or on Ctrl-C."""
        if self.options.workers:  # a packed job's worker returns nothing of it: its status is all
            states = self._packed().run(jobs) or {}
            return {j.num: JobOutcome(states.get(j.num)) for j in jobs}
        limits = read_limits_meanwhile(self.options)
        max_array_size = self.plan(jobs)
        manifest = self.begin()
        try:
            return self._run(jobs, manifest, max_array_size, limits)
        finally:
            self.end()

    def _run(self, jobs: list[PlannedJob], manifest: Ledger, max_array_size: int,
             limits: Future[QueueLimits]) -> dict[int, JobOutcome]:
        o = self.options
        skipped = self.skip_finished(manifest, jobs)
        adopted = self._adopt(jobs, manifest, skipped)
        to_submit = [j for j in jobs if j.num not in skipped and j.num not in adopted]
        budget.check(o, self.sweep_dir, [(j.num, j.request) for j in to_submit if j.request is not None])
        throttle = budget.throttles([(c[0].request, len(c)) for c in arrays(to_submit, max_array_size)
                                     if c[0].request is not None], o)
        for job in to_submit:
            manifest.plan(job.num, job.overrides, str(job.job_dir), JobState.NOT_STARTED)
        manifest.write()
        feeder = Feeder(to_submit, manifest, o, max_array_size, self.make_task,
                        open_room(o, limits) if to_submit else Room(None), throttle)
        following = sorted(adopted + [j.num for j in feeder.feed(lambda: _in_queue(manifest, adopted))])
        log.info(_submitted(len(jobs), feeder.ids, len(skipped), len(adopted), self.sweep_dir, len(feeder.held)))
        if not o.wait:
            feeder.leave()
            manifest.write()  # whole, journal folded in: what a reader of sweep.json alone expects
            print(_detached(manifest, following, self.sweep_dir, len(feeder.held)), flush=True)
            return {j.num: JobOutcome(None) for j in jobs}
        if self.while_jobs_run is not None and following:
            threading.Thread(target=_meanwhile, args=(self.while_jobs_run,), name="sweepit-meanwhile",
                             daemon=True).start()
        progress = Progress(len(jobs))
        progress.skip(len(skipped))
        follower = Follower(manifest, following, progress, o, self.lock.touch)

        def going() -> bool:  # jobs held back by the queue limits are submitted at a look
            return bool(follower.pending or feeder.held)

        def look() -> bool:
            for job in feeder.feed(lambda: _in_queue(manifest, follower.pending)):
                follower.add(job.num, counted=True)
            return going()

        stop = follower.follow(look, going)
        if stop is not None:
            raise SweepStoppedError(_stopped(manifest, list(follower.pending), stop, self.sweep_dir))
        self.finish(manifest, jobs, skipped)
        return {j.num: _outcome(manifest.jobs[j.num]) for j in jobs}

    def _adopt(self, jobs: list[PlannedJob], manifest: Ledger, skipped: set[int]) -> list[int]:
        """A resume's jobs still queued or running from an earlier submission: followed, not submitted again."""
        if not self.options.resume:
            return []
        known = [manifest.jobs[j.num] for j in jobs if j.num not in skipped and j.num in manifest.jobs
                 and manifest.jobs[j.num].job_dir == str(j.job_dir)]
        return [num for num, s in look(known).items() if not s.final and not s.dead]

    # -- jobs one by one, as a sweeper asks (the Optuna sweeper's AsyncLauncher protocol) -------------------
    def start(self, job: PlannedJob) -> None:
        """Submit `job` now (one sbatch call); `wait_any` follows it with the others in flight."""
        o = self.options
        check_one_by_one(o)
        self.plan([job])
        if self._follower is None:
            self._follower = Follower(self.begin(), [], Progress(0), o, self.lock.touch)  # the lock: till close()
            self._room = open_room(o)
        follower = self._follower
        entry = follower.manifest.jobs.get(job.num)
        if entry is not None and entry.state == JobState.PAUSED:  # promoted by the halving sweeper: a new attempt
            follower.manifest.move(job.num, JobState.NOT_STARTED, again=True, extra={}, started_at=None, ended_at=None)
        else:
            follower.manifest.plan(job.num, job.overrides, str(job.job_dir), JobState.NOT_STARTED)
        self._room.submit_waiting(1, lambda n: submit_jobs([job], follower.manifest, o, self.make_task),
                                  lambda: _in_queue(follower.manifest, follower.pending), f"trial job {job.num}",
                                  o.poll_interval_s, follower.poll)
        self._started[job.num] = job
        follower.add(job.num)

    def wait_any(self) -> list[tuple[PlannedJob, JobOutcome]]:
        """Follow the jobs in flight (one squeue call every `poll_interval_s`) until one of them ends; each job
        that ended since the last call, with how it ended.

        Ctrl-C (or SIGTERM) cancels every job in flight with scancel; they come back as `interrupted` once
        Slurm has ended them, so the sweeper stops with its message. A second one stops waiting for that."""
        follower = self._follower
        assert follower is not None, "start() a job before wait_any()"

        def second_stops(signum: int) -> None:
            if len(stop.received) > 1:
                raise KeyboardInterrupt(f"stopped by a second {signal.Signals(signum).name}")

        def ended() -> list[int]:
            return [n for n in self._started if n in follower.done]

        with StopSignals(on_signal=second_stops) as stop:
            def look() -> bool:
                if not follower.pending or ended():
                    return False
                if stop.first is not None and not self._cancelled:
                    self._cancel_in_flight(follower, signal.Signals(stop.first).name)
                return True

            follower.loop(look, lambda: (stop.first is None or self._cancelled) and not ended())
        return [(self._started.pop(n), _outcome(follower.manifest.jobs[n])) for n in ended()]

    def _cancel_in_flight(self, follower: Follower, why: str) -> None:
        self._cancelled = True
        manifest, left = follower.manifest, list(follower.pending)
        ids = [str(manifest.jobs[n].extra["slurm_job_id"]) for n in left if manifest.jobs[n].extra.get("slurm_job_id")]
        if ids:
            scancel(ids)
            for n in left:  # read back once squeue and sacct have forgotten the job (no accounting, or purged)
                manifest.jobs[n].extra[CANCELLED_BY_DRIVER] = now_iso()
            manifest.write(left)
            log.warning(f"{why}: cancelled {len(ids)} Slurm job(s) still in flight: {', '.join(ids)} (jobs "
                        f"{', '.join(map(str, left))})")

    def close(self) -> None:
        """End the run of start()/wait_any(). Jobs still in flight (the sweeper stopped on an error) are
        cancelled with scancel, since no one will read their results; the manifest records them."""
        follower, self._follower = self._follower, None
        if follower is None:
            return
        try:
            if follower.pending and not self._cancelled:
                self._cancel_in_flight(follower, "the search stopped")
            for n in follower.pending:
                follower.manifest.move(n, JobState.INTERRUPTED, ended_at=now_iso())
        finally:
            follower.progress.close()
            follower.manifest.write()
            self._started.clear()
            self._cancelled = False
            self.end()


def _meanwhile(work: Callable[[], None]) -> None:
    """Work done ahead of the sweep's end, which does it again where it failed here and says why."""
    with contextlib.suppress(Exception):
        work()


def _in_queue(manifest: Ledger, nums: Iterable[int]) -> set[str]:
    """The Slurm ids of the jobs `nums` (those followed: in the queue until seen ended)."""
    return {i for n in nums if (i := slurm_id(manifest.jobs[n]))}


def _outcome(entry: JobEntry) -> JobOutcome:
    """How the job ended, as its ledger entry says (a job that finished before: as its result said on resume)."""
    if JobState.is_failure(entry.state):
        return JobOutcome(entry.state)
    has_returned, value = returned(entry)
    return JobOutcome(entry.state, value, has_returned)


# -- what the driver tells the user (an array's id stands for all its tasks) -------------------------------------
def _submitted(n_jobs: int, ids: list[str], n_skipped: int, n_adopted: int, sweep_dir: Path, n_held: int = 0) -> str:
    arrays = base_ids(ids)
    parts = [f"Submitted {len(ids)} of {n_jobs} job(s) to Slurm in {len(arrays)} sbatch call(s)"
             + (f" (job ids {', '.join(arrays)})" if arrays else "")]
    if n_skipped:
        parts.append(f"{n_skipped} finished before (skipped)")
    if n_adopted:
        parts.append(f"{n_adopted} still queued or running from before (followed, not submitted again)")
    if n_held:
        parts.append(f"{n_held} held back by the queue limit (submitted as earlier ones end)")
    return "; ".join(parts) + f"; sweep dir {sweep_dir}"


def _detached(manifest: Ledger, nums: list[int], sweep_dir: Path, n_held: int = 0) -> str:
    ids = [str(manifest.jobs[n].extra.get("slurm_job_id")) for n in nums]
    lines = [f"Not waiting (hydra.launcher.wait=false): {len(ids)} job(s) in Slurm: {' '.join(ids)}"]
    if n_held:
        lines.append(f"  {n_held} job(s) not submitted, held back by the queue limit: `sweepit resume {sweep_dir}` "
                     "submits them as these end (it follows the sweep)")
    lines += [f"  follow:  sweepit status {sweep_dir} --watch   (to the end, then writes the report)",
              f"  resume:  sweepit resume {sweep_dir}   (submits again only the jobs that did not complete)"]
    if ids:
        lines.append(f"  cancel:  scancel {' '.join(base_ids(ids))}")
    return "\n".join(lines)


def _stopped(manifest: Ledger, pending: list[int], signum: int, sweep_dir: Path) -> str:
    name = signal.Signals(signum).name
    ids = [str(manifest.jobs[n].extra.get("slurm_job_id")) for n in pending]
    return (f"stopped following the sweep ({name}); its {len(ids)} job(s) still in Slurm go on.\n"
            f"  follow:  sweepit status {sweep_dir}\n"
            f"  cancel:  scancel {' '.join(base_ids(ids))}")
