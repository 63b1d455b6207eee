"""The fork server: a small warm process, forked from the driver (or a Slurm worker) before it holds its jobs, its
manifest or its plan, that forks each job. A fork copies the page tables of the process it forks from, and every
page either side writes afterwards: forked from the server, a job copies Python, Hydra, the app and the preloaded
modules, and nothing of the driver's state.

One Unix socket (SOCK_SEQPACKET: one message per order or event) joins the two. The driver sends an order per job
(its number, overrides, directory, environment) with the job's descriptors (stdout, stderr, the reply pipe, the exit
sentinel) over SCM_RIGHTS; the server forks the job (multiprocessing's fork start method, so a job starts as any
multiprocessing child does), says `started` with its pid, and `exited` with its exit status once it reaps it (negative:
the signal that killed it). The server dies with the driver (SIGKILL on the driver's death), and each job with the
server (SIGTERM, as a job forked by the driver died with it); a server that died is replaced by the pool.

Before its first order the server says whether CUDA was initialised where it was forked (`READY`): its forks could not
use CUDA then. A job given GPUs is then started in a fresh interpreter instead (`spawn`, where the caller can pickle
it: `fresh`), with the same descriptors, and the driver reaps it itself.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import os
import pickle
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from sweepit._signals import stop_signals_held
from sweepit.errors import ConfigError, with_causes
from sweepit.local._worker import RECORDED_KEYS, ChildSpec, child_main, die_with
from sweepit.results import JobOutcome
from sweepit.train import forked_after_cuda

if TYPE_CHECKING:
    from sweepit.local._capture import JobOutput

log = logging.getLogger(__name__)
_FORK = multiprocessing.get_context("fork")
_MAX_MESSAGE = 1 << 20  # an order: a job's overrides and environment
_N_FDS = 4              # stdout, stderr, reply, sentinel
READY = -1              # the number of the server's first event: set up, and whether CUDA was initialised before it


@dataclass(slots=True)  # slots: a sweep of 100,000 jobs keeps them all
class Job:
    num: int
    overrides: list[str]
    # What the driver knows of the job's config (a DictConfig: the values it plans with); in the fork server, the
    # job's config, composed there for the job's process.
    config: Any = None
    job_dir: Path = Path()
    job_env: dict[str, str] = field(default_factory=dict)  # a sweeper's additions to its hydra.job.env_set
    n_gpus: int = 0
    n_slots: int = 1                 # workers it occupies: its ranks when they run on CPU
    ready: bool | None = None        # None: not prepared yet; False: not to run (finished before, refused)
    # Filled in while it runs:
    gpus: list[str] = field(default_factory=list)
    pid: int | None = None
    started_s: float | None = None   # time.monotonic()
    wall_time_s: float | None = None
    exit_code: int | None = None     # negative: killed by that signal (multiprocessing's convention)
    reply: JobOutcome | None = None
    facts: dict[str, str] = field(default_factory=dict)  # its config's values for its record (from the server)
    stopped: bool = False            # the driver signalled it (Ctrl-C, SIGTERM)
    lost: bool = False               # its fork server died: it is gone once its sentinel closes
    retried: bool = False            # started again after its fork server died
    sentinel: int | None = None
    conn: Connection | None = None
    output: JobOutput | None = None


@dataclass
class Order:
    """One job, as the server needs it to fork it."""

    num: int
    overrides: list[str]
    job_dir: str
    job_env: dict[str, str]          # the sweeper's additions to the job's hydra.job.env_set
    env: dict[str, str]              # the process environment: CUDA_VISIBLE_DEVICES, thread counts
    threads: int                     # torch CPU threads


@dataclass
class Event:
    """An event of the server: job `num` started as `pid`, or ended with `exit_code` (None: not ended)."""

    num: int
    pid: int
    exit_code: int | None = None
    facts: dict[str, str] = field(default_factory=dict)  # its config's RECORDED_KEYS, for a record of its death
    cuda: bool = False      # READY's: CUDA was initialised in the server (or before its fork): no fork can use it


class ForkServer:
    """The driver's side: `start` forks the server, `fork` has it fork one job, `events` reads what it says.
    `body(job)` runs the job in its process; `compose(job)` sets `job.config` in the server just before the fork
    (from the server's warm config loader: each job composed once, for its own process; an error is the job's);
    `setup()` runs in the server once it is forked (preloads, which the driver then need not import). `fresh(job)`, in
    the caller: the job composed and pickled (a callable returning its JobOutcome) for `spawn`; None: no job is
    spawned."""

    def __init__(self, body: Callable[[Job], JobOutcome], compose: Callable[[Job], None] | None = None,
                 setup: Callable[[], None] = lambda: None, fresh: Callable[[Job], bytes] | None = None) -> None:
        self.body, self.compose, self.setup, self.fresh = body, compose, setup, fresh
        self.pid: int | None = None
        self.sock: socket.socket | None = None
        self.exits: dict[int, int] = {}   # job number -> exit code, heard and not yet taken
        self.cuda: bool | None = None     # READY's word: None until heard

    @property
    def alive(self) -> bool:
        return self.sock is not None

    def fileno(self) -> int:
        assert self.sock is not None
        return self.sock.fileno()

    def start(self, close_fds: list[int] | tuple[int, ...] = ()) -> None:
        """Fork the server; `close_fds`: the forking process's descriptors the server must not hold (a restarted
        server's driver holds its running jobs' pipes)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        _flush_all()  # or the server would inherit, and write again, whatever the driver still buffers
        driver = os.getpid()
        # Held in the server for good (it never leaves this block): its jobs release them once their own handlers
        # are in place. Pending signals are not inherited: one sent to the server is never delivered.
        with stop_signals_held():
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    ours.close()
                    for fd in close_fds:
                        with contextlib.suppress(OSError):
                            os.close(fd)
                    _serve(theirs, self, driver)
                    code = 0
                except BaseException:  # said before the exit below, which would swallow it
                    traceback.print_exc()
                    sys.stderr.write("sweepit: the fork server stopped on the error above\n")
                finally:
                    os._exit(code)  # never the driver's atexit handlers (its sweep lock, its manifest)
        theirs.close()
        self.pid, self.sock, self.exits, self.cuda = pid, ours, {}, None

    def forks_without_cuda(self) -> bool:
        """Whether a job forked by the server can use CUDA: false where CUDA was initialised before the server's fork
        (the app, a package it imports) or in its setup. Waits for its READY (its preloads) the first time."""
        while self.sock is not None and self.cuda is None:
            self.events(block=True)
        return not self.cuda

    def spawn(self, job: Job, env: dict[str, str], threads: int, fds: list[int]
              ) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
        """Start `job` in a fresh interpreter (`python -m sweepit.local._fresh`), a child of this process, with its
        descriptors `fds` as `fork` takes them: its process, and its config's facts. Composed here (`fresh`); a config
        that does not compose is the job's error, raised in it."""
        assert self.fresh is not None
        try:
            payload = self.fresh(job)
        except Exception as e:
            payload = pickle.dumps(_Raises(ConfigError(f"job {job.num}'s config does not compose: {with_causes(e)}")))
        stdout_fd, stderr_fd, reply_fd, _ = fds
        spec = ChildSpec(stdout_fd=stdout_fd, stderr_fd=stderr_fd, env=env, threads=threads, close_fds=[],
                         parent_pid=os.getpid())
        _flush_all()
        # Its own session: the terminal's Ctrl-C reaches only the driver, from the job's first instruction on.
        proc = subprocess.Popen([sys.executable, "-m", "sweepit.local._fresh"], stdin=subprocess.PIPE, pass_fds=fds,
                                env={**os.environ, **env}, start_new_session=True)
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it died at its start: its exit status says how
            proc.stdin.write(pickle.dumps((spec, reply_fd, sys.path, payload)))
        proc.stdin.close()
        return proc, _facts(job)

    def fork(self, job: Job, env: dict[str, str], threads: int, fds: list[int]) -> tuple[int, dict[str, str]] | None:
        """Fork `job` with its descriptors `fds` (stdout, stderr, reply, sentinel): its pid and its config's facts,
        or None when the server died first."""
        assert self.sock is not None
        order = Order(job.num, list(job.overrides), str(job.job_dir), dict(job.job_env), env, threads)
        try:
            socket.send_fds(self.sock, [pickle.dumps(order)], fds)
        except OSError:
            self.close()
            return None
        while self.sock is not None:
            for event in self.events(block=True):
                if event.num == job.num and event.exit_code is None:
                    return event.pid, event.facts
        return None

    def events(self, block: bool = False) -> list[Event]:
        """What the server said since the last call (exits are also kept in `exits`); at its death, `alive` is
        false after this."""
        out: list[Event] = []
        heard = False
        while self.sock is not None:
            try:
                data = self.sock.recv(_MAX_MESSAGE, 0 if block and not heard else socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                self.close()
                break
            event: Event = pickle.loads(data)
            heard = True
            if event.num == READY:
                self.cuda = event.cuda
                continue
            if event.exit_code is not None:
                self.exits[event.num] = event.exit_code
            out.append(event)
        return out

    def close(self) -> None:
        """End the server (it exits at the end of its socket; its jobs, if any are left, die with it), or let go of
        one that died."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.pid is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = None


def _serve(sock: socket.socket, server: ForkServer, driver: int) -> None:
    """The server's loop: fork each order's job, report each job's end, until the driver closes the socket."""
    die_with(driver, signal.SIGKILL)
    signal.set_wakeup_fd(-1)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # the terminal's Ctrl-C goes to the driver, which stops the jobs in order
    server.setup()
    # What the server holds moves out of the collector's reach, so that no job's garbage collection writes to (and
    # so copies) the pages it shares with the server. Only the young generations are collected first: a full
    # collection over torch's many objects is slow.
    gc.collect(1)
    gc.freeze()
    _say(sock, Event(READY, os.getpid(), cuda=forked_after_cuda()))
    running: dict[int, tuple[int, BaseProcess]] = {}  # sentinel -> (job number, process)
    while True:
        ready = wait([sock, *running], timeout=None)
        for fd in ready:
            if fd is sock:
                try:
                    data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, _N_FDS)
                except OSError:
                    data, fds = b"", []
                if not data:
                    return  # the driver is done (or gone): jobs still running die with this process
                order: Order = pickle.loads(data)
                proc, facts = _fork(order, fds, server, [sock.fileno(), *running])
                running[proc.sentinel] = (order.num, proc)
                _say(sock, Event(order.num, proc.pid or 0, facts=facts))
            else:
                assert isinstance(fd, int)
                num, proc = running.pop(fd)
                proc.join()
                code = proc.exitcode
                pid = proc.pid or 0
                proc.close()
                _say(sock, Event(num, pid, code if code is not None else -signal.SIGKILL))


