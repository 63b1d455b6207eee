"""The driver's follow loop, in every mode: every `poll_interval_s`, one squeue call (plus sacct for jobs that are
ending) and a look at the result.json of every job still out; between polls, that look again as soon as a followed
job's submitit folder changes (a task wrote its return value there). A job whose result is in has ended once its
task's return value (submitit's result pickle) is too, or once Slurm has ended it. Not submitit's `job.done()`: it
polls sacct at most every 600 s, and waits forever for a cancelled job's result where there is no accounting.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from sweepit._signals import StopSignals
from sweepit.errors import SlurmError
from sweepit.results import (
    JobEntry,
    JobState,
    Ledger,
    Progress,
    ResultGrace,
    own_overrides,
    read_record,
    tail_lines,
)
from sweepit.slurm import _cluster as cluster
from sweepit.slurm._job_states import (
    PACKED,
    WORKER_TRIAL,
    Seen,
    _mine,
    apply,
    look,
    pending_reasons,
    settled_by_results,
    slurm_id,
)
from sweepit.slurm._request import SlurmOptions
from sweepit.slurm._submit import result_pickle

_TICK_S = 0.1    # how soon a signal is acted on
_CLOCK_S = 1.0   # how often a terminal's progress clock is redrawn
_EARLY_SHARE = 20  # a look at the results between polls waits at least this many times what the last one took
_LOOK_WAIT_S = 2.0  # how long a poll waits for squeue (it answers in milliseconds; while the controller is going
                    # away it retries for about 18 s, and the results on disk are not to wait for that)


class Follower:
    """Follows the jobs `nums` of `manifest` and those `add`ed later; `on_poll` runs at every look (the sweep lock's
    heartbeat)."""

    def __init__(self, manifest: Ledger, nums: list[int], progress: Progress, o: SlurmOptions,
                 on_poll: Callable[[], None]) -> None:
        self.manifest = manifest
        # In job order; a dict, so that `n in pending` and a job's end cost O(1) (a list: O(N^2) over a sweep).
        self.pending: dict[int, None] = dict.fromkeys(nums)
        self.progress = progress
        self.poll_interval_s = o.poll_interval_s
        self.result_grace_s = o.result_grace_s
        self.stderr_tail_lines = o.stderr_tail_lines
        self.on_poll = on_poll
        self.done: set[int] = set()  # the jobs followed to their end (each one's state: the ledger's)
        self._phase: dict[int, str] = {
            n: JobState.RUNNING if manifest.jobs[n].state == JobState.RUNNING else JobState.QUEUED for n in nums}
        for phase in self._phase.values():  # adopted from an earlier driver
            if phase == JobState.RUNNING:
                progress.start()
        self._dead = ResultGrace(o.result_grace_s)  # its own result may be a moment late on a shared file system
        self._returning: dict[int, float] = {}  # result in, return value not yet: since when (monotonic)
        self._unreachable = False    # the controller did not answer at the last look (said once, and when back)
        self._reasons = ""           # why queued jobs wait, as last said
        self._looking: tuple[threading.Thread, dict[str, Any]] | None = None  # squeue/sacct in flight
        # Called for a job seen ended (a dead one after its grace): True when the caller takes the job back (a packed
        # job whose worker died goes to another worker) instead of it ending here.
        self.retry: Callable[[int, Seen], bool] = lambda num, seen: False
        self._folders: dict[str, int] = {}  # the followed jobs' submitit folders, each with its mtime at the last look
        self._early_at = 0.0  # no look at the results between polls before this (monotonic)

    def add(self, num: int, counted: bool = False) -> None:
        """Follow one more job (submitted after the follower was made: the Optuna sweeper's trials; a packed job once
        a worker claims it, `counted` among the queued jobs of the progress line already)."""
        self.pending[num] = None
        self.done.discard(num)  # a job started again (promoted by the halving sweeper) is followed to its new end
        self._phase[num] = JobState.QUEUED
        if not counted:
            self.progress.queued += 1

    def drop(self, num: int) -> None:
        """Stop following a job that has not ended (a packed job given back to the queue: followed again once a
        worker claims it)."""
        if num in self.pending:
            del self.pending[num]
            self._move(num, JobState.QUEUED)
            self._returning.pop(num, None)

    def follow(self, look: Callable[[], bool], going: Callable[[], bool]) -> int | None:
        """Follow until `look()` says nothing is left (see `loop`), or a stop signal (SIGINT, SIGTERM): it is returned,
        else None; the jobs go on either way. The progress line is closed and the manifest written whole (its journal
        folded in) at the end."""
        with StopSignals() as stop:
            try:
                self.progress.draw()
                self.loop(lambda: stop.first is None and look(), lambda: stop.first is None and going())
            finally:
                self.progress.close()
                self.manifest.write()
        return stop.first

    def loop(self, look: Callable[[], bool], going: Callable[[], bool]) -> None:
        """The driver's loop, in every mode: at each look, `look()` (adopt the jobs that workers started, submit what
        fits; False: nothing is left to follow), then one poll of Slurm, then the results that come in are taken
        between looks while `going()`."""
        while look():
            next_look = time.monotonic() + self.poll_interval_s
            self.poll()
            drawn = time.monotonic()
            while going() and time.monotonic() < next_look:
                time.sleep(_TICK_S)
                self.settle()
                if self._folders_changed():
                    self.poll(ask_slurm=False)
                if self.progress.live and time.monotonic() - drawn >= _CLOCK_S:
                    self.progress.draw()  # the clock
                    drawn = time.monotonic()

    def poll(self, ask_slurm: bool = True) -> None:
        """One look at every pending job; records what changed in the manifest. Results on disk are taken
        first, so that they are reported even while the Slurm controller does not answer. `ask_slurm` False: the
        results on disk alone (between polls, once a job has written its own)."""
        self.on_poll()
        self._watch_folders()  # before the results are read: a task that writes after this is seen at the next tick
        started = time.monotonic()
        seen = settled_by_results(self.manifest.jobs[n] for n in self.pending)
        self._early_at = time.monotonic() + _EARLY_SHARE * (time.monotonic() - started)
        ask = [n for n in self.pending if n not in seen]
        if ask_slurm and self._looking is None and ask and self._controller_answers():
            self._start_look(ask)
        asked = self._collect_look(seen) if ask_slurm else False
        now = time.monotonic()
        changed: list[int] = []
        for num in [n for n in self.pending if n in seen]:
            s = seen[num]
            entry = self.manifest.jobs[num]
            if s.dead and not self._dead.over(num, now):
                continue
            if s.final and self.retry(num, s):
                continue
            if apply(self.manifest, num, s, partial(tail_lines, entry.extra.get("stderr"), self.stderr_tail_lines)):
                changed.append(num)
            if s.dead:
                self.say(f"sweepit: job {num} [{' '.join(own_overrides(entry.overrides))}] {entry.state}: "
                         f"{read_record(entry.job_dir).error} (stderr: {entry.extra.get('stderr')})")
            self._advance(num, entry.state if s.final else s.state, s.final)
        self._give_up_on_returns(now)
        if changed:
            self.manifest.write(changed)
        if asked or not self.pending:
            self._tell_reasons(pending_reasons({n: s for n, s in seen.items() if n in self.pending}))
        running = (n for n in self.pending if self._phase[n] == JobState.RUNNING)  # read only before a job ends
        self.progress.early_eta(self.manifest.jobs[n].job_dir for n in running)
        self.progress.draw()

    def _watch_folders(self) -> None:
        """Note the mtime of every followed job's submitit folder (one per sbatch call), where its task writes its
        return value as it ends."""
        folders = {str(f) for n in self.pending if (f := self.manifest.jobs[n].extra.get("submitit_folder"))}
        self._folders = {f: _mtime_ns(f) for f in folders}

    def _folders_changed(self) -> bool:
        """Whether a followed job's submitit folder changed since the last look at the results: they are then looked
        at again at once rather than at the next poll, for a cost kept to a small share of the driver's time
        (results of a sweep with many jobs out take longer to read: such a look waits longer after the last)."""
        if not self._folders or time.monotonic() < self._early_at:
            return False
        return any(_mtime_ns(folder) != mtime for folder, mtime in self._folders.items())

    def _start_look(self, nums: list[int]) -> None:
        """Ask Slurm about these jobs in a thread: the results on disk are reported whatever squeue takes."""
        entries = [self.manifest.jobs[n] for n in nums]
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["seen"] = look(entries)
            except SlurmError as e:
                box["error"] = e

        thread = threading.Thread(target=work, name="sweepit-squeue", daemon=True)
        thread.start()
        self._looking = thread, box

    def _collect_look(self, seen: dict[int, Seen]) -> bool:
        """Add what Slurm said to `seen` (results on disk first) once it has answered; whether it had."""
        if self._looking is None:
            return False
        thread, box = self._looking
        thread.join(timeout=_LOOK_WAIT_S)
        if thread.is_alive():
            self._controller_answers()  # says so when squeue hangs because the controller went away
            return False
        self._looking = None
        if "error" in box:  # a slow or restarting controller: look again next time
            self.say(f"sweepit: {box['error']}")
            return False
        seen.update({n: s for n, s in box["seen"].items() if n in self.pending and n not in seen})
        return True

    def _controller_answers(self) -> bool:
        """Whether to ask squeue now; says once that the controller is unreachable, and once that it is back."""
        up = cluster.controller_up()
        if up == self._unreachable:
            self._unreachable = not up
            self.say("sweepit: the Slurm controller answers again; following the jobs in Slurm." if up else
                      "sweepit: the Slurm controller does not answer (`scontrol ping`); results the jobs write are "
                      "still reported, and their Slurm states once it is back. The jobs run on.")
        return up

    def _tell_reasons(self, reasons: str) -> None:
        """Why queued jobs wait (squeue's reason): in the live progress line, else a line when it changes."""
        self.progress.note = f"pending: {reasons}" if reasons else ""
        if reasons != self._reasons and reasons and not self.progress.live:
            self.say(f"sweepit: pending in Slurm: {reasons}")
        self._reasons = reasons

    def say(self, line: str) -> None:
        self.progress.clear()
        print(line, file=sys.stderr, flush=True)
        self.progress.draw()

    def settle(self) -> None:
        """End the jobs whose return value came in since the last look (a file check each, between polls)."""
        for num in list(self._returning):
            if _has_returned(self.manifest.jobs[num]):
                self._end(num)

    def _give_up_on_returns(self, now: float) -> None:
        """Jobs still without a return value `result_grace_s` after their result: those Slurm has ended (or
        forgotten) will not get one; they end with their result alone."""
        late = [n for n, since in self._returning.items() if now - since >= self.result_grace_s]
        if not late or self._unreachable:
            return
        rows = cluster.squeue(slurm_id(self.manifest.jobs[n]) or "" for n in late)
        if rows is None:
            return  # squeue did not answer: ask again next time
        for num in late:
            row = _mine(rows, self.manifest.jobs[num])
            if row is None or not row.in_queue:
                self._end(num)

    def _advance(self, num: int, state: str, final: bool) -> None:
        if final or state == JobState.RUNNING:
            self._move(num, JobState.RUNNING)  # one seen ended at once has run
        elif state == JobState.QUEUED:
            self._move(num, JobState.QUEUED)  # requeued (time limit, preemption)
        if final:
            entry = self.manifest.jobs[num]
            if JobState.is_failure(state) or not slurm_id(entry) or _has_returned(entry):
                self._end(num)
            else:
                self._returning.setdefault(num, time.monotonic())

    def _move(self, num: int, phase: str) -> None:
        """Job `num` counted among the queued or the running jobs of the progress line."""
        if self._phase.get(num) == JobState.QUEUED and phase == JobState.RUNNING:
            self.progress.start()
        elif self._phase.get(num) == JobState.RUNNING and phase == JobState.QUEUED:
            self.progress.running -= 1
            self.progress.queued += 1
        self._phase[num] = phase

    def _end(self, num: int) -> None:
        """Job `num` followed to its end: its state is the ledger's."""
        entry = self.manifest.jobs[num]
        self.progress.finish(num, entry.state, read_record(entry.job_dir).wall_time_s)
        self.done.add(num)
        del self.pending[num]
        self._phase[num] = "done"
        self._returning.pop(num, None)



def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def _has_returned(entry: JobEntry) -> bool:
    if entry.extra.get(WORKER_TRIAL) is not None or entry.extra.get(PACKED) is not None:
        return True  # a job run by a worker: its worker returns when all are done
    path = result_pickle(entry)
    return path is not None and path.exists()
