"""How many Slurm jobs a sweep may put in the queue. Sites cap the jobs one user may have queued or running (QoS
`MaxSubmitJobsPerUser`, association `MaxSubmitJobs`; each array task counts) and sbatch refuses a whole array that
would go over, so the driver submits at most what the tightest of those limits (read once with `sacctmgr`) and
`hydra.launcher.max_queued` leave room for, counting the user's other jobs too, and the rest as earlier jobs end.
Limits on jobs running at once refuse nothing (the jobs wait), so they are only said. Partition QoSes and limits
of a parent account are not read: `hydra.launcher.max_queued` is for those.
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sweepit.errors import QueueLimitError, SlurmError
from sweepit.slurm import _cluster as cluster

if TYPE_CHECKING:
    from sweepit.slurm._request import SlurmOptions

log = logging.getLogger(__name__)
# What sbatch says when it refuses a job for a limit on jobs per user (slurm_errno: ESLURM_ACCOUNTING_POLICY, with
# the reason on the line before: QOSMaxSubmitJobPerUserLimit, AssocMaxSubmitJobLimit, ...).
_REFUSED_FOR_LIMIT = re.compile(r"accounting/QOS policy|Max\w*Submit\w*Limit|MaxJobCount|Job count limit", re.I)
_LIMIT_NAME = re.compile(r"\b((?:QOS|Assoc)\w*Limit)\b")


@dataclass(frozen=True)
class Cap:
    """One limit on the user's jobs in the queue: how many, and who says so (for messages)."""

    jobs: int
    name: str  # e.g. "QoS normal's MaxSubmitJobsPerUser=3", "hydra.launcher.max_queued=5"


@dataclass
class QueueLimits:
    submit: tuple[Cap, ...] = ()    # on jobs queued or running: the driver keeps under the tightest
    running: tuple[Cap, ...] = ()   # on jobs running at once: only said
    user: str = ""

    @property
    def cap(self) -> Cap | None:
        return min(self.submit, key=lambda c: c.jobs) if self.submit else None

    def describe(self) -> str:
        """One line for a dry run and the driver's log ("" when there is no limit)."""
        cap = self.cap
        if cap is None:
            return ""
        running = min(self.running, key=lambda c: c.jobs) if self.running else None
        return (f"at most {cap.jobs} Slurm job(s) of {self.user}'s in the queue at once ({cap.name}; each array "
                "task counts, other sweeps' jobs too): the driver submits the rest as earlier ones end"
                + (f"; at most {running.jobs} run at once ({running.name})" if running else ""))

    def free(self) -> int:
        """How many more jobs the sweep may submit now (squeue is asked for the user's jobs each time; 0 while it
        does not answer)."""
        assert self.cap is not None
        n = user_jobs_in_queue(self.user)
        return 0 if n is None else max(0, self.cap.jobs - n)

    def full(self) -> str:
        """Why jobs wait to be submitted."""
        assert self.cap is not None
        return (f"{self.cap.name} allows {self.cap.jobs} Slurm job(s) of {self.user}'s in the queue at once; they go "
                "out as earlier ones end")


def read_limits(o: SlurmOptions) -> QueueLimits:
    """The user's limits on jobs in the queue: `hydra.launcher.max_queued`, and those of the association (the
    launcher's `account`, else the user's default one) and of the QoS the jobs run under (its `qos`, else the
    association's default) where `sacctmgr` answers."""
    user, max_queued = pwd.getpwuid(os.getuid()).pw_name, o.max_queued
    submit: list[Cap] = [Cap(max_queued, f"hydra.launcher.max_queued={max_queued}")] if max_queued else []
    running: list[Cap] = []
    # Three sacctmgr calls, each a round trip to slurmdbd (0.2-0.3 s), asked at once: the user's associations and
    # every QoS are few rows, picked here.
    with ThreadPoolExecutor(3, thread_name_prefix="sweepit-sacctmgr") as pool:
        default = pool.submit(_sacctmgr, "user", user, "format=DefaultAccount") if o.account is None else None
        assocs = pool.submit(_sacctmgr, "assoc", "where", f"user={user}",
                             "format=Account,Partition,QOS,DefaultQOS,MaxSubmit,MaxJobs")
        qoses = pool.submit(_sacctmgr, "qos", "format=Name,MaxSubmitPU,MaxJobsPU")
    account = o.account
    if default is not None:
        rows = default.result()
        account = rows[0].get("DefaultAccount") if rows else None
    assoc = _association(assocs.result(), account)
    qos = o.qos
    if assoc is not None:
        name = f"association of {user} in account {assoc['Account']}"
        _add(submit, assoc.get("MaxSubmit"), f"{name}: MaxSubmitJobs")
        _add(running, assoc.get("MaxJobs"), f"{name}: MaxJobs")
        qos = qos or assoc.get("DefaultQOS") or _only(assoc.get("QOS", ""))
    qos = qos or "normal"
    row = next((r for r in qoses.result() or [] if r.get("Name", "").lower() == qos.lower()), None)
    if row is not None:
        _add(submit, row.get("MaxSubmitPU"), f"QoS {row['Name']}: MaxSubmitJobsPerUser")
        _add(running, row.get("MaxJobsPU"), f"QoS {row['Name']}: MaxJobsPerUser")
    return QueueLimits(tuple(submit), tuple(running), user)


def _add(caps: list[Cap], value: str | None, name: str) -> None:
    if value and value.isdigit():
        caps.append(Cap(int(value), f"{name}={value}"))


