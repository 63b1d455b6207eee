"""The driver's event loop: have the fork server fork a process per job up to the cap, copy its output, notice its end,
stop on signals. No polling: it sleeps in one `multiprocessing.connection.wait` on the fork server's socket (which says
when a job ended, and how), every job's reply and output pipes, and a wake-up pipe written by the signal handler."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from multiprocessing.connection import wait
from typing import Protocol

from sweepit._signals import StopSignals
from sweepit.local._capture import JobOutput
from sweepit.local._forkserver import ForkServer, Job
from sweepit.local._resources import GpuPool, visible_gpus
from sweepit.results import LOCK_HEARTBEAT_S, JobOutcome, JobState
from sweepit.train import FORKED_AFTER_CUDA

log = logging.getLogger(__name__)
_CLOCK_TICK_S = 1.0  # how often a terminal's progress clock is redrawn
FRESH_FOR_CUDA = (  # three lines: what happened, what to do, where the reasons are
    "CUDA was initialised before the sweep's jobs were forked, so each job given GPUs starts in a fresh Python "
    "interpreter instead: no job is lost, but each imports the app, Hydra and torch again.\n"
    "Move that call into the task function, or import sweepit before it, for warm forks again.\n"
    "Why, and the other fixes: docs/gpu.md#cuda-initialised-before-the-fork")


class PoolHooks(Protocol):
    """What the launcher does around each job; `ended` runs after the job's process is gone. A subclass without a
    terminal to draw on inherits `tick` and `before_echo` as no-ops."""

    def prepare(self, job: Job) -> bool: ...   # plan: job_dir, n_gpus; False: do not run it
    def before_fork(self, job: Job) -> None: ...
    def started(self, job: Job) -> None: ...
    def ended(self, job: Job) -> None: ...

    def tick(self) -> None:  # after every wake-up (redraws the progress line)
        return None

    def before_echo(self) -> None:  # before job output is copied to the terminal
        return None

    def retried(self, job: Job) -> None:  # after `started`, back in the queue: its fork server died under it
        return None


class Pool:
    def __init__(self, n_workers: int, gpu_pool: GpuPool, threads: int, echo: bool, term_grace_s: float,
                 server: ForkServer, hooks: PoolHooks, clock_ticks: bool) -> None:
        self.n_workers = n_workers
        self.gpu_pool = gpu_pool
        self.use_gpus = bool(gpu_pool.all)  # each job on its own GPUs; without any, jobs see what the driver sees
        self.threads = threads
        self.echo = echo
        self.term_grace_s = term_grace_s
        self.server = server                 # started by the caller before it held its jobs; restarted here
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
        self._said_fresh = False
        self.spawned: dict[int, subprocess.Popen[bytes]] = {}  # jobs in fresh interpreters: this process reaps them

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
        is prepared (planned: its directory, its devices) just before it starts, or ahead of time while every worker is
        busy, so that this work overlaps the jobs instead of delaying the first one."""
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
            self._await_end(job, deadline)
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
                self._await_end(job, None)
            except Exception as e:
                error = error or e
        if error is not None:
            raise error

    def _await_end(self, job: Job, deadline: float | None) -> None:
        """Until `job` is finished (or `deadline`, a time.monotonic()), hearing only of job ends."""
        while job.num in self.running:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if job.num in self.spawned:
                assert job.sentinel is not None
                if not wait([job.sentinel], timeout):
                    return
                self._reap(job)
            elif job.lost:
                assert job.sentinel is not None
                if not wait([job.sentinel], timeout):
                    return
                self._lost(job)
            elif job.num in self.server.exits:
                self._finish(job, self.server.exits.pop(job.num))
            elif self.server.alive:
                if not wait([self.server.fileno()], timeout):
                    return
                self.server.events()
                if not self.server.alive:
                    self._server_died()
            else:
                self._server_died()

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
        if self.server.alive:
            handlers[self.server.fileno()] = self._hear
            exits.add(self.server.fileno())
        for job in self.running.values():
            assert job.output is not None
            if job.lost and job.sentinel is not None:
                handlers[job.sentinel] = partial(self._lost, job)
                exits.add(job.sentinel)
            elif job.num in self.spawned and job.sentinel is not None:
                handlers[job.sentinel] = partial(self._reap, job)
                exits.add(job.sentinel)
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
                if job.stopped or job.lost:
                    self._signal(job, signal.SIGKILL)
            self._kill_at = None
        if all(job.output is None or job.output.ends_line for job in self.running.values()):
            self.hooks.tick()  # not in the middle of a line a job is echoing

    def _start(self, job: Job, gpus: list[str]) -> None:
        job.gpus = gpus
        self.hooks.before_fork(job)
        job.output = JobOutput(job.job_dir, self.echo, self.hooks.before_echo)
        reader, writer = multiprocessing.Pipe(duplex=False)
        sentinel, held = os.pipe()  # its write end only the job holds: end-of-file once the job is gone
        env = {"OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        if self.use_gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        self._hear()  # a server that died while no job ran is found now, not by this job
        if not self.server.alive:  # it died: a new one, which must not hold the running jobs' pipes
            log.warning("sweepit: starting a new fork server")
            self.server.start(close_fds=self._held_fds())
        fds = [*job.output.child_fds, writer.fileno(), held]
        # A job that uses GPUs (its own, or the process's where none are handed out: an Optuna worker's) starts in a
        # fresh interpreter where its fork server's forks cannot use CUDA.
        if (self.server.fresh is not None and (gpus or not self.use_gpus) and not self.server.forks_without_cuda()
                and (gpus or visible_gpus())):
            self._say_fresh()
            proc, facts = self.server.spawn(job, env, self.threads, fds)
            self.spawned[job.num] = proc
            started: tuple[int, dict[str, str]] | None = (proc.pid, facts)
        else:
            started = self.server.fork(job, env, self.threads, fds)
        writer.close()
        os.close(held)
        job.output.close_child_side()
        job.conn, job.sentinel = reader, sentinel
        job.pid, job.facts = started if started is not None else (None, {})
        job.started_s = time.monotonic()
        self.running[job.num] = job
        self.hooks.started(job)
        self._hear()  # the ends the server told of while this job was forked; or its death

    def _held_fds(self) -> list[int]:
        """The descriptors of this process that a process forked from it must not keep open."""
        fds = self.signals.fds()
        for job in self.running.values():
            fds += job.output.fds() if job.output is not None else []
            fds += [job.conn.fileno()] if job.conn is not None else []
            fds += [job.sentinel] if job.sentinel is not None else []
        return fds

    def _say_cuda(self) -> None:
        if not self._said_cuda:
            self._said_cuda = True
            log.warning(f"sweepit: {FORKED_AFTER_CUDA}")

    def _say_fresh(self) -> None:
        if not self._said_fresh:
            self._said_fresh = True
            log.warning(f"sweepit: {FRESH_FOR_CUDA}")

    def _reap(self, job: Job) -> None:
        """A job in a fresh interpreter is gone (its sentinel closed): its exit status, then its end."""
        self._finish(job, self.spawned.pop(job.num).wait())

    def _receive(self, job: Job) -> None:
        assert job.conn is not None
        try:
            reply = job.conn.recv()
        except (EOFError, OSError):
            reply = None
        if isinstance(reply, JobOutcome):
            job.reply = reply
            if reply.error == FORKED_AFTER_CUDA:  # the fork server's torch state, which its job saw
                self._say_cuda()
        job.conn.close()
        job.conn = None

    def _hear(self) -> None:
        """What the fork server says: jobs that ended (finished here), or its own death."""
        self.server.events()
        for num in [n for n in self.server.exits if n in self.running and not self.running[n].lost]:
            self._finish(self.running[num], self.server.exits.pop(num))
        if not self.server.alive:
            self._server_died()

    def _server_died(self) -> None:
        """The fork server died (killed, out of memory): each of its jobs got SIGTERM with it (and records itself
        interrupted), its process group gets one too, and SIGKILL after the grace period; once a job is gone it
        runs again (`_lost`)."""
        lost = [job for job in self.running.values() if not job.lost and job.num not in self.spawned]
        if not lost:
            return
        log.warning(f"sweepit: the fork server died; its job(s) {', '.join(str(j.num) for j in lost)} are stopped "
                    "and run again once")
        for job in lost:
            job.lost = True
            self._signal(job, signal.SIGTERM)
        if self._kill_at is None:
            self._kill_at = time.monotonic() + self.term_grace_s

    def _lost(self, job: Job) -> None:
        """A job of a fork server that died is gone: run again once (a new server forks it), unless it ended on its
        own (its reply came) or the sweep is stopping; else recorded, without an exit status."""
        if job.conn is not None and job.conn.poll():
            self._receive(job)
        reply = job.reply
        if (job.retried or job.stopped or self.stop_signal is not None
                or (reply is not None and reply.status != JobState.INTERRUPTED)):
            self._finish(job, None)
            return
        self._release(job)
        job.retried, job.lost, job.reply, job.pid, job.facts = True, False, None, None, {}
        job.exit_code = job.started_s = job.wall_time_s = None
        self.queue.appendleft(job)
        self.hooks.retried(job)

    def _finish(self, job: Job, exit_code: int | None) -> None:
        """Job ended with `exit_code` (None: unknown, its server died): its last words read, its record written."""
        assert job.output is not None
        if job.conn is not None and job.conn.poll():
            self._receive(job)
        job.output.drain()
        job.exit_code = exit_code
        job.wall_time_s = time.monotonic() - (job.started_s or time.monotonic())
        self._release(job)
        self.hooks.ended(job)

    def _release(self, job: Job) -> None:
        """Let go of an ended job's pipes, GPUs and worker slots."""
        if job.conn is not None:
            job.conn.close()
            job.conn = None
        if job.sentinel is not None:
            os.close(job.sentinel)
            job.sentinel = None
        if job.output is not None:
            job.output.drain()
            job.output.close()
            job.output = None  # closed: a sweep of 100,000 jobs keeps only what it reports
        self.gpu_pool.give(job.gpus)
        del self.running[job.num]

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

