"""What Slurm says: is it reachable, its limits (MaxArraySize, GPUs per node), and the state of given jobs.

Only Slurm's client commands (scontrol, sinfo, squeue, sacct) are used, each once per question, so a
sweep of any size costs one squeue (and at most one sacct) call per look. Job ids are strings as Slurm
and submitit print them: `123` for a plain job, `123_4` for task 4 of job array 123.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sweepit.errors import SweepitError

# squeue states of a job that is still to run, running, or coming back (requeue, suspension).
ACTIVE_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED",
    "STOPPED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD",
})
# States after which a job never runs again (PREEMPTED is one only when Slurm does not requeue the job,
# and then squeue shows it as such).
FINAL_STATES = frozenset({
    "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
    "DEADLINE", "REVOKED", "SPECIAL_EXIT",
})
DEFAULT_MAX_ARRAY_SIZE = 1001  # Slurm's own default
_TIMEOUT_S = 30
_GPUS = re.compile(r"gpu(?::[^:,(]+)?:(\d+)")


class SlurmError(SweepitError):
    """Slurm cannot be reached, or one of its commands refused a request."""


@dataclass(frozen=True)
class QueueRow:
    """One job (or array task) as squeue or sacct reports it."""

    job_id: str                      # `123` or `123_4`
    state: str                       # first word of the state: PENDING, RUNNING, CANCELLED, ...
    name: str                        # the job name (tells a reused id after a cluster restart apart)
    reason: str = ""                 # squeue: why it pends; sacct: the exit code
    node: str = ""


@dataclass(frozen=True)
class Partition:
    name: str
    gpus_per_node: int               # the most GPUs any node of the partition has
    n_nodes: int
    max_nodes_per_job: int | None    # the partition's MaxNodes; None: unlimited
    cpus_per_node: int


def _run(args: Sequence[str], timeout_s: float = _TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise SlurmError(f"Slurm's `{args[0]}` must be on PATH, but it is not: run this on a login node of the "
                         "cluster (or `module load slurm`; `make slurm-up` starts the local one).") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{' '.join(args)}` must answer within {timeout_s:.0f} s, but did not: the Slurm "
                         "controller is overloaded or unreachable; try again, or check `scontrol ping`.") from None


def check_reachable() -> None:
    """Raise SlurmError unless sbatch is on PATH and `scontrol ping` finds a controller that is up."""
    if shutil.which("sbatch") is None:
        raise SlurmError("hydra/launcher=slurm needs Slurm's `sbatch` on PATH, but it is not there: run the sweep "
                         "on a login node of the cluster (or `module load slurm`; `make slurm-up` starts the local "
                         "cluster), or use hydra/launcher=local.")
    ping = _run(["scontrol", "ping"])
    if ping.returncode != 0 or " is UP" not in ping.stdout:
        said = next((line for line in (ping.stdout + ping.stderr).splitlines() if line.strip()),
                    f"exit status {ping.returncode}")
        raise SlurmError(f"the Slurm controller must be up to submit jobs, but `scontrol ping` says: {said}. "
                         "Start it (`make slurm-up` for the local cluster) or ask the cluster's admins.")


def max_array_size() -> int:
    """The cluster's MaxArraySize: an array's task indices must stay below it."""
    out = _run(["scontrol", "show", "config"])
    m = re.search(r"^MaxArraySize\s*=\s*(\d+)", out.stdout, re.MULTILINE)
    return int(m.group(1)) if out.returncode == 0 and m else DEFAULT_MAX_ARRAY_SIZE


def partition(name: str | None) -> Partition:
    """The partition `name` (None: the default one) with its nodes' GPUs, from sinfo and scontrol."""
    out = _run(["sinfo", "-h", "-o", "%P|%G|%D|%c"])
    if out.returncode != 0:
        raise SlurmError(f"`sinfo` must list the partitions, but failed: {out.stderr.strip()}")
    rows = [line.split("|") for line in out.stdout.splitlines() if line.count("|") == 3]
    names = sorted({r[0].rstrip("*") for r in rows})
    if name is None:
        default = [r[0] for r in rows if r[0].endswith("*")]
        if not default:
            raise SlurmError("hydra.launcher.partition must be set on this cluster, which has no default partition; "
                             f"partitions: {', '.join(names)}.")
        name = default[0].rstrip("*")
    mine = [r for r in rows if r[0].rstrip("*") == name]
    if not mine:
        raise SlurmError(f"hydra.launcher.partition must name a partition of this cluster ({', '.join(names)}), "
                         f"but got {name!r}. Set for example hydra.launcher.partition={names[0] if names else 'gpu'}.")
    gpus = [int(m.group(1)) if (m := _GPUS.search(r[1])) else 0 for r in mine]
    info = _run(["scontrol", "show", "partition", name, "-o"]).stdout
    limit = re.search(r"\bMaxNodes=(\S+)", info)
    max_nodes = int(limit.group(1)) if limit and limit.group(1).isdigit() else None
    return Partition(name=name, gpus_per_node=max(gpus), n_nodes=sum(int(r[2]) for r in mine),
                     max_nodes_per_job=max_nodes, cpus_per_node=max(int(r[3].rstrip("+")) for r in mine))


def scancel(job_ids: Iterable[str]) -> None:
    """Cancel the given jobs (or array tasks); raise SlurmError when scancel refuses."""
    ids = sorted(set(job_ids))
    if not ids:
        return
    out = _run(["scancel", *ids])
    if out.returncode != 0 and "Invalid job id" not in out.stderr:  # an id that already left the queue is fine
        raise SlurmError(f"`scancel {' '.join(ids)}` must cancel the jobs, but failed: {out.stderr.strip()}")


def _base_ids(job_ids: Iterable[str]) -> list[str]:
    return sorted({j.split("_", 1)[0] for j in job_ids}, key=int)


def squeue(job_ids: Iterable[str]) -> dict[str, QueueRow] | None:
    """State of every task of the given jobs that squeue still lists (finished ones for MinJobAge seconds,
    about 5 minutes); None when squeue itself failed (controller unreachable for a moment)."""
    ids = _base_ids(job_ids)
    if not ids:
        return {}
    out = _run(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T|%j|%r|%N"])
    if out.returncode != 0:
        # Every id unknown (all purged, or a restarted cluster) is an error to squeue, not an empty answer.
        return {} if "Invalid job id" in out.stderr else None
    rows: dict[str, QueueRow] = {}
    for line in out.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 5:
            rows[parts[0]] = QueueRow(parts[0], parts[1].split()[0] if parts[1] else "", parts[2], parts[3], parts[4])
    return rows


def sacct(job_ids: Iterable[str]) -> dict[str, QueueRow] | None:
    """Accounting's state of each job's latest run (after a requeue, the new one); None when sacct failed
    (no accounting on this cluster)."""
    ids = _base_ids(job_ids)
    if not ids:
        return {}
    out = _run(["sacct", "-n", "-X", "-P", "-j", ",".join(ids), "-o", "JobID,State,JobName,ExitCode,NodeList"])
    if out.returncode != 0:
        return None
    rows: dict[str, QueueRow] = {}
    for line in out.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 5 and "[" not in parts[0]:  # `123_[4-9]`: tasks not started yet, not a final word
            rows[parts[0]] = QueueRow(parts[0], parts[1].split()[0] if parts[1] else "", parts[2], parts[3], parts[4])
    return rows
