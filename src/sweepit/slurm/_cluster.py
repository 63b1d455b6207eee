"""What Slurm says, through its client commands, each once per question (a sweep of any size costs one squeue, and
at most one sacct, call per look): is it reachable, its limits, and the state of given jobs. Job ids are strings as
Slurm and submitit print them: `123` for a plain job, `123_4` for task 4 of job array 123.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sweepit.errors import ConfigError, SlurmError, closest

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
_TRES_GPUS = re.compile(r"gres/gpu=(\d+)")  # a TRES list's GPUs (sacct AllocTRES, sshare GrpTRESMins)


@dataclass(frozen=True)
class QueueRow:
    """One job (or array task) as squeue or sacct reports it."""

    job_id: str                      # `123` or `123_4`
    state: str                       # first word of the state: PENDING, RUNNING, CANCELLED, ...
    name: str                        # the job name (tells a reused id after a cluster restart apart)
    reason: str = ""                 # squeue: why it pends; sacct: the exit code
    node: str = ""

    @property
    def in_queue(self) -> bool:
        """Queued, running, or ending (COMPLETING: its processes are still dying)."""
        return self.state in ACTIVE_STATES or self.state == "COMPLETING"


@dataclass(frozen=True)
class Partition:
    name: str
    gpus_per_node: int               # the most GPUs any node of the partition has
    job_nodes: int                   # the most nodes one job may get: the partition's, or its MaxNodes
    max_time_min: int | None = None  # the partition's MaxTime in minutes; None: unlimited
    chosen_by: str = "the cluster's default partition"  # where the name came from, for messages
    gpu_partitions: tuple[str, ...] = ()  # the cluster's partitions whose nodes have GPUs, most GPUs first

    def fix_for_gpus(self) -> str:
        """What to set when this partition has too few GPUs."""
        others = [p for p in self.gpu_partitions if p != self.name]
        if others:
            return f"Set hydra.launcher.partition={others[0]} (partitions with GPUs: {', '.join(others)})"
        return "Pick a partition with GPUs with hydra.launcher.partition (`sinfo -o '%P %G'` lists them)"


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


def controller_up() -> bool:
    """`scontrol ping` (it answers at once; squeue retries for about 18 s while the controller is down)."""
    try:
        ping = _run(["scontrol", "ping"], timeout_s=10)
    except SlurmError:
        return False
    return ping.returncode == 0 and " is UP" in ping.stdout


def max_array_size() -> int:
    """The cluster's MaxArraySize: an array's task indices must stay below it."""
    out = _run(["scontrol", "show", "config"])
    m = re.search(r"^MaxArraySize\s*=\s*(\d+)", out.stdout, re.MULTILINE)
    return int(m.group(1)) if out.returncode == 0 and m else DEFAULT_MAX_ARRAY_SIZE


def partition(name: str | None, want_gpus: bool = False) -> Partition:
    """The partition `name` (None: $SBATCH_PARTITION as sbatch takes it, else the default one) with its nodes'
    GPUs and limits, from sinfo and scontrol. A name the cluster does not have is a ConfigError that suggests
    the closest one (one with GPUs when `want_gpus`)."""
    out = _run(["sinfo", "-h", "-o", "%P|%G|%D|%c"])
    if out.returncode != 0:
        raise SlurmError(f"`sinfo` must list the partitions, but failed: {out.stderr.strip()}")
    rows = [line.split("|") for line in out.stdout.splitlines() if line.count("|") == 3]
    names = sorted({r[0].rstrip("*") for r in rows})
    gpus_of = {n: max(_gpus(r[1]) for r in rows if r[0].rstrip("*") == n) for n in names}
    with_gpus = tuple(sorted((n for n in names if gpus_of[n]), key=lambda n: -gpus_of[n]))
    key, chosen_by = "hydra.launcher.partition", "hydra.launcher.partition"
    if name is None and os.environ.get("SBATCH_PARTITION"):
        # sbatch takes the first partition of the list that can run the job; its checks go by the first.
        name = os.environ["SBATCH_PARTITION"].split(",")[0].strip()
        key = chosen_by = "SBATCH_PARTITION (in the environment)"
    if name is None:
        default = [r[0] for r in rows if r[0].endswith("*")]
        if not default:
            raise ConfigError("hydra.launcher.partition must be set on this cluster, which has no default partition, "
                              f"but it is null. Set for example hydra.launcher.partition="
                              f"{(with_gpus if want_gpus and with_gpus else names or ['gpu'])[0]} (partitions: "
                              f"{', '.join(names)}).")
        name = default[0].rstrip("*")
        chosen_by = "the cluster's default partition"
    if name not in names:
        raise ConfigError(f"{key} must name a partition of this cluster ({', '.join(names)}), but got {name!r}. "
                          f"{_suggest(name, names, with_gpus if want_gpus else ())}")
    n_nodes = sum(int(r[2]) for r in rows if r[0].rstrip("*") == name)
    info = _run(["scontrol", "show", "partition", name, "-o"]).stdout
    limit = re.search(r"\bMaxNodes=(\d+)", info)
    max_time = re.search(r"\bMaxTime=(\S+)", info)
    return Partition(name=name, gpus_per_node=gpus_of[name],
                     job_nodes=min(n_nodes, int(limit.group(1)) or n_nodes) if limit else n_nodes,
                     max_time_min=minutes(max_time.group(1)) if max_time else None, chosen_by=chosen_by,
                     gpu_partitions=with_gpus)


def _gpus(gres: str) -> int:
    m = _GPUS.search(gres)
    return int(m.group(1)) if m else 0


def _suggest(name: str, names: list[str], preferred: Sequence[str]) -> str:
    """`Set hydra.launcher.partition=<closest>`: among `preferred` (partitions with GPUs) when there are any."""
    pool = list(preferred) or names
    close = closest(name, pool, cutoff=0.0) or next(iter(pool), None)
    why = " (the closest name with GPUs)" if preferred else " (the closest name)"
    return f"Set hydra.launcher.partition={close}{why}; `sinfo -s` lists them." if close else ""


def minutes(slurm_time: str) -> int | None:
    """Minutes in a Slurm time limit (`UNLIMITED`, `30`, `04:00:00`, `1-12:00:00`); None when unlimited."""
    if slurm_time in ("UNLIMITED", "INFINITE", "NONE", "Partition_Limit"):
        return None
    days, _, clock = slurm_time.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if len(parts) == 1:
        h, m, sec = 0, parts[0], 0  # a bare number is minutes
    else:
        h, m, sec = ([0] * (3 - len(parts)) + parts)[-3:]
    return (int(days or 0) * 24 + h) * 60 + m + (1 if sec else 0)


def scancel(job_ids: Iterable[str]) -> None:
    """Cancel the given jobs (or array tasks); raise SlurmError when scancel refuses."""
    ids = sorted(set(job_ids))
    if not ids:
        return
    out = _run(["scancel", *ids])
    if out.returncode != 0 and "Invalid job id" not in out.stderr:  # an id that already left the queue is fine
        raise SlurmError(f"`scancel {' '.join(ids)}` must cancel the jobs, but failed: {out.stderr.strip()}")


def array_id(job_id: str) -> str:
    """`123` of `123_4`, the array task 4 of job array 123 (and of a plain job `123`)."""
    return job_id.split("_", 1)[0]


def base_ids(job_ids: Iterable[str]) -> list[str]:
    """The ids to give scancel, squeue or sacct: an array's id stands for all its tasks."""
    return sorted({array_id(j) for j in job_ids}, key=int)


