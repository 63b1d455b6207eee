"""`sweepit status DIR`: a sweep's state brought up to date (from Slurm for a Slurm sweep, else from its results) and
told as a table, with what to run next. It serves local and Slurm sweeps alike, so it sits above both engines; the
room's `__init__` does not import it, so that a report loads no Slurm code."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from pathlib import Path

from sweepit.results import (
    LIVE_ROWS,
    MAX_ROWS,
    JobRow,
    JobState,
    Ledger,
    LiveReader,
    Manifest,
    RungPlan,
    SweepLock,
    SweepPaths,
    array_of,
    counts_text,
    format_duration,
    format_table,
    job_row,
    read_live_manifest,
    read_rungs,
    report_shows,
    reports_at_end,
    sweep_eta_s,
)
from sweepit.slurm import (
    END_SETTLE_S,
    PACKED,
    adopt_trials,
    budget_line,
    refresh,
    settle_unclaimed,
    slurm_id,
    workers_alive,
)


def _table(m: Manifest, live: LiveReader, shown: list[int], counts: Counter[str], n_jobs: int,
           plan: RungPlan | None) -> str:
    """The results table of the jobs `shown`, with the Slurm job id and state in the note, and for a running job how
    far it is (`3/15 val_acc=0.91 ETA 0:42`, from its files); the counts by state (`counts`) cover every job."""
    rows: list[JobRow] = []
    for num in shown:
        e = m.jobs[num]
        has_dir = bool(e.job_dir) and Path(e.job_dir).is_dir()
        row = job_row(JobRow, num, Path(e.job_dir) if has_dir else None, asdict(e),
                      epochs=plan.epochs if plan is not None else None)
        row.status = e.state  # as just brought up to date, which the counts below tell too
        progress = live.look(Path(e.job_dir)) if has_dir and e.state == JobState.RUNNING else None
        reason = f"({e.extra['slurm_reason']})" if e.extra.get("slurm_reason") else ""
        where = " ".join(x for x in (slurm_id(e), e.extra.get("slurm_state"), reason, e.extra.get("node")) if x)
        held = f"not submitted yet: {e.extra['held']}" if e.extra.get("held") else ""
        row.note = "; ".join(x for x in (progress.text() if progress else "", f"slurm {where}" if where else "",
                                         held, row.note) if x)
        rows.append(row)
    tally = counts_text(counts)
    done = (sum(n for s, n in counts.items() if JobState.is_success(s))
            - sum(JobState.is_success(m.jobs[n].state) for n in shown))
    left = n_jobs - len(rows) - done  # more unfinished jobs than rows: the first ones are listed
    hidden = " and ".join(f"{n} {what}" for n, what in ((done, "finished"), (left, "unfinished")) if n)
    more = (f" ({hidden} jobs not listed: `sweepit summary {m.sweep_dir}` lists every job, `--rows 0` "
            "here)") if hidden else ""
    return f"{format_table(rows)}\n\n{n_jobs} jobs: {tally}{more}"


def sweep_status(sweep_dir: Path, live: LiveReader | None = None, max_rows: int = MAX_ROWS,
                 writes_report: bool = False) -> tuple[str, bool]:
    """What `sweepit status DIR` prints (the refreshed table, the counts, what to run next), and whether the sweep is
    still going (a job queued or running, or a driver holding it): `--watch` looks again until it is not. `live` keeps
    what was read of the running jobs' metrics between looks; `writes_report`: the caller writes a missing report
    once the sweep has ended (`--watch`), so the look says that instead of what to run."""
    live = live or LiveReader()
    driver = SweepLock(Path(sweep_dir).absolute()).holder()
    # A live driver of a large sweep keeps its counts and the jobs listed here (sweep.live.json): read those alone.
    # Not for Optuna's workers, whose trials the manifest may not list yet (adopt_trials needs every record).
    view = read_live_manifest(sweep_dir, Ledger) if driver is not None and 0 < max_rows <= LIVE_ROWS else None
    if view is not None and (view[1].n_jobs <= max_rows or (view[0].workers and not view[0].workers.get(PACKED))):
        view = None
    m = view[0] if view is not None else Ledger.read(sweep_dir)
    assert isinstance(m, Ledger)
    adopted = adopt_trials(m) if view is None else []  # Optuna worker mode: trials started since it was written
    unfinished = [n for n in sorted(m.jobs) if not JobState.is_success(m.jobs[n].state)]
    n_jobs = view[1].n_jobs if view is not None else len(m.jobs)
    # Beyond `max_rows` jobs (0: no limit) the first `max_rows` of those that did not finish, the finished counted.
    shown = sorted(m.jobs) if max_rows <= 0 or n_jobs <= max_rows else unfinished[:max_rows]
    # A live driver records what ends (its journal is read with the manifest): the jobs shown are looked at again, the
    # others counted as it recorded them. Without one, the jobs shown and every job not finished are: a finished job's
    # record is replaced only by a resume, whose driver records it.
    nums = shown if driver is not None else sorted(set(shown) | set(unfinished))
    before = {n: (m.jobs[n].state, array_of(m.jobs[n])) for n in nums} if view is not None else {}
    changed, note = refresh(m, record=driver is None, nums=nums)
    changed += adopted
    if driver is None:  # with a live driver, it alone writes the sweep's records
        changed += m.settle_orphans() + settle_unclaimed(m)
        if changed:
            m.write(changed)
    if view is not None:  # the driver's counts, with what the look at the jobs shown found since
        counts, arrays = view[1].counts, view[1].arrays
        for n, (state, array) in before.items():
            for (s, a), step in (((state, array), -1), ((m.jobs[n].state, array_of(m.jobs[n])), 1)):
                counts[s] += step
                if a and JobState.is_live(s):
                    arrays[a] += step
        counts, arrays = +counts, +arrays
    else:
        counts = Counter(e.state for e in m.jobs.values())
        arrays = Counter(a for e in m.jobs.values() if JobState.is_live(e.state) and (a := array_of(e)))
    plan = read_rungs(Path(m.sweep_dir))  # a halving sweep's
    lines = [_table(m, live, shown, counts, n_jobs, plan),
             f"sweep directory: {m.sweep_dir} (launcher: {m.launcher})"] + ([note] if note else [])
    budget_at = len(lines)  # the budget's line goes here, once it is known whether the sweep has ended
    running = [e for e in m.jobs.values() if e.state == JobState.RUNNING and e.job_dir]
    if running:
        queued = counts[JobState.QUEUED]
        eta = sweep_eta_s([live.look(Path(e.job_dir)) for e in running], queued, len(running))
        if eta is not None:
            lines.append(f"ETA {format_duration(eta)} at the running jobs' pace ({len(running)} running, {queued} "
                         "queued)")
    if driver is not None:
        lines.append(f"a driver follows this sweep (pid {driver.get('pid')} on {driver.get('host')}, since "
                     f"{driver.get('since')}): it records what ends; this is a look, nothing was written.")
    n_live = sum(n for s, n in counts.items() if JobState.is_live(s))
    if n_live and m.launcher == "slurm":
        cancel = sorted(set(arrays) | set(m.workers.get("arrays") or {}), key=int)
        lines.append(f"{n_live} job(s) still queued or running in Slurm: look again with `sweepit status "
                     f"{m.sweep_dir}`; cancel with `scancel {' '.join(cancel)}`.")
    redo = sum(n for s, n in counts.items() if not JobState.is_live(s) and not JobState.is_settled(s))
    if plan is not None:  # a resume goes on with its rungs, from the decisions recorded
        if driver is None and not plan.ended({n: e.state for n, e in m.jobs.items()}):
            lines.append(f"the halving sweep stopped before its last rung ended: `sweepit resume {m.sweep_dir}` goes "
                         "on from there, and no job runs a rung twice.")
    elif redo:
        lines.append(f"{redo} job(s) did not complete: `sweepit resume {m.sweep_dir}` runs only those again.")
    workers = bool(m.workers) and m.launcher == "slurm" and workers_alive(m)
    if workers:
        ids = list(m.workers.get("ids") or [])
        worker_arrays = sorted({i.split("_", 1)[0] for i in ids}, key=int)
        what = "the sweep's jobs" if m.workers.get(PACKED) else "the study"
        lines.append(f"{len(ids)} {'packed' if m.workers.get(PACKED) else 'Optuna'} worker(s) of Slurm job(s) "
                     f"{' '.join(worker_arrays)} run {what}; cancel them with `scancel {' '.join(worker_arrays)}`.")
    going = bool(n_live) or driver is not None or workers
    # The last look of `--watch` waits for accounting to bill the runs that ended, as a driver's end does.
    spent = budget_line(Path(m.sweep_dir), settle_s=0 if going or not writes_report else END_SETTLE_S) \
        if m.launcher == "slurm" else None
    lines[budget_at:budget_at] = [spent] if spent else []
    if not going and not report_shows(Path(m.sweep_dir), m.jobs.values()):
        paths = SweepPaths(Path(m.sweep_dir))
        report_dir = paths.report
        if writes_report:
            lines.append(f"the sweep has ended: writing its report into {report_dir}/")
            return "\n".join(lines), going
        ended = ("the sweep has ended without a report (its config writes none: sweepit's summary callback is not "
                 "among its hydra.callbacks)"
                 if not paths.report_page.exists() and reports_at_end(Path(m.sweep_dir)) is False
                 else "the sweep has ended, without a report since (it ran detached, or was stopped)")
        lines.append(f"{ended}: `sweepit report {m.sweep_dir}` writes its tables and plots into {report_dir}/.")
    return "\n".join(lines), going
