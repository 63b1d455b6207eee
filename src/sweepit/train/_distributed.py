"""Data parallelism: the job's process group (NCCL on CUDA, gloo on CPU), and `spawn_local`, which forks a job's
ranks beside the calling process when neither torchrun nor Slurm started them."""

from __future__ import annotations

import atexit
import contextlib
import datetime
import functools
import gc
import inspect
import multiprocessing as mp
import multiprocessing.connection
import os
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch.torch_version import TorchVersion

from sweepit.errors import RankFailedError, SweepitError
from sweepit.train._devices import use_device
from sweepit.train._rank import Rank

T = TypeVar("T")
# A collective that waits longer than this (trainer.collective_timeout_min) fails instead of hanging a job whose peer
# died (under Slurm or torchrun; with local ranks the supervising process stops the others as soon as one fails). Not
# below torch's own 10 minutes: rank 0 alone writes trackers and the best weights between collectives, which a slow
# shared file system or tracker server can stretch past a shorter limit, and NCCL's watchdog would abort the job.
COLLECTIVE_TIMEOUT_MIN = 10.0
GLOO_SETTLE_S = 0.1  # see destroy_process_group
GLOO_LEAVE_S = 30.0  # see _leave_together
# torch before 2.7.1 may turn NCCL's non-blocking mode on for a group bound to a device, and NCCL 2.26 can hang a
# collective in that mode (pytorch/pytorch#153960); 2.7.1 stopped turning it on.
NONBLOCKING_HANG_NCCL = (2, 26)
NONBLOCKING_FIXED_TORCH = "2.7.1"  # compared as a version by TorchVersion


def init_process_group(rank: Rank, device: torch.device, backend: str | None = None,
                       timeout_min: float = COLLECTIVE_TIMEOUT_MIN) -> None:
    """The job's process group, once, on this rank's device (made the current one first, and bound to the group where
    that is safe: NCCL then never reaches for GPU 0), its collectives failing after `timeout_min` minutes. It is
    destroyed at exit if the code that asked for it does not do so."""
    if rank.world_size == 1 or dist.is_initialized():
        return
    use_device(device)
    backend = backend or ("nccl" if device.type == "cuda" else "gloo")
    nccl_on_gpu = backend == "nccl" and device.type == "cuda"
    bound: dict[str, Any] = {}
    if nccl_on_gpu and binds_safely(dist.init_process_group, torch.__version__, torch.cuda.nccl.version()):
        bound["device_id"] = device
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{rank.master_addr}:{rank.master_port}",
        rank=rank.rank, world_size=rank.world_size,
        timeout=datetime.timedelta(minutes=timeout_min),
        **bound,
    )
    atexit.unregister(destroy_process_group)  # once, in a process that makes a group per job (worker mode)
    atexit.register(destroy_process_group)


def binds_safely(init: Callable[..., object], torch_version: str, nccl_version: tuple[int, ...]) -> bool:
    """Whether `init` (torch's init_process_group) may be given `device_id`: torch 2.2's has no such argument (a
    TypeError), and with NCCL 2.26 on a torch older than 2.7.1 it can hang the job's collectives. Without it NCCL
    starts its communicator at the first collective, on the device made current before."""
    old_torch = TorchVersion(torch_version) < NONBLOCKING_FIXED_TORCH
    return _takes_device_id(init) and not (old_torch and tuple(nccl_version[:2]) == NONBLOCKING_HANG_NCCL)


@functools.cache
def _takes_device_id(init: Callable[..., object]) -> bool:
    return "device_id" in inspect.signature(init).parameters


def destroy_process_group() -> None:
    """Destroy the process group after a garbage collection and a pause: a gloo worker thread may still be releasing
    the last collective's tensors, and a process that exits first aborts in C++ (SIGABRT), so that a completed job's
    rank shows up in Slurm as FAILED."""
    if dist.is_initialized():
        gc.collect()
        time.sleep(GLOO_SETTLE_S)  # the GIL is free meanwhile
        dist.destroy_process_group()


