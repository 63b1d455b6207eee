"""The state of each job of a Slurm sweep, from Slurm (squeue, then sacct) and from the jobs' `result.json`, for the
launcher's follow loop and `sweepit status DIR`. A job's own result.json is the truth about its outcome; a job Slurm
ended without one gets one written here, with the Slurm state and its stderr's tail.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from sweepit._host import now_iso
from sweepit._signals import SLURM_STOP
from sweepit.errors import SlurmError
from sweepit.results import (
    RESULT_GRACE_S,
    JobEntry,
    JobPaths,
    JobState,
    Ledger,
    Manifest,
    Recorder,
    ResultGrace,
    SweepPaths,
    claimed,
    read_metrics,
    read_record,
    tail_lines,
)
from sweepit.slurm import _cluster as slurm_queue
from sweepit.slurm._budget import not_started
from sweepit.slurm._cluster import ACTIVE_STATES, FINAL_STATES, QueueRow
from sweepit.slurm._task_files import failed_task, rank_failure

LOST = "LOST"                        # neither squeue nor sacct knows the job any more
CANCELLED_BY_DRIVER = "cancelled_by_driver"  # manifest extra: when the driver itself scancel'ed the job
# Manifest extra of a job of a packed sweep (hydra.launcher.workers=N): the index of its request in the plan. Such a
# job has the Slurm id of the worker that claimed it, none before; a worker runs it once, so its result is final.
PACKED = "packed"
WORKER_TRIAL = "worker_trial"  # manifest extra of an Optuna worker's job: its trial number
# slurmstepd's last word in the job's stderr log: why Slurm ended it, readable after squeue and sacct forgot it.
_SLURMSTEPD = re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+"
                         r"(?: DUE TO (TIME LIMIT|PREEMPTION|NODE FAILURE))?")
_SLURMSTEPD_STATE = {None: "CANCELLED", "TIME LIMIT": "TIMEOUT", "PREEMPTION": "PREEMPTED", "NODE FAILURE": "NODE_FAIL"}


@dataclass
class Seen:
    """One look at one job."""

    state: str                       # manifest state: queued | running | not started | a result.json status
    slurm_state: str = ""            # PENDING, RUNNING, CANCELLED, ..., LOST; "" when not asked
    node: str = ""
    exit_code: str = ""              # sacct's, e.g. "1:0"
    final: bool = False              # nothing more will happen to the job
    dead: bool = False               # Slurm ended it and it left no result: a result.json is to be written
    reason: str = ""                 # squeue's reason a job pends (Priority, Resources, PartitionTimeLimit, ...)
    not_started: str = ""            # why its run did not start its task (the sweep's GPU budget)


def slurm_id(entry: JobEntry) -> str | None:
    value = entry.extra.get("slurm_job_id")
    return str(value) if value else None


def alive_workers(m: Manifest) -> set[str]:
    """The ids of the manifest's workers that are queued or running; all of them when Slurm cannot be asked."""
    ids = [str(i) for i in m.workers.get("ids") or []]
    if not ids:
        return set()
    rows = slurm_queue.squeue(ids)
    if rows is None:
        return set(ids)
    name = m.workers.get("job_name")
    return {i for i in ids if (row := rows.get(i)) is not None and (not name or row.name == name) and row.in_queue}


def workers_alive(m: Manifest) -> bool:
    """Whether any worker of the manifest is queued or running (True when Slurm cannot be asked)."""
    return bool(alive_workers(m))


def _mine(rows: dict[str, QueueRow] | None, entry: JobEntry) -> QueueRow | None:
    """The row of this entry's job; a row of another job with the same id (ids restart at 1 after a cluster
    cold start) does not count."""
    job_id = slurm_id(entry)
    row = rows.get(job_id) if rows is not None and job_id is not None else None
    name = entry.extra.get("slurm_job_name")
    return row if row is not None and (not name or row.name == name) else None


