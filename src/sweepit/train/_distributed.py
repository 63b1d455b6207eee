"""Data parallelism: who this process is (rank, world), the process group, and local rank spawning.

A job with `trainer.gpus=N` runs N processes, one per device. Their environment comes from torchrun
(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), from Slurm (one task per GPU: SLURM_PROCID,
SLURM_LOCALID, SLURM_NTASKS, the first node of the job as master), or from `spawn_local`, which forks
N-1 ranks beside the calling process when neither is there. NCCL on CUDA, gloo on CPU.
"""

from __future__ import annotations

import atexit
import datetime
import gc
import multiprocessing as mp
import multiprocessing.connection
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from sweepit.errors import SweepitError

T = TypeVar("T")
# A collective that waits longer than this fails instead of hanging a job whose peer died (under Slurm or
# torchrun; with local ranks the supervising process stops the others as soon as one fails).
COLLECTIVE_TIMEOUT_S = 300
GLOO_SETTLE_S = 0.1  # see destroy_process_group


class RankFailedError(SweepitError):
    """Another rank of the same job ended with an error."""


@dataclass(frozen=True)
class Rank:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 29500

    @property
    def is_main(self) -> bool:
        return self.rank == 0


SINGLE = Rank()


def _first_host(nodelist: str) -> str:
    """First host of a Slurm node list such as `gpu[003-004,010],cpu1` -> `gpu003`."""
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist)
    if m is None:
        return nodelist
    prefix, ranges = m.group(1), m.group(2)
    return prefix + ranges.split(",")[0].split("-")[0] if ranges else prefix


def from_environment(env: dict[str, str] | None = None) -> Rank | None:
    """The rank described by torchrun's or Slurm's variables, or None in a single-process job."""
    env = dict(os.environ) if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env and int(env["WORLD_SIZE"]) > 1:
        return Rank(int(env["RANK"]), int(env.get("LOCAL_RANK", env["RANK"])), int(env["WORLD_SIZE"]),
                    env.get("MASTER_ADDR", "127.0.0.1"), int(env.get("MASTER_PORT", "29500")))
    if "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_STEP_ID" in env:
        job_id = int(env.get("SLURM_ARRAY_JOB_ID", env.get("SLURM_JOB_ID", "0")) or 0)
        task_id = int(env.get("SLURM_ARRAY_TASK_ID", "0") or 0)
        return Rank(int(env["SLURM_PROCID"]), int(env.get("SLURM_LOCALID", "0")), int(env["SLURM_NTASKS"]),
                    _first_host(env.get("SLURM_JOB_NODELIST", "127.0.0.1")),
                    20000 + (job_id * 31 + task_id) % 20000)  # same port in every task of the job
    return None


def device_for(rank: Rank, requested: str) -> torch.device:
    """Each rank on its own GPU (the job's visible GPUs, by local rank); CPU ranks share the CPU."""
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if requested in ("auto", "cuda"):
        return torch.device("cuda", rank.local_rank % max(1, torch.cuda.device_count()))
    return torch.device(requested)


def init_process_group(rank: Rank, device: torch.device, backend: str | None = None) -> None:
    """The job's process group, once. It is destroyed at exit if the code that asked for it does not do so."""
    if rank.world_size == 1 or dist.is_initialized():
        return
    dist.init_process_group(
        backend=backend or ("nccl" if device.type == "cuda" else "gloo"),
        init_method=f"tcp://{rank.master_addr}:{rank.master_port}",
        rank=rank.rank, world_size=rank.world_size,
        timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )
    atexit.unregister(destroy_process_group)  # once, in a process that makes a group per job (worker mode)
    atexit.register(destroy_process_group)


def destroy_process_group() -> None:
    """Destroy the process group, after a pause for gloo's worker threads.

    A gloo worker thread may still be releasing the tensors of the last collective after the collective has
    returned, and that takes the GIL. When the process exits first, Python ends the thread during its
    finalization and C++ aborts the process ("terminate called without an active exception", SIGABRT), so a
    completed job's rank shows up in Slurm as FAILED. On torch 2.13 (CPU, this project's CI machine) 21 of 60
    two-rank runs of a DDP model aborted so; through this function, none of 120 did (60 calling it, 60 leaving
    it to the exit hook). A collection alone, or a 50 ms pause alone, also avoided it in 60 runs each.
    """
    if dist.is_initialized():
        gc.collect()
        time.sleep(GLOO_SETTLE_S)  # the GIL is free meanwhile
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_local(world_size: int, target: Callable[[Rank], T]) -> T:
    """Run `target(rank)` in `world_size` forked processes on this machine and return rank 0's value.

    This process only supervises: it waits on every rank's exit and on rank 0's result, so when any rank
    fails the others are killed at once, instead of waiting in a collective for a peer that never comes.
    An exception raised by rank 0 (such as DivergedError) is raised again here. The ranks share this
    process's torch CPU threads (a job's own trainer.threads still wins), so N ranks do not run N times
    the threads the job was given.
    """
    threads = max(1, torch.get_num_threads() // world_size)
    port = _free_port()
    ctx = mp.get_context("fork")
    reader, writer = ctx.Pipe(duplex=False)
    procs: list[mp.process.BaseProcess] = [
        ctx.Process(target=_rank_main, args=(target, Rank(r, r, world_size, "127.0.0.1", port),
                                             writer if r == 0 else None, threads), name=f"sweepit-rank-{r}")
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    writer.close()
    try:
        return _supervise(procs, reader)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
        reader.close()


def _supervise(procs: list[mp.process.BaseProcess], reader: multiprocessing.connection.Connection) -> Any:
    pending: dict[Any, mp.process.BaseProcess] = {p.sentinel: p for p in procs}
    message: tuple[str, Any] | None = None
    while pending:
        waiting: list[Any] = list(pending) + ([reader] if message is None else [])
        for ready in multiprocessing.connection.wait(waiting):
            if ready is reader:
                try:
                    message = reader.recv()
                except EOFError:
                    message = ("none", None)
                if message[0] == "error":
                    raise _exception(message[1])
                continue
            p = pending.pop(ready)
            p.join()  # the sentinel closes at exit, a moment before the exit code can be read
            if p.exitcode != 0:
                if p.name.endswith("-0") and message is None and reader.poll(1.0):
                    kind, value = reader.recv()
                    if kind == "error":
                        raise _exception(value)
                raise RankFailedError(
                    f"{p.name.removeprefix('sweepit-')} of {len(procs)} exited with code {p.exitcode}; "
                    "its traceback is in the job's stderr.log"
                )
    if message is None or message[0] != "ok":
        raise RankFailedError("rank 0 ended without a result")
    return message[1]


def _exception(value: object) -> BaseException:
    return value if isinstance(value, BaseException) else RankFailedError(f"rank 0 failed: {value!r}")


def _rank_main(target: Callable[[Rank], object], rank: Rank,
               writer: multiprocessing.connection.Connection | None, threads: int = 1) -> None:
    torch.set_num_threads(threads)
    try:
        value = target(rank)
    except BaseException as e:
        if not isinstance(e, KeyboardInterrupt | SweepitError):
            import traceback

            traceback.print_exc()
        if writer is not None:
            try:
                writer.send(("error", e))
            except Exception:  # an exception that does not pickle: its traceback below still tells
                writer.send(("error", RankFailedError(f"rank 0 raised {type(e).__name__}: {e}")))
        os._exit(1)
    if writer is not None:
        writer.send(("ok", value))
    os._exit(0)