def squeue(job_ids: Iterable[str]) -> dict[str, QueueRow] | None:
    """State of every task of the given jobs that squeue still lists (finished ones for MinJobAge seconds,
    about 5 minutes); None when squeue itself failed (controller unreachable for a moment)."""
    return _rows(["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|%j|%r|%N"], job_ids)


def sacct(job_ids: Iterable[str]) -> dict[str, QueueRow] | None:
    """Accounting's state of each job's latest run (after a requeue, the new one); None when sacct failed
    (no accounting on this cluster)."""
    return _rows(["sacct", "-n", "-X", "-P", "-o", "JobID,State,JobName,ExitCode,NodeList"], job_ids)


def _rows(command: list[str], job_ids: Iterable[str]) -> dict[str, QueueRow] | None:
    fields = _fields(command, job_ids, 5)
    return None if fields is None else {
        p[0]: QueueRow(p[0], p[1].split()[0] if p[1] else "", p[2], p[3], p[4]) for p in fields}


def _fields(command: list[str], job_ids: Iterable[str], n: int) -> list[list[str]] | None:
    """The `|`-separated fields of each line of `n` fields that `command -j <ids>` prints; None when it failed."""
    ids = base_ids(job_ids)
    if not ids:
        return []
    out = _run([*command, "-j", ",".join(ids)])
    if out.returncode != 0:
        # Every id unknown (all purged, or a restarted cluster) is an error to squeue, not an empty answer.
        return [] if command[0] == "squeue" and "Invalid job id" in out.stderr else None
    lines = (line.split("|") for line in out.stdout.splitlines())
    # sacct's `123_[4-9]`: tasks not started yet, not a final word
    return [parts for parts in lines if len(parts) == n and "[" not in parts[0]]