def look(entries: Iterable[JobEntry], ask_all: bool = False, sweep_dir: Path | None = None) -> dict[int, Seen]:
    """What each job is doing now: one squeue call, plus one sacct call for jobs squeue shows ending or lost.
    Slurm is asked only about jobs whose result does not settle their outcome already (`ask_all`: about every
    job, so that the Slurm state recorded for a finished one is its last, as `sweepit status` shows it). With the
    sweep's `sweep_dir`, a packed job that no worker has claimed is queued without a look at its files."""
    entries = list(entries)
    waiting = unclaimed(entries, sweep_dir) if sweep_dir is not None else set()
    statuses = {e.num: read_record(Path(e.job_dir)).status if e.job_dir and e.num not in waiting else None
                for e in entries}
    ask = [e for e in entries if slurm_id(e) and (ask_all or statuses[e.num] is None
                                                  or JobState.is_failure(statuses[e.num]))]
    queue = slurm_queue.squeue(slurm_id(e) or "" for e in ask) if ask else {}
    unsure = [e for e in ask if (row := _mine(queue, e)) is None or row.state == "COMPLETING"]
    acct = slurm_queue.sacct(slurm_id(e) or "" for e in unsure) if unsure else {}
    return {e.num: _decide(e, statuses[e.num], _mine(queue, e), _mine(acct, e), queue is None) for e in entries}


def unclaimed(entries: list[JobEntry], sweep_dir: Path) -> set[int]:
    """The packed jobs among `entries` still waiting for a worker (queued, and not in their submission's claims
    folder): no result of theirs can be there to read, or one left by an earlier submission that is to be run again.
    One listing of the claims folder instead of a read per job: early in a large packed sweep most jobs are
    unclaimed, and a read per job would look for as many missing results."""
    waiting: dict[int, list[int]] = {}
    for e in entries:
        generation = e.extra.get("generation")
        if _not_in_slurm(e) and isinstance(generation, int):  # a packed job's: the plan it is in
            waiting.setdefault(generation, []).append(e.num)
    out: set[int] = set()
    for generation, nums in waiting.items():
        taken = claimed(SweepPaths(sweep_dir).claims(generation))
        out.update(num for num in nums if num not in taken)
    return out


def _not_in_slurm(entry: JobEntry) -> bool:
    """A job queued in the manifest that is not in Slurm: a packed one no worker has started (it has no Slurm job of
    its own until one does), or one held back by the queue limit."""
    return (slurm_id(entry) is None and (entry.extra.get(PACKED) is not None or bool(entry.extra.get("held")))
            and JobState.is_live(entry.state))


def settle_unclaimed(m: Ledger) -> list[int]:
    """Jobs that never reached Slurm, once no driver follows the sweep and no worker of it is left: `not started`
    (`sweepit resume` submits them)."""
    waiting = [n for n, e in m.jobs.items() if _not_in_slurm(e)]
    if not waiting or (m.workers.get(PACKED) and workers_alive(m)):
        return []
    for n in waiting:
        m.move(n, JobState.NOT_STARTED)
        m.jobs[n].extra.pop("held", None)
    return waiting


def settled_by_results(entries: Iterable[JobEntry]) -> dict[int, Seen]:
    """The jobs whose own result settles their outcome (not failed or interrupted: those may be requeued),
    without asking Slurm: the follower reports them even while the controller does not answer."""
    seen = {}
    for e in entries:
        status = read_record(Path(e.job_dir)).status if e.job_dir else None
        if status is not None and _settles(status, e):
            seen[e.num] = Seen(state=status, final=True)
    return seen


def _settles(status: str, entry: JobEntry) -> bool:
    """Whether a job's own result settles its outcome whatever Slurm says. A failed or interrupted job may be
    requeued; a packed job's failure is its own (its worker runs it once), but one interrupted may be given back
    (its worker stopped for a requeue) while its worker is still in Slurm's hands."""
    return not JobState.is_failure(status) or (entry.extra.get(PACKED) is not None and status != JobState.INTERRUPTED)


