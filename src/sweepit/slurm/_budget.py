"""A Slurm sweep's GPU-hour budget (`hydra.launcher.budget_gpu_hours`) and its ceiling on GPUs in use at once
(`max_gpus`).

The jobs keep the budget themselves, not the driver: each job, as it starts, reserves its at-most (GPUs x time limit)
in the sweep's ledger under a file lock, against what the ledger's earlier jobs were billed (sacct: AllocTRES gres/gpu
x Elapsed) or may still take (the at-most of those running). A job that would pass the budget leaves a `not started`
note and exits, and so does every job after it until a resume raises the budget. This holds with no driver (a detached
sweep) and for jobs starting at the same moment; a driver that cancelled pending jobs could not promise it, since
Slurm may start one between the driver's look and its scancel.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweepit._files import atomic_write
from sweepit._host import now_iso
from sweepit.errors import ConfigError
from sweepit.results import JobPaths, SweepPaths
from sweepit.slurm import _cluster as cluster
from sweepit.slurm._request import Request, SlurmOptions

BUDGET_KEY = "hydra.launcher.budget_gpu_hours"
# How long the end of a followed sweep waits for accounting to bill its runs: a job's processes may take Slurm's
# KillWait (30 s by default) to end after its record, and its epilog runs after them.
END_SETTLE_S = 60.0
_SETTLE_POLL_S = 0.5


@contextlib.contextmanager
def _ledger(sweep_dir: Path) -> Iterator[dict[str, Any]]:
    """The sweep's ledger, read and written back under an exclusive lock (flock: jobs on several nodes of a shared
    file system, and the driver, take turns)."""
    paths = SweepPaths(sweep_dir)
    paths.budget.parent.mkdir(parents=True, exist_ok=True)
    with open(paths.budget_lock, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = read_ledger(sweep_dir)
            before = json.dumps(data, sort_keys=True)
            yield data
            if json.dumps(data, sort_keys=True) != before:
                atomic_write(paths.budget, json.dumps(data, indent=1) + "\n", fsync=False)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_ledger(sweep_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads(SweepPaths(sweep_dir).budget.read_text())
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    data.setdefault("budget_gpu_hours", None)
    data.setdefault("stopped_at", None)  # the budget under which a job was refused: no job starts under it
    data.setdefault("attempts", [])
    return data


@dataclass
class Spent:
    """Where the ledger stands: GPU-hours billed for the runs that ended (accounting's), the at-most of the runs still
    going, and the budget."""

    budget: float | None
    billed_h: float = 0.0
    running_at_most_h: float = 0.0
    n_running: int = 0
    stopped: bool = False
    committed_h: float = 0.0   # what the budget holds against a new job: billed of ended runs, at-most of the others
    n_going: int = 0           # of the running ones, those accounting says are going or has not listed yet


def _settle(data: dict[str, Any]) -> Spent:
    """Fill in the billed GPU-hours of the ledger's runs that ended (asked once: accounting keeps them), and sum up.
    A run that accounting cannot tell about (no accounting, a requeued job's earlier run) counts at its at-most."""
    attempts = data["attempts"]
    open_ = [a for a in attempts if a.get("billed_h") is None]
    rows = cluster.billed(a["slurm_id"] for a in open_) if open_ else {}
    latest: dict[str, int] = {}
    for a in attempts:
        latest[a["slurm_id"]] = max(latest.get(a["slurm_id"], 0), a["restart"])
    spent = Spent(data["budget_gpu_hours"], stopped=_stopped(data))
    for a in attempts:
        row = (rows or {}).get(a["slurm_id"]) if a.get("billed_h") is None else None
        if row is not None and a["restart"] < latest[a["slurm_id"]] and a["admitted"]:
            a["billed_h"] = a["at_most_h"]  # accounting tells only the latest run of a requeued job
        elif row is not None and row[2] in cluster.FINAL_STATES:
            a["billed_h"] = row[0] * row[1] / 3600
        if a.get("billed_h") is not None:
            spent.billed_h += a["billed_h"]
            spent.committed_h += a["billed_h"]
        elif a["admitted"]:
            spent.running_at_most_h += a["at_most_h"]
            spent.committed_h += a["at_most_h"]
            spent.n_running += 1
            # Accounting that answered but lists no row for the run has not caught up with it yet (slurmdbd lags
            # under load): it will bill it, so it is waited for like one it says is going.
            spent.n_going += rows is not None
    return spent


class Gate:
    """What a job runs before its task (pickled with it): reserve its at-most in the ledger, or leave a `not started`
    note in its directory and tell it not to run. Every task of a job asks; the first answer is the job's. A packed
    sweep's worker asks too (no job directory, `num` None): its allocation is what is billed, whatever it runs."""

    def __init__(self, sweep_dir: Path, request: Request, num: int | None = None, job_dir: Path | None = None) -> None:
        self.sweep_dir, self.job_dir, self.num = str(sweep_dir), str(job_dir) if job_dir else None, num
        self.gpus, self.at_most_h = request.n_gpus, request.at_most_h

    def __call__(self) -> bool:
        env = os.environ
        array = env.get("SLURM_ARRAY_JOB_ID")
        slurm_id = f"{array}_{env.get('SLURM_ARRAY_TASK_ID')}" if array else env.get("SLURM_JOB_ID")
        if not slurm_id:
            return True  # not a Slurm job: nothing is billed
        # The job name tells a reused id apart (ids restart at 1 after a cluster's cold start); the restart count,
        # a requeued run, which reserves its at-most again.
        restart, name = int(env.get("SLURM_RESTART_COUNT") or 0), env.get("SLURM_JOB_NAME")
        with _ledger(Path(self.sweep_dir)) as data:
            for a in data["attempts"]:
                if (a["slurm_id"], a["restart"], a.get("name")) == (slurm_id, restart, name):
                    return bool(a["admitted"])
            spent = _settle(data)
            budget = data["budget_gpu_hours"]
            admitted = budget is None or (not spent.stopped and spent.committed_h + self.at_most_h <= budget + 1e-9)
            data["attempts"].append({"num": self.num, "slurm_id": slurm_id, "restart": restart, "name": name,
                                     "gpus": self.gpus, "at_most_h": self.at_most_h, "admitted": admitted,
                                     "at": now_iso()})
            if admitted:
                return True
            data["stopped_at"] = budget
        why = (f"the sweep's GPU-hour budget ({BUDGET_KEY}={budget:g}) is reached: {spent.committed_h:.3f} GPU-hours "
               f"billed or held by running jobs + this {'job' if self.job_dir else 'worker'}'s {self.at_most_h:.3f} at "
               f"most would pass it; `sweepit resume {self.sweep_dir} {BUDGET_KEY}=<more>` runs it")
        if self.job_dir is not None:
            atomic_write(JobPaths(Path(self.job_dir)).not_started,
                         json.dumps({"slurm_job_id": slurm_id, "why": why}), fsync=False)
        return False


def stopped(sweep_dir: Path) -> bool:
    """Whether a job (or worker) was refused under the sweep's budget as it stands: none starts any more."""
    return _stopped(read_ledger(sweep_dir))


def _stopped(data: dict[str, Any]) -> bool:
    return data["stopped_at"] is not None and data["budget_gpu_hours"] is not None and (
        data["stopped_at"] >= data["budget_gpu_hours"])


def not_started(job_dir: Path, slurm_id: str | None) -> str | None:
    """Why the job's Slurm run `slurm_id` did not start its task (the budget), or None when it did."""
    try:
        note = json.loads(JobPaths(job_dir).not_started.read_text())
    except (OSError, ValueError):
        return None
    return str(note.get("why")) if isinstance(note, dict) and note.get("slurm_job_id") == slurm_id else None


def check(o: SlurmOptions, sweep_dir: Path, requests: Sequence[tuple[int, Request]], unit: str = "job") -> None:
    """Before anything is submitted: ConfigError when one job could pass the budget alone, or (`over_budget=refuse`)
    when the jobs to submit, each to its time limit, with what the ledger holds from before, could pass it. Then the
    ledger takes the budget, for the jobs' gates (a resume may have raised it)."""
    if o.budget_gpu_hours is None:
        if SweepPaths(sweep_dir).budget.exists():
            with _ledger(sweep_dir) as data:
                data["budget_gpu_hours"] = None
        return
    with _ledger(sweep_dir) as data:
        why = refusal(o, requests, _settle(data).committed_h, unit)
        if why is not None:
            raise ConfigError(why)
        # the account: whose allocation the budget line shows
        data["budget_gpu_hours"], data["account"] = float(o.budget_gpu_hours), o.account


def refusal(o: SlurmOptions, requests: Sequence[tuple[int, Request]], before: float = 0.0,
            unit: str = "job") -> str | None:
    """Why the budget refuses the jobs to submit, None when it takes them (the run's check and the dry run's): one
    alone could pass it, or (`over_budget=refuse`) all of them to their time limit, with `before` (what earlier runs
    billed or hold), could."""
    if o.budget_gpu_hours is None:
        return None
    budget = float(o.budget_gpu_hours)
    num, big = max(requests, key=lambda nr: nr[1].at_most_h, default=(0, None))
    if big is not None and big.at_most_h > budget:
        return (f"{BUDGET_KEY} must cover at least one {unit} run to its time limit, but {unit} {num} alone may take "
                f"{big.at_most_h:.3f} GPU-hours ({big.describe()}) against a budget of {budget:g}: no job could "
                f"start. Raise {BUDGET_KEY} to {big.at_most_h:.3f} or more, or lower the jobs' time limit "
                "(timeout_min) or GPUs (trainer.gpus).")
    total = sum(r.at_most_h for _, r in requests)
    if o.over_budget == "refuse" and before + total > budget + 1e-9:
        before_text = f" + {before:.3f} billed or held by earlier runs" if before else ""
        return (f"{BUDGET_KEY} must cover the sweep's at-most GPU-hours (every job to its time limit, as "
                f"hydra.launcher.dry_run=true shows), but the {len(requests)} {unit}(s) to submit may take "
                f"{total:.3f}{before_text} against a budget of {budget:g}; nothing was submitted. Raise {BUDGET_KEY} "
                f"to {before + total:.3f}, lower the jobs' time limit (timeout_min) or GPUs (trainer.gpus), sweep "
                "fewer values, or set hydra.launcher.over_budget=stop to start jobs while they fit and leave the "
                "rest not started.")
    return None


def for_grids_only(o: SlurmOptions) -> None:
    """The budget and max_gpus are kept for a fixed list of jobs: an adaptive search is refused them."""
    if o.max_gpus is not None or o.budget_gpu_hours is not None:
        raise ConfigError("hydra.launcher.max_gpus and budget_gpu_hours apply to a fixed list of jobs (a grid), but "
                          f"an adaptive search got max_gpus={o.max_gpus}, budget_gpu_hours={o.budget_gpu_hours}.\n"
                          "Drop these keys; bound the search with hydra.sweeper.n_trials and hydra.sweeper.n_jobs.\n"
                          "See docs/troubleshooting.md#grid-only-keys")


def dry_run_line(o: SlurmOptions, hours: float) -> list[str]:
    if o.budget_gpu_hours is None:
        return []
    fits = "fits" if hours <= o.budget_gpu_hours else (
        "is refused" if o.over_budget == "refuse" else "starts jobs while they fit (over_budget=stop)")
    return [f"budget: at most {hours:.2f} of {BUDGET_KEY}={o.budget_gpu_hours:g}: the sweep {fits}."]


def budget_line(sweep_dir: Path, settle_s: float = 0.0) -> str | None:
    """One line, for the end table, `sweepit status` and the report: GPU-hours billed and held against the budget,
    and the account's allocation where accounting sets one; None for a sweep without a budget. `settle_s`: at the
    end of a sweep, how long to wait for accounting to bill the runs still open (a job runs on a moment after its
    record, and accounting bills it only once Slurm has ended it), so that the line and the ledger are final."""
    if not SweepPaths(sweep_dir).budget.exists():
        return None
    deadline = time.monotonic() + settle_s
    while True:
        try:
            with _ledger(sweep_dir) as data:  # (taken for each look: the jobs' gates wait for it)
                spent = _settle(data)
        except OSError:  # a sweep this user may read but not write: the same figures, not kept
            data = read_ledger(sweep_dir)
            spent = _settle(data)
        if not spent.n_going or spent.budget is None or time.monotonic() >= deadline:
            break
        time.sleep(_SETTLE_POLL_S)
    n_refused = len({a["num"] for a in data["attempts"] if not a["admitted"] and a["num"] is not None})
    if spent.budget is None:
        return None
    running = (f" + {spent.running_at_most_h:.3f} at most for {spent.n_running} running job(s)"
               if spent.n_running else "")
    line = f"GPU budget: {spent.billed_h:.3f} GPU-hours billed (sacct){running}, of {spent.budget:g}"
    if spent.stopped:
        line += (f"; reached: {f'{n_refused} job(s)' if n_refused else 'the jobs left'} not started (`sweepit resume "
                 f"{sweep_dir} {BUDGET_KEY}=<more>` runs them)")
    allocation = cluster.gpu_allocation(data.get("account"))
    if allocation is not None:
        account, granted, used = allocation
        line += f"; account {account}: {(granted - used) / 60:.1f} of {granted / 60:.1f} GPU-hours left (sshare)"
    return line


def throttles(arrays: Sequence[tuple[Request, int]], o: SlurmOptions) -> dict[Request, int]:
    """Each request's array throttle (`--array=...%k`) under `max_gpus`, the arrays running side by side: every array
    of GPU jobs one job at a time, then one more job in turn to each array (first to last) while its GPUs fit, up to
    its size and `array_parallelism`. ConfigError when the arrays' one job each do not fit."""
    if o.max_gpus is None:
        return {}
    gpu_arrays = [(r, size) for r, size in arrays if r.n_gpus]
    big = max((r for r, _ in gpu_arrays), key=lambda r: r.n_gpus, default=None)
    if big is not None and big.n_gpus > o.max_gpus:
        raise ConfigError(
            f"hydra.launcher.max_gpus must be at least one job's GPUs, but a job asks for {big.n_gpus} "
            f"({big.describe()}) and max_gpus={o.max_gpus}.\n"
            f"Raise hydra.launcher.max_gpus to {big.n_gpus} or more, or lower the jobs' GPUs (trainer.gpus).\n"
            "See docs/troubleshooting.md#max-gpus")
    need = sum(r.n_gpus for r, _ in gpu_arrays)
    if need > o.max_gpus:
        raise ConfigError(
            f"hydra.launcher.max_gpus must let each of the sweep's {len(gpu_arrays)} job arrays run one job at a time, "
            f"{need} GPUs in all, but got max_gpus={o.max_gpus}.\n"
            f"Raise it to {need}, raise hydra.launcher.max_array_size (fewer arrays), or sweep the GPU counts in "
            "separate sweeps.\n"
            "See docs/troubleshooting.md#max-gpus-across-arrays")
    k = [1] * len(gpu_arrays)
    left = o.max_gpus - need
    grew = True
    while grew:
        grew = False
        for i, (r, size) in enumerate(gpu_arrays):
            if r.n_gpus <= left and k[i] < min(size, o.array_parallelism):
                k[i] += 1
                left -= r.n_gpus
                grew = True
    out: dict[Request, int] = {}
    for (r, _), ki in zip(gpu_arrays, k, strict=True):
        out[r] = min(out.get(r, ki), ki)
    return out