def _only(qos_list: str) -> str | None:
    names = [q for q in qos_list.split(",") if q]
    return names[0] if len(names) == 1 else None


def _sacctmgr(*args: str) -> list[dict[str, str]] | None:
    """`sacctmgr -nP show ARGS` as rows of the asked `format=` fields; None where accounting does not answer."""
    fmt = next(a for a in args if a.startswith("format="))[len("format="):].split(",")
    try:
        out = cluster._run(["sacctmgr", "-nP", "show", *args], timeout_s=15)
    except SlurmError:
        return None
    if out.returncode != 0:
        return None
    return [dict(zip(fmt, line.split("|"), strict=False)) for line in out.stdout.splitlines() if line.strip()]


def _association(rows: list[dict[str, str]] | None, account: str | None) -> dict[str, str] | None:
    """The user's association in `account` (any of theirs when it is not known: none given, or no default account),
    not a partition's own."""
    return next((r for r in rows or [] if not r.get("Partition")
                 and (not account or r.get("Account", "").lower() == account.lower())), None)


def user_jobs_in_queue(user: str) -> int | None:
    """The user's jobs pending or running, each array task counted (squeue -r); None when squeue does not answer."""
    try:
        out = cluster._run(["squeue", "-h", "-r", "-u", user, "-t", "PD,R,CF,S,RQ,RH,RF,SI,SO,ST,RD", "-o", "%i"],
                           timeout_s=15)
    except SlurmError:
        return None
    return len(out.stdout.split()) if out.returncode == 0 else None


def read_limits_meanwhile(o: SlurmOptions) -> Future[QueueLimits]:
    """`read_limits(o)` in a thread: sacctmgr asks slurmdbd, a few tenths of a second a call, which the driver spends
    planning the jobs meanwhile."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="sweepit-limits")
    try:
        return pool.submit(read_limits, o)
    finally:
        pool.shutdown(wait=False)


def open_room(o: SlurmOptions, read: Future[QueueLimits] | None = None) -> Room:
    """The room the user's limits leave (`read`: those limits, read meanwhile; else read now), said when one applies
    (else nothing to count: no squeue call per look)."""
    limits = read_limits(o) if read is None else read.result()
    if limits.cap is None:
        return Room(None)
    log.info(f"sweepit: {limits.describe()}")
    return Room(limits)


def dry_run_lines(o: SlurmOptions) -> list[str]:
    """What a dry run says of the queue limits (nothing when there are none)."""
    said = read_limits(o).describe()
    return [f"# queue limit: {said}"] if said else []


def refused_for_limit(said: str) -> str | None:
    """The limit sbatch named when it refused jobs for one on the user's jobs (e.g. QOSMaxSubmitJobPerUserLimit,
    or its general message), else None."""
    if not _REFUSED_FOR_LIMIT.search(said):
        return None
    named = _LIMIT_NAME.search(said)
    return named.group(1) if named else "a limit on jobs per user"


class Room:
    """The one way a driver submits jobs within the user's queue limits (`limits`; None where none applies): `submit`
    puts out as many as fit now, `submit_waiting` waits for room first. The one rule for sbatch refusing jobs for a
    limit on the user's jobs: with jobs of the sweep's in the queue (they free room as they end) what was refused
    waits, and sbatch is asked again once one of those has ended; with none, nothing would ever free room, so the
    error is raised for the user to act on (its message names the limit and the remedies)."""

    def __init__(self, limits: QueueLimits | None) -> None:
        self.limits = limits
        self.refusal = ""  # why sbatch last refused jobs for a limit, until a submission goes through
        self._refused_while: set[str] | None = None  # the sweep's jobs in the queue at that refusal

    def submit(self, wanted: int, submit: Callable[[int], list[str]], ours: Callable[[], set[str]], what: str,
               say: Callable[[str], None] | None = None) -> list[str]:
        """`submit(n)` as many of `wanted` jobs as fit now; their Slurm ids, none when none fits or sbatch refused them
        for a limit (`refusal` says so, `say` once). `ours()`: the Slurm ids of the sweep's jobs in the queue."""
        if wanted <= 0:
            return []
        if self._refused_while is not None:
            if self._refused_while <= ours():
                return []  # none of the sweep's jobs then in the queue has ended since: no room yet
            self._refused_while = None
        n = wanted if self.limits is None else min(wanted, self.limits.free())
        if n == 0:
            return []
        try:
            ids = submit(n)
        except QueueLimitError as e:
            in_queue = ours()
            if not in_queue:
                raise
            self._refused_while = in_queue
            why = (f"sbatch refused {what} for a limit on jobs per user ({e.limit}); submitted again as the sweep's "
                   "jobs in the queue end")
            if say is not None and why != self.refusal:
                say(f"sweepit: {why}")
            self.refusal = why
            return []
        self.refusal = ""
        return ids

    def submit_waiting(self, wanted: int, submit: Callable[[int], list[str]], ours: Callable[[], set[str]],
                       what: str, poll_s: float, on_wait: Callable[[], None]) -> list[str]:
        """`submit`, blocking until at least one job went out: between tries `on_wait()` runs (the follower's poll, so
        that the sweep's own jobs that end free their place) and the driver sleeps `poll_s`."""
        said = False
        while not (ids := self.submit(wanted, submit, ours, what, say=log.warning)):
            if not said and self._refused_while is None and self.limits is not None:
                log.warning(f"sweepit: {wanted} job(s) wait to be submitted: {self.limits.full()}")
                said = True
            on_wait()
            time.sleep(poll_s)
        return ids