def pending_reasons(seen: dict[int, Seen]) -> str:
    """Why queued jobs wait, as squeue says: `2 Resources (jobs 0, 1), 1 PartitionTimeLimit (job 2)`."""
    by_reason: dict[str, list[int]] = {}
    for num, s in sorted(seen.items()):
        if s.state == JobState.QUEUED and s.reason:
            by_reason.setdefault(s.reason, []).append(num)
    return ", ".join(f"{len(nums)} {reason} (job{'s' if len(nums) > 1 else ''} {', '.join(map(str, nums[:8]))}"
                     f"{', ...' if len(nums) > 8 else ''})" for reason, nums in by_reason.items())


def _decide(entry: JobEntry, status: str | None, queued: QueueRow | None, accounted: QueueRow | None,
            squeue_failed: bool) -> Seen:
    if status is not None and _settles(status, entry):
        # Slurm's last word on it, once it has one: a job runs on a moment after writing its record (its process
        # exits), and a RUNNING beside `completed` would say the job is both.
        said = next((row.state for row in (queued, accounted) if row is not None and row.state in FINAL_STATES), "")
        return Seen(state=status, slurm_state=said, final=True)
    why = not_started(Path(entry.job_dir), slurm_id(entry)) if status is None and entry.job_dir else None
    if why:  # its gate refused it: it ends at once, and leaves no result
        return Seen(state=JobState.NOT_STARTED, slurm_state=(queued or accounted or QueueRow("", "", "")).state,
                    final=True, not_started=why)
    if _not_in_slurm(entry):
        return Seen(state=JobState.QUEUED)  # no worker has claimed it yet, or the queue limit holds it back
    if slurm_id(entry) is None:
        return Seen(state=status or JobState.NOT_STARTED, final=True)  # never submitted
    if queued is not None and queued.state in ACTIVE_STATES:
        # A failed result.json here is one of a run that Slurm has requeued since.
        state = JobState.RUNNING if queued.state in ("RUNNING", "SIGNALING") else JobState.QUEUED
        packed = entry.extra.get(PACKED) is not None
        if state == JobState.RUNNING and packed and not JobPaths(Path(entry.job_dir)).task_file(0).exists():
            state = JobState.QUEUED  # claimed by a running worker, waiting for one of its slots
        reason = queued.reason if state == JobState.QUEUED and queued.reason not in ("None", "(null)") else ""
        return Seen(state=state, slurm_state=queued.state, node=queued.node, reason=reason)
    ended = _ended(queued, accounted)
    if ended is None:
        if queued is None and not squeue_failed and (accounted is None or accounted.state not in ACTIVE_STATES):
            said = _said_before_it_went(entry)
            return Seen(state=status or _status_for(said), slurm_state=said, final=True, dead=status is None)
        row = queued or accounted  # ending (COMPLETING), or squeue did not answer this time
        return Seen(state=JobState.RUNNING if row is not None and row.state == "COMPLETING" else entry.state,
                    slurm_state=row.state if row is not None else "", node=row.node if row is not None else "")
    # A job that SIGTERM stopped recorded itself `interrupted`; Slurm knows why (scancel, time limit, node failure).
    retell = status == JobState.INTERRUPTED and _retold(entry, read_record(entry.job_dir).result)
    return Seen(state=status or _status_for(ended.state), slurm_state=ended.state,
                node=ended.node or (queued.node if queued is not None else ""),
                exit_code=accounted.reason if accounted is not None else "", final=True,
                dead=status is None or retell)


def _said_before_it_went(entry: JobEntry) -> str:
    """Why a job that squeue and sacct no longer know ended: the driver cancelled it (the manifest says so),
    or slurmstepd's line in its stderr log says (cancelled, time limit, preemption, node failure); else LOST."""
    if entry.extra.get(CANCELLED_BY_DRIVER):
        return "CANCELLED"
    said = _SLURMSTEPD.findall(tail_lines(entry.extra.get("stderr"), 20))
    return _SLURMSTEPD_STATE[said[-1] or None] if said else LOST