def billed(job_ids: Iterable[str]) -> dict[str, tuple[int, int, str]] | None:
    """Each job's GPUs, seconds and state as accounting bills them (sacct's AllocTRES gres/gpu and ElapsedRaw of its
    latest run); None when sacct failed (no accounting on this cluster)."""
    fields = _fields(["sacct", "-n", "-X", "-P", "-o", "JobID,AllocTRES,ElapsedRaw,State"], job_ids, 4)
    if fields is None:
        return None
    rows: dict[str, tuple[int, int, str]] = {}
    for parts in fields:
        if parts[2].isdigit():
            gpus = _TRES_GPUS.search(parts[1])
            rows[parts[0]] = (int(gpus.group(1)) if gpus else 0, int(parts[2]), parts[3].split()[0] if parts[3] else "")
    return rows


def gpu_allocation(account: str | None) -> tuple[str, float, float] | None:
    """(account, GPU-minutes granted, GPU-minutes used) of `account` (None: the user's default account) where its
    association sets a limit on GPU time (sshare's GrpTRESMins and GrpTRESRaw for gres/gpu); None where it sets none
    or Slurm cannot be asked."""
    try:
        if account is None:
            said = _run(["sacctmgr", "-n", "-P", "show", "user", getpass.getuser(), "format=defaultaccount"],
                        timeout_s=10)
            found = said.stdout.split() if said.returncode == 0 else []
            account = found[0] if found else ""
        out = _run(["sshare", "-n", "-P", "-A", account, "-o", "Account,User,GrpTRESMins,GrpTRESRaw"], timeout_s=10)
    except SlurmError:
        return None
    for line in out.stdout.splitlines() if account and out.returncode == 0 else []:
        parts = [p.strip() for p in line.split("|")]
        limit = _TRES_GPUS.search(parts[2]) if len(parts) == 4 and parts[:2] == [account, ""] else None
        if limit:
            used = _TRES_GPUS.search(parts[3])
            return account, float(limit.group(1)), float(used.group(1)) if used else 0.0
    return None


def end_time(job_id: str) -> float | None:
    """When the job (array task) `123` or `123_4` reaches its time limit, in epoch seconds, as squeue says (%e, the
    controller's local time); None when squeue does not answer or the job has no limit."""
    import time

    try:
        out = _run(["squeue", "-h", "-j", job_id, "-o", "%e"], timeout_s=10)
    except SlurmError:
        return None
    said = out.stdout.strip().splitlines()
    if out.returncode != 0 or not said:
        return None
    try:
        return time.mktime(time.strptime(said[0].strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:  # NONE, Unknown, INFINITE
        return None
