"""Who this process is in its job (rank, local rank, world size, where the ranks meet) and the GPUs it was given,
from torchrun's, Slurm's and CUDA's variables. No torch here: a job records its rank also between Slurm's SIGTERM and
SIGKILL (KillWait), where importing torch on a loaded node could take longer than that."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

PORT_BASE, PORT_SPAN = 15000, 15000  # Slurm jobs' rendezvous ports: 15000-29999 (see master_port)


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
    """First host of a Slurm node list, as `scontrol show hostnames` names it where Slurm's commands are on PATH
    (`gpu[003-004,010],cpu1` -> `gpu003`), else as `first_in_nodelist` reads it."""
    if shutil.which("scontrol"):
        try:
            out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                                 timeout=5, check=True).stdout.split()
        except (OSError, subprocess.SubprocessError):
            out = []
        if out:
            return out[0]
    return first_in_nodelist(nodelist)


def first_in_nodelist(nodelist: str) -> str:
    """First host of a Slurm node list read here: its first comma-separated item (commas inside brackets do not
    separate), each bracket group replaced by its first value, zero padding kept (`rack[1-2]-gpu[08-09]a,cpu1` ->
    `rack1-gpu08a`)."""
    depth, end = 0, len(nodelist)
    for i, char in enumerate(nodelist):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            end = i
            break
    return re.sub(r"\[([^\]]*)\]", lambda m: m.group(1).split(",")[0].split("-")[0], nodelist[:end].strip())


def from_environment(env: dict[str, str] | None = None) -> Rank | None:
    """The rank described by torchrun's or Slurm's variables, or None in a single-process job."""
    env = dict(os.environ) if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env and int(env["WORLD_SIZE"]) > 1:
        return Rank(int(env["RANK"]), int(env.get("LOCAL_RANK", env["RANK"])), int(env["WORLD_SIZE"]),
                    env.get("MASTER_ADDR", "127.0.0.1"), int(env.get("MASTER_PORT", "29500")))
    if "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_STEP_ID" in env:
        job_id = int(env.get("SLURM_ARRAY_JOB_ID", env.get("SLURM_JOB_ID", "0")) or 0)
        task_id = int(env.get("SLURM_ARRAY_TASK_ID", "0") or 0)
        # A MASTER_ADDR the job's script exported wins (JSC's nodes talk over InfiniBand as `<host>i`).
        addr = env.get("MASTER_ADDR") or _first_host(env.get("SLURM_JOB_NODELIST", "127.0.0.1"))
        port = int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else master_port(job_id, task_id)
        return Rank(int(env["SLURM_PROCID"]), int(env.get("SLURM_LOCALID", "0")), int(env["SLURM_NTASKS"]), addr, port)
    return None


def master_port(job_id: int, task_id: int) -> int:
    """The rendezvous port of a Slurm job (array task): the same in every task of the job, spread over jobs, and
    below Linux's ephemeral ports (32768-60999 by default), which the kernel hands to outgoing connections, so
    that no other process on the node holds it by chance."""
    return PORT_BASE + (job_id * 31 + task_id) % PORT_SPAN


def gpus_given(environ: Mapping[str, str] = os.environ) -> int:
    """How many GPUs this job was given, for its record (`n_gpus`, what its GPU-hours count): under Slurm its
    allocation (none when Slurm gave it none, whatever the submitting shell exported), the GPUs of it that
    CUDA_VISIBLE_DEVICES leaves the job (a packed worker's share, a local launcher's), times its nodes; elsewhere
    CUDA_VISIBLE_DEVICES's, else the GPUs of this machine when the process used CUDA, else none."""
    slurm = bool(environ.get("SLURM_JOB_ID"))
    allocated = environ.get("SLURM_STEP_GPUS") or environ.get("SLURM_JOB_GPUS")
    per_node = environ.get("SLURM_GPUS_ON_NODE")
    if slurm and not (allocated or per_node):
        return 0
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        devices = [d.strip() for d in visible.split(",")]
        n = next((i for i, d in enumerate(devices) if not d or d.startswith("-") or d == "NoDevFiles"), len(devices))
    elif slurm:
        n = int(per_node) if per_node and per_node.isdigit() else len((allocated or "").split(","))
    else:
        torch = sys.modules.get("torch")  # never imported here: a job that did not import torch used no GPU
        return int(torch.cuda.device_count()) if torch is not None and torch.cuda.is_initialized() else 0
    nodes = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or "1"
    return n * (int(nodes) if slurm and nodes.isdigit() else 1)