def _retold(entry: JobEntry, own: dict[str, Any]) -> bool:
    """Whether a job's own record is of its stop by a signal whose cause Slurm knows (and the record does not say
    yet): SIGTERM from Slurm to a job's task, or a packed job stopped with its worker."""
    if "slurm_state" in own or own.get("status") != JobState.INTERRUPTED:
        return False
    return SLURM_STOP in str(own.get("error", "")) or entry.extra.get(PACKED) is not None


def _ended(queued: QueueRow | None, accounted: QueueRow | None) -> QueueRow | None:
    """The row saying the job ended for good, if one does. squeue shows a job that Slurm is stopping as
    COMPLETING for as long as its processes take to die (up to KillWait, 30 s by default): until they are gone,
    it has not ended, whatever sacct says, since a process still running may yet write its result."""
    if queued is not None and queued.state == "COMPLETING":
        return None
    if queued is not None and queued.state in FINAL_STATES:
        return queued
    if accounted is not None and accounted.state in FINAL_STATES:
        if accounted.state == "PREEMPTED" and queued is not None:
            return None  # still in the queue: Slurm is requeuing it
        return accounted
    return None


def _status_for(slurm_state: str) -> JobState:
    """The result.json status of a job Slurm ended: stopped by someone is `interrupted`, anything else `failed`."""
    return JobState.INTERRUPTED if slurm_state in ("CANCELLED", "PREEMPTED") else JobState.FAILED


def explain(slurm_state: str, job_id: str, exit_code: str = "", timeout_min: Any = None) -> str:
    """Why a job has no result, in words, with what to do about it."""
    if slurm_state == "CANCELLED":
        return f"cancelled in Slurm (job {job_id}) before it finished"
    if slurm_state == "TIMEOUT":
        limit = f" of {timeout_min} min" if timeout_min is not None else ""
        return (f"reached its Slurm time limit{limit} (job {job_id}) before it finished: raise timeout_min, or keep "
                "trainer.checkpoint=true so that the USR2 signal before the limit requeues it")
    if slurm_state == "OUT_OF_MEMORY":
        return (f"was killed for using more memory than it asked for (Slurm OUT_OF_MEMORY, job {job_id}): "
                "set hydra.launcher.mem_gb higher")
    if slurm_state == "NODE_FAIL":
        return f"lost its node (Slurm NODE_FAIL, job {job_id}); `sweepit resume` runs it again"
    if slurm_state == "PREEMPTED":
        return f"was preempted (job {job_id}) and not requeued; `sweepit resume` runs it again"
    if slurm_state == LOST:
        return (f"is unknown to Slurm (job {job_id}: neither squeue nor sacct lists it, so it was purged or the "
                "cluster was restarted) and left no result")
    if slurm_state == "COMPLETED":
        return f"ended (Slurm COMPLETED, job {job_id}) without writing result.json"
    code = f" with exit code {exit_code}" if exit_code and exit_code != "0:0" else ""
    return f"ended in Slurm state {slurm_state}{code} (job {job_id}) before it wrote a result"


def record_dead(m: Ledger, num: int, seen: Seen, stderr_tail: str) -> None:
    """Record the end of a job Slurm ended without a result.json (or one that SIGTERM stopped, with what Slurm
    says it was: the rest of the job's own record is kept). Any other result of the job's, one that came in the
    meantime included, is never replaced: the ledger's entry takes its status then."""
    entry = m.jobs[num]
    job_id = slurm_id(entry) or "?"
    failed = failed_task(Path(entry.job_dir))  # a task of a multi-task job that failed first: the cause
    rows, _ = read_metrics(Path(entry.job_dir))
    said = explain(seen.slurm_state, job_id, seen.exit_code, entry.extra.get("timeout_min"))
    m.end(num, JobState.FAILED if failed else _status_for(seen.slurm_state), Recorder.SLURM,
          stderr_tail=lambda: stderr_tail, retell=lambda own: _retold(entry, own.result),
          error=f"{rank_failure(failed)}; the job {said}" if failed else said,
          slurm_state=seen.slurm_state, slurm_job_id=job_id, node=seen.node or None, epochs_completed=len(rows),
          started_at=entry.started_at, ended_at=now_iso(), recorded_on=socket.gethostname(),
          **{key: entry.extra[key] for key in ("metric", "direction") if entry.extra.get(key) is not None},
          **({"final": rows[-1]} if rows else {}), **({"slurm_exit_code": seen.exit_code} if seen.exit_code else {}))


