"""The driver's event loop: fork a process per job up to the cap, copy its output, notice its end, stop on signals.
No polling: it sleeps in one `multiprocessing.connection.wait` on every job's exit sentinel, reply and output pipes,
and a wake-up pipe written by the signal handler."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Protocol

from sweepit._signals import StopSignals, stop_signals_held
from sweepit.local._capture import JobOutput
from sweepit.local._resources import GpuPool
from sweepit.local._worker import ChildSpec, Reply
from sweepit.results import LOCK_HEARTBEAT_S
from sweepit.train import FORKED_AFTER_CUDA, forked_after_cuda

log = logging.getLogger(__name__)
_FORK = multiprocessing.get_context("fork")
_CLOCK_TICK_S = 1.0  # how often a terminal's progress clock is redrawn


@dataclass(slots=True)  # slots: a sweep of 100,000 jobs keeps them all
class Job:
    num: int
    overrides: list[str]
    config: Any = None               # the composed sweep config (a DictConfig, hydra node included)
    job_dir: Path = Path()
    n_gpus: int = 0
    n_slots: int = 1                 # workers it occupies: its ranks when they run on CPU
    ready: bool | None = None        # None: not prepared yet; False: not to run (finished before, refused)
    # Filled in while it runs:
    gpus: list[str] = field(default_factory=list)
    pid: int | None = None
    started_s: float | None = None   # time.monotonic()
    wall_time_s: float | None = None
    exit_code: int | None = None     # negative: killed by that signal (multiprocessing's convention)
    reply: Reply | None = None
    stopped: bool = False            # the driver signalled it (Ctrl-C, SIGTERM)
    proc: BaseProcess | None = None
    conn: Connection | None = None
    output: JobOutput | None = None


ChildTarget = Callable[[Job, ChildSpec, Connection], None]


class PoolHooks(Protocol):
    """What the launcher does around each job; `ended` runs after the job's process is gone. A subclass without a
    terminal to draw on inherits `tick` and `before_echo` as no-ops."""

    def prepare(self, job: Job) -> bool: ...   # compose config, job_dir, n_gpus; False: do not run it
    def before_fork(self, job: Job) -> None: ...
    def started(self, job: Job) -> None: ...
    def ended(self, job: Job) -> None: ...

    def tick(self) -> None:  # after every wake-up (redraws the progress line)
        return None

    def before_echo(self) -> None:  # before job output is copied to the terminal
        return None


class Pool:
    def __init__(self, n_workers: int, gpu_pool: GpuPool, threads: int, echo: bool, term_grace_s: float,
                 child: ChildTarget, hooks: PoolHooks, clock_ticks: bool) -> None:
        self.n_workers = n_workers
        self.gpu_pool = gpu_pool
        self.use_gpus = bool(gpu_pool.all)  # each job on its own GPUs; without any, jobs see what the driver sees
        self.threads = threads
        self.echo = echo
        self.term_grace_s = term_grace_s
        self.child = child
        self.hooks = hooks
        self.clock_ticks = clock_ticks       # wake up every second to redraw a clock
        self.running: dict[int, Job] = {}
        self.queue: deque[Job] = deque()
        # Ctrl-C and SIGTERM while the pool runs: the first stops the running jobs in order, another kills them.
        # Off the main thread nothing is caught, and the sweep stops only when its jobs end.
        self.signals = StopSignals(wakeup=True)
        self._kill_at: float | None = None   # monotonic time at which stopped jobs get SIGKILL
        self._escalated = False
        self._said_cuda = False

    @property
    def stop_signal(self) -> int | None:
        return self.signals.first

    def run(self, jobs: list[Job]) -> None:
        """Run `jobs` in order, on at most `n_workers` workers; on a signal, stop the running ones and return."""
        self.open()
        self.queue.extend(jobs)
        try:
            while self.busy():
                self.step()
        finally:
            self.close()

    # An open run: `submit` adds jobs while others run (the Optuna sweeper through the launcher, a Slurm worker).
    def open(self) -> None:
        self.signals.install()

    def submit(self, job: Job) -> None:
        self.queue.append(job)

    def busy(self) -> bool:
        """Jobs running, or queued and allowed to start."""
        return bool(self.running or (self.queue and self.stop_signal is None))

    def step(self) -> None:
        """Start what fits, then sleep until something happens: a job's output or end, a signal, a clock tick. A job
        is prepared (its config composed) just before it starts, or ahead of time while every worker is busy, so
        that this work overlaps the jobs instead of delaying the first one."""
        if self.stop_signal is not None:
            self._stop_running()
        self._fill()
        ahead = self._next_unprepared() if self.stop_signal is None else None
        if self.running:
            self._wait_once(0.0 if ahead is not None else self._timeout())
        if ahead is not None:
            self._prepare(ahead)

    def close(self) -> None:
        """End a run: jobs still running are killed (after an error, or the caller gave up on them)."""
        try:
            self.kill_all()
        finally:
            self.signals.restore()

    def stop(self) -> None:
        """Stop the running jobs now: SIGTERM (each records itself `interrupted`), SIGKILL to those left after the
        grace period, then finish each."""
        running = list(self.running.values())
        for job in running:
            job.stopped = True
            self._signal(job, signal.SIGTERM)
        deadline = time.monotonic() + self.term_grace_s
        for job in running:
            if job.proc is not None:
                job.proc.join(max(0.0, deadline - time.monotonic()))
        self.kill_all()

    def kill_all(self) -> None:
        """SIGKILL every running job, then finish each: a job whose record cannot be written (a full disk)
        neither spares the others nor leaves them running; the first such error is raised at the end."""
        jobs = list(self.running.values())
        for job in jobs:
            job.stopped = True
            self._signal(job, signal.SIGKILL)
        error: Exception | None = None
        for job in jobs:
            try:
                self._finish(job)
            except Exception as e:
                error = error or e
        if error is not None:
            raise error

    def _prepare(self, job: Job) -> bool:
        if job.ready is None:
            job.ready = self.hooks.prepare(job)
        return job.ready

    def _next_unprepared(self) -> Job | None:
        for i, job in enumerate(self.queue):
            if i >= self.n_workers:
                return None
            if job.ready is None:
                return job
        return None

    def _fill(self) -> None:
        while self.queue and self.stop_signal is None and self._slots_used() < self.n_workers:
            job = self.queue[0]
            if not self._prepare(job):
                self.queue.popleft()  # finished before (resume), or refused: the hooks recorded it
                continue
            if self._slots_used() + job.n_slots > self.n_workers:
                break  # the next job waits for workers to free up
            gpus = self.gpu_pool.take(job.n_gpus) if self.use_gpus else []
            if gpus is None:
                break  # the next job waits for GPUs to free up
            self._start(self.queue.popleft(), gpus)

    def _slots_used(self) -> int:
        return sum(job.n_slots for job in self.running.values())

    def _timeout(self) -> float:
        timeouts = [LOCK_HEARTBEAT_S]  # wake up now and then to refresh the sweep lock, even with nothing to draw
        if self._kill_at is not None:
            timeouts.append(max(0.0, self._kill_at - time.monotonic()))
        if self.clock_ticks:
            timeouts.append(_CLOCK_TICK_S)
        return min(timeouts)

    def _wait_once(self, timeout: float) -> None:
        handlers: dict[int, Callable[[], object]] = {}
        if self.signals.wakeup_fd >= 0:
            handlers[self.signals.wakeup_fd] = self.signals.drain
        exits = set()
        for job in self.running.values():
            assert job.proc is not None and job.output is not None
            handlers[job.proc.sentinel] = partial(self._finish, job)
            exits.add(job.proc.sentinel)
            if job.conn is not None:
                handlers[job.conn.fileno()] = partial(self._receive, job)
            for fd in job.output.fds():
                handlers[fd] = partial(job.output.read, fd)
        ready = [fd for fd in wait(list(handlers), timeout=timeout) if isinstance(fd, int)]
        # Output and replies first, exits last: a job's last words are read before it is finished.
        for fd in sorted(ready, key=lambda fd: fd in exits):
            handlers[fd]()
        if self._kill_at is not None and time.monotonic() >= self._kill_at:
            for job in self.running.values():
                self._signal(job, signal.SIGKILL)
            self._kill_at = None
        if all(job.output is None or job.output.ends_line for job in self.running.values()):
            self.hooks.tick()  # not in the middle of a line a job is echoing

    def _start(self, job: Job, gpus: list[str]) -> None:
        job.gpus = gpus
        self.hooks.before_fork(job)
        job.output = JobOutput(job.job_dir, self.echo, self.hooks.before_echo)
        reader, writer = _FORK.Pipe(duplex=False)
        env = {"OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        if self.use_gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        inherited = [reader.fileno()]
        inherited += self.signals.fds()
        for other in self.running.values():
            inherited += other.output.fds() if other.output is not None else []
            inherited += [other.conn.fileno()] if other.conn is not None else []
        spec = ChildSpec(stdout_fd=job.output.child_fds[0], stderr_fd=job.output.child_fds[1],
                         env=env, threads=self.threads, close_fds=inherited, parent_pid=os.getpid())
        if forked_after_cuda():
            self._say_cuda()
        _flush_all()  # or the job would inherit, and write again, whatever the driver still buffers
        proc = _FORK.Process(target=self.child, args=(job, spec, writer), name=f"sweepit-job-{job.num}")
        with stop_signals_held():  # the job gets a stop signal only once its own handler is in place
            proc.start()
        assert proc.pid is not None
        with contextlib.suppress(OSError):
            os.setpgid(proc.pid, proc.pid)  # also done by the job; whichever runs first wins the race
        writer.close()
        job.output.close_child_side()
        job.proc, job.conn, job.pid = proc, reader, proc.pid
        job.started_s = time.monotonic()
        self.running[job.num] = job
        self.hooks.started(job)

    def _say_cuda(self) -> None:
        if not self._said_cuda:
            self._said_cuda = True
            log.warning(f"sweepit: {FORKED_AFTER_CUDA}")

    def _receive(self, job: Job) -> None:
        assert job.conn is not None
        try:
            reply = job.conn.recv()
        except (EOFError, OSError):
            reply = None
        if isinstance(reply, Reply):
            job.reply = reply
            if reply.error == FORKED_AFTER_CUDA:  # what this process cannot see of torch's state, its job did
                self._say_cuda()
        job.conn.close()
        job.conn = None

    def _finish(self, job: Job) -> None:
        assert job.proc is not None and job.output is not None
        if job.conn is not None:
            if job.conn.poll():
                self._receive(job)
            else:
                job.conn.close()
                job.conn = None
        job.output.drain()
        self._signal(job, signal.SIGKILL)  # whatever the job started and left running
        job.proc.join()
        job.exit_code = job.proc.exitcode
        job.proc.close()
        job.output.close()
        job.wall_time_s = time.monotonic() - (job.started_s or time.monotonic())
        self.gpu_pool.give(job.gpus)
        del self.running[job.num]
        self.hooks.ended(job)
        job.proc = job.output = None  # closed: a sweep of 100,000 jobs keeps only what it reports

    def _signal(self, job: Job, sig: int) -> None:
        if job.pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(job.pid, sig)

    def _stop_running(self) -> None:
        """First signal: the same signal to every running job (its record names the signal the user sent: SIGINT
        for Ctrl-C), SIGKILL after the grace period. Another: SIGKILL now."""
        fresh = [job for job in self.running.values() if not job.stopped]
        for job in fresh:
            job.stopped = True
            self._signal(job, self.stop_signal or signal.SIGTERM)
        if fresh and self._kill_at is None:
            self._kill_at = time.monotonic() + self.term_grace_s
        if len(self.signals.received) > 1 and not self._escalated:
            self._escalated = True
            self._kill_at = time.monotonic()


def _flush_all() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(OSError, ValueError):  # a handler whose stream was closed under it
            handler.flush()