def _fork(order: Order, fds: list[int], server: ForkServer, close_fds: list[int]
          ) -> tuple[BaseProcess, dict[str, str]]:
    """Fork one job: its config composed here first (a failure to is the job's, raised in it); its process, and the
    facts its record needs should it die without one."""
    job = Job(num=order.num, overrides=order.overrides, job_dir=Path(order.job_dir), job_env=order.job_env)
    body = server.body
    try:
        if server.compose is not None:
            server.compose(job)
        run: Callable[[], JobOutcome] = lambda: body(job)  # noqa: E731
    except Exception as e:  # Hydra's validation composed a sample of the jobs: this one fails, alone
        error = ConfigError(f"job {order.num}'s config does not compose: {with_causes(e)}")
        error.__cause__ = e
        run = _raiser(error)
    facts = _facts(job)
    stdout_fd, stderr_fd, reply_fd, sentinel_fd = fds
    spec = ChildSpec(stdout_fd=stdout_fd, stderr_fd=stderr_fd, env=order.env, threads=order.threads,
                     close_fds=close_fds, parent_pid=os.getpid())
    conn = Connection(reply_fd, readable=False)
    proc = _FORK.Process(target=child_main, args=(spec, conn, run), name=f"sweepit-job-{order.num}")
    _flush_all()
    proc.start()  # the stop signals are held in this process: a job gets one once its handler is in place
    assert proc.pid is not None
    with contextlib.suppress(OSError):
        os.setpgid(proc.pid, proc.pid)  # also done by the job; whichever runs first wins the race
    job.config = None  # the job's own now
    conn.close()
    for fd in (stdout_fd, stderr_fd, sentinel_fd):
        os.close(fd)
    return proc, facts


def _facts(job: Job) -> dict[str, str]:
    """What the record of a job that dies without one needs of its config."""
    return {key: str(value) for key in RECORDED_KEYS
            if (value := OmegaConf.select(job.config, key, default=None)) is not None} if job.config else {}


@dataclass
class _Raises:
    """A spawned job's body whose config did not compose: picklable, as a closure is not."""

    error: Exception

    def __call__(self) -> JobOutcome:
        raise self.error


def _raiser(error: Exception) -> Callable[[], JobOutcome]:
    def run() -> JobOutcome:
        raise error
    return run


def _say(sock: socket.socket, event: Event) -> None:
    with contextlib.suppress(OSError):  # the driver is gone: this process follows at the next read
        sock.send(pickle.dumps(event))


def _flush_all() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(OSError, ValueError):  # a handler whose stream was closed under it
            handler.flush()