def apply(m: Ledger, num: int, seen: Seen, stderr_tail: Callable[[], str] | None = None) -> bool:
    """Record what was seen of job `num`; True when something changed. A job Slurm ended without a result gets one
    (`record_dead`) when `stderr_tail` is given (a driver, or `sweepit status` with none). An end is its record's,
    where it has one (a look that records nothing has none); a job Slurm has in its queue runs again when it had
    ended (a requeue)."""
    entry = m.jobs[num]

    def now() -> tuple[Any, ...]:
        return entry.state, entry.extra.get("slurm_state"), entry.extra.get("node"), entry.extra.get("slurm_reason")

    before = now()
    if seen.dead and stderr_tail is not None:
        record_dead(m, num, seen, stderr_tail())
    if not (seen.final and JobState.is_ended(seen.state) and m.mirror(num)):
        m.move(num, seen.state, again=not seen.final)
    if seen.slurm_state:
        entry.extra["slurm_state"] = seen.slurm_state
    elif seen.final and entry.extra.get("slurm_state") in (*ACTIVE_STATES, "COMPLETING"):
        del entry.extra["slurm_state"]  # what Slurm said while it ran; it no longer says anything about the job
    if seen.reason:
        entry.extra["slurm_reason"] = seen.reason
    else:
        entry.extra.pop("slurm_reason", None)
    if seen.node:
        entry.extra["node"] = seen.node
    if seen.not_started:
        entry.extra["not_started"] = seen.not_started
    if seen.state == JobState.RUNNING and entry.started_at is None:
        entry.started_at = now_iso()
    if seen.final and entry.ended_at is None and slurm_id(entry):
        entry.ended_at = now_iso()
    return before != now()


def refresh(m: Ledger, stderr_tail_lines: int = 50, record: bool = True,
            nums: list[int] | None = None) -> tuple[list[int], str]:
    """Bring the state of the jobs `nums` (default: every job) up to date (from Slurm for a Slurm sweep, else from
    the results); a job Slurm ended without a result gets one. Returns the numbers of the jobs that changed, and a
    note when Slurm could not be asked (then the results alone are used). `record=False` writes nothing (a live
    driver does)."""
    changed: list[int] = []
    nums = sorted(m.jobs) if nums is None else nums
    if m.launcher == "slurm":
        try:
            seen = look((m.jobs[n] for n in nums), ask_all=True, sweep_dir=Path(m.sweep_dir))
            dead = [num for num, s in seen.items() if s.dead] if record else []
            if dead:  # the follower's grace: their own results may be a moment late on a shared file system
                grace = ResultGrace(max(_grace_s(m.jobs[num]) for num in dead))
                for num in dead:
                    grace.over(num)
                time.sleep(grace.wait_s())
                seen.update(look((m.jobs[num] for num in dead), ask_all=True))
        except SlurmError as e:
            note = f"Slurm could not be asked ({e}); the states below come from the jobs' results alone."
            return _from_results(m, nums), note
        for num, s in seen.items():
            if apply(m, num, s, partial(tail_lines, m.jobs[num].extra.get("stderr"), stderr_tail_lines) if record
                     else None):
                changed.append(num)
        return changed, ""
    return _from_results(m, nums), ""


def _grace_s(entry: JobEntry) -> float:
    """The sweep's `hydra.launcher.result_grace_s`, recorded with each job at submission (else the default)."""
    grace = entry.extra.get("result_grace_s")
    return float(grace) if isinstance(grace, int | float) and grace >= 0 else RESULT_GRACE_S


def _from_results(m: Ledger, nums: list[int]) -> list[int]:
    return [num for num in nums if m.mirror(num)]