def abandon_process_group() -> None:
    """Leave this process's group as it is when the job failed: no destroy now nor at exit (it could block on a peer
    that is gone), the process ends and its sockets with it."""
    atexit.unregister(destroy_process_group)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_local(world_size: int, target: Callable[[Rank], T]) -> T:
    """Run `target(rank)` in `world_size` forked processes on this machine and return rank 0's value.

    This process only supervises: when any rank fails the others are killed at once, instead of waiting in a
    collective for a peer that never comes. The first rank to fail is the cause: rank 0's own exception (such as
    DivergedError) is raised again here, another rank's as a RankFailedError that names it. The ranks share this
    process's torch CPU threads (a job's own trainer.threads still wins)."""
    threads = max(1, torch.get_num_threads() // world_size)
    port = _free_port()
    ctx = mp.get_context("fork")
    procs: list[mp.process.BaseProcess] = []
    readers: list[multiprocessing.connection.Connection] = []
    try:
        for r in range(world_size):
            # A pipe per rank, its writing end closed here before the next fork: only rank r holds it, so that the
            # pipe's end of file tells that rank r has exited.
            reader, writer = ctx.Pipe(duplex=False)
            readers.append(reader)
            procs.append(ctx.Process(target=_rank_main, args=(target, Rank(r, r, world_size, "127.0.0.1", port), writer,
                                                              threads), name=f"sweepit-rank-{r}"))
            procs[-1].start()
            writer.close()
        return _supervise(procs, readers)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
        for reader in readers:
            reader.close()


def _supervise(procs: list[mp.process.BaseProcess], readers: list[multiprocessing.connection.Connection]) -> Any:
    """Rank 0's value, or the exception of the rank that failed first: each rank sends one message, then exits."""
    world, waiting, value = len(procs), {reader: r for r, reader in enumerate(readers)}, []
    while waiting:
        failures, silent = [], []
        ready = multiprocessing.connection.wait(list(waiting))
        for conn in [c for c in readers if c in ready]:
            rank = waiting.pop(conn)
            try:
                kind, sent_at, payload = conn.recv()
            except EOFError:
                silent.append(rank)
                continue
            if kind == "error":
                failures.append((sent_at, rank, payload))
            elif rank == 0:
                value.append(payload)
        if failures:  # the earliest sent of those that came together
            _, rank, error = min(failures, key=lambda f: (f[0], f[1]))
            if isinstance(error, BaseException) and (rank == 0 or isinstance(error, KeyboardInterrupt)):
                raise error  # rank 0's own, or a stop (Ctrl-C, preemption), which is no rank's failure
            what = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
            raise RankFailedError(f"rank {rank} of {world} failed: {what} (its traceback is in the job's stderr.log)")
        for rank in silent:
            procs[rank].join()
            if procs[rank].exitcode != 0:
                raise RankFailedError(f"rank {rank} of {world} exited with code {procs[rank].exitcode} (killed, or it "
                                      "called os._exit) without a Python error; its output is in the job's stderr.log")
    if not value:
        raise RankFailedError("rank 0 ended without a result")
    return value[0]


def _rank_main(target: Callable[[Rank], object], rank: Rank, writer: multiprocessing.connection.Connection,
               threads: int) -> None:
    torch.set_num_threads(threads)
    try:
        value = target(rank)
    except BaseException as e:
        if not isinstance(e, KeyboardInterrupt | SweepitError):
            import traceback

            traceback.print_exc()
        try:
            writer.send(("error", time.time(), e))
        except Exception:  # an exception that does not pickle: its traceback above still tells
            writer.send(("error", time.time(), f"{type(e).__name__}: {e}"))
        os._exit(1)
    writer.send(("ok", time.time(), value if rank.is_main else None))
    _leave_together()
    os._exit(0)


def _leave_together() -> None:
    """Wait, at most GLOO_LEAVE_S, for every rank of a gloo group to end its code before this one exits: a rank that
    left its last collective first and exited reset its sockets while a slower one still read them, and that rank
    failed a completed job ("Connection reset by peer"). Its value is sent already: a peer gone here changes nothing."""
    if dist.is_initialized() and dist.get_backend() == "gloo":
        with contextlib.suppress(Exception):
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=GLOO_LEAVE_S))
