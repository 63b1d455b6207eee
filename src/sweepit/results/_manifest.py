"""`sweep.json`: which jobs a sweep launched, where, in which state, and the command that runs it again. Each job's
`result.json` stays the truth about its outcome, so a resume asks the results which jobs are done. The jobs that
changed since it was written whole are in `sweep.journal` (`_journal`), which every reader here folds in."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any, Protocol

from sweepit._files import atomic_file, collector_paused
from sweepit._host import now_iso
from sweepit.errors import ManifestError
from sweepit.results._job_files import error_line, read_record
from sweepit.results._journal import Journal, append_records, compact_now, read_journal, start_journal
from sweepit.results._live import LIVE_ROWS, Live, Tally, read_live, write_live
from sweepit.results._overrides import override_key, shell_line
from sweepit.results._paths import MANIFEST_FILE, JobPaths, SweepPaths
from sweepit.results._records import DEFAULTS_KEY, RecordCodec, choose_defaults
from sweepit.results._status import JobState, counts_text

MANIFEST_VERSION = 3  # 2: `generation`, continued by sweep.journal; 3: records in `_records`' layout

# Overrides that a resume sets itself; any earlier value is dropped from the re-run command.
_RESUME_KEYS = ("hydra.sweep.dir", "hydra.launcher.resume")
_PLAIN_VALUE = re.compile(r"[\w./:@+-]+")
_MAX_LISTED = 10  # failed jobs named one by one in the error that ends a sweep


@dataclass(slots=True)  # slots: 100,000 of them in a large sweep's driver
class JobEntry:
    num: int
    overrides: list[str]
    job_dir: str                     # absolute
    state: str = JobState.QUEUED        # queued | running | not started | a result.json status
    pid: int | None = None
    started_at: str | None = None    # ISO 8601, UTC
    ended_at: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # launcher-specific: exit code, Slurm job id, ...


@dataclass
class Manifest:
    sweep_dir: str                   # absolute
    argv: list[str]                  # the driver's command line: Python, the app script, its arguments
    cwd: str                         # where that command ran (relative paths in it start there)
    launcher: str                    # "local", "slurm", ...
    env: dict[str, str] = field(default_factory=dict)  # what the jobs took from the driver's environment (DRIVER_ENV)
    created_at: str = field(default_factory=now_iso)
    updated_at: str = ""
    jobs: dict[int, JobEntry] = field(default_factory=dict)
    generation: int = 0              # how often it was written whole; sweep.journal continues this one
    version: int = MANIFEST_VERSION
    workers: dict[str, Any] = field(default_factory=dict)  # Optuna worker mode on Slurm: the workers' array
    # Where the file on disk stands, when this copy is what it holds: appending the changes is then enough.
    _disk: _OnDisk | None = field(default=None, init=False, repr=False, compare=False)

    def codec(self) -> RecordCodec:
        """The layout of this manifest's records when written whole now (what they share chosen afresh)."""
        return RecordCodec(self.sweep_dir, choose_defaults(self.jobs))

    def write_json(self, out: IO[str], codec: RecordCodec | None = None) -> int:
        """Sweep fields, then one job per line (no indentation pass), into `out` one job at a time (a large sweep's
        text is never in memory at once); returns the characters written (all ASCII: the bytes)."""
        codec = codec or self.codec()
        head = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "jobs" and f.compare}  # (no lock)
        head[DEFAULTS_KEY] = {"state": codec.shared_state, "extra": codec.extra}
        n = out.write(json.dumps(head, indent=1)[:-2] + ',\n "jobs": [')
        separator = "\n  "
        for num in sorted(self.jobs):
            n += out.write(separator + json.dumps(codec.encode(self.jobs[num])))
            separator = ",\n  "
        return n + out.write("\n ]\n}\n")


@dataclass
class _OnDisk:
    snapshot_bytes: int
    journal_bytes: int
    codec: RecordCodec               # the layout of the snapshot's records, which its journal continues
    tally: Tally | None = None       # its counts (`_live`), made at the first write that needs them


def driver_argv() -> list[str]:
    """This process's command line, runnable from anywhere: the interpreter and the script made absolute."""
    script = sys.argv[0] if sys.argv else ""
    if script and script != "-c" and os.path.exists(script):
        script = os.path.abspath(script)
    return [sys.executable, script, *sys.argv[1:]]


_JOBS_LINE = b' "jobs": ['  # where `Manifest.write_json`'s sweep fields end and its one-job-a-line list begins


def _read_snapshot(sweep_dir: Path, head_only: bool = False) -> tuple[dict[str, Any], Iterator[dict[str, Any]], int]:
    """sweep.json's sweep fields, its job records as written (one at a time, in job order; none with `head_only`, which
    reads the sweep fields alone) and its size. A file not in `write_json`'s layout is read whole."""
    # Left open for the jobs' generator: they are read from the file the head came from, though a driver may
    # replace sweep.json in the meantime.
    f = open(SweepPaths(sweep_dir).manifest, "rb")  # noqa: SIM115
    try:
        size = os.fstat(f.fileno()).st_size
        head_lines: list[bytes] = []
        for line in f:
            if line.rstrip(b"\n") == _JOBS_LINE:
                head = json.loads(b"".join(head_lines).rstrip().rstrip(b",") + b"}")
                if head_only:
                    f.close()
                    return head, iter(()), size
                return head, _job_lines(f), size
            head_lines.append(line)
        f.close()
        head = json.loads(b"".join(head_lines))
        if not isinstance(head, dict):
            raise ValueError(f"the manifest must be a JSON object, but is {type(head).__name__}")
        listed = head.pop("jobs", None)  # (one written otherwise may be in any order)
        return head, iter(sorted((j for j in (listed if isinstance(listed, list) else ()) if _is_job(j)),
                                 key=lambda j: j["num"])), size
    except BaseException:
        f.close()
        raise


def _codec(head: dict[str, Any]) -> RecordCodec:
    """The layout of the records under sweep fields `head`."""
    defaults = head.pop(DEFAULTS_KEY, None)
    return RecordCodec(str(head.get("sweep_dir") or ""), defaults if isinstance(defaults, dict) else {})


def read_manifest_data(sweep_dir: Path
                       ) -> tuple[dict[str, Any], Iterator[dict[str, Any]], int, Journal, RecordCodec]:
    """The one reader of sweep.json: its sweep fields, its job records one at a time in job order with the journal's
    folded in (a large sweep's jobs are never all held at once), each whole, the snapshot's size, the journal read
    and the layout its records are written in."""
    head, jobs, size = _read_snapshot(sweep_dir)
    codec = _codec(head)
    journal = read_journal(sweep_dir, head.get("generation", 0))
    if journal.updated_at:
        head["updated_at"] = journal.updated_at
    merged = _merged(jobs, {job["num"]: job for job in journal.records})
    return head, map(codec.decode, merged), size, journal, codec


def iter_manifest(sweep_dir: Path) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
    """sweep.json's sweep fields and job records (`read_manifest_data`); ({}, nothing) when sweep.json is missing or
    cannot be read: it is optional to the tables, and a damaged one is `sweepit status`'s to explain."""
    try:
        head, jobs, *_ = read_manifest_data(sweep_dir)
    except (OSError, ValueError):
        return {}, iter(())
    return head, jobs


def _is_job(job: Any) -> bool:
    return isinstance(job, dict) and isinstance(job.get("num"), int)


def _job_lines(f: IO[bytes]) -> Iterator[dict[str, Any]]:
    """The jobs of `write_json`'s one-job-a-line list; a line that is not a job's record is skipped."""
    with f:
        for line in f:
            try:
                job = json.loads(line.strip().rstrip(b","))
            except ValueError:
                continue
            if _is_job(job):
                yield job


def _merged(jobs: Iterator[dict[str, Any]], journal: dict[int, dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The snapshot's jobs (in job order) with the journal's records in their place, and the jobs only the journal
    has among them, in job order."""
    only_journal = iter(sorted(journal))
    later = next(only_journal, None)
    for job in jobs:
        while later is not None and later < job["num"]:  # passed in the snapshot: the journal's alone
            if later in journal:
                yield journal.pop(later)
            later = next(only_journal, None)
        yield journal.pop(job["num"], job)
    yield from (journal[n] for n in sorted(journal))


def read_manifest(sweep_dir: Path, kind: type[Manifest] = Manifest) -> Manifest:
    """sweep.json, as a `kind` (a `Ledger`, for a reader that records what it finds)."""
    path = SweepPaths(sweep_dir).manifest
    sweep_dir = Path(sweep_dir).absolute()
    try:
        with collector_paused():  # 100,000 job records
            data, jobs, snapshot_bytes, journal, codec = read_manifest_data(sweep_dir)
            entries = {job["num"]: JobEntry(**job) for job in jobs}
            m = kind(**data, jobs=entries)
    except FileNotFoundError:
        raise ManifestError(
            f"a sweep directory must hold {MANIFEST_FILE} for `sweepit status` and `sweepit resume`, but {path} does "
            "not exist; only sweeps run by sweepit's launchers (hydra/launcher=local or slurm) write it. "
            f"`sweepit summary {sweep_dir}` and `sweepit report {sweep_dir}` read the results of any sweep."
        ) from None
    except (ValueError, TypeError) as e:
        raise ManifestError(f"{path} must be a sweepit manifest, but it cannot be read: {e}") from e
    if journal.appendable and Path(m.sweep_dir) == sweep_dir:
        m._disk = _OnDisk(snapshot_bytes, journal.n_bytes, codec)
    elif Path(m.sweep_dir) != sweep_dir:  # moved or copied since: its paths (job folders, Slurm logs) are here now
        moved = rerooter(m.sweep_dir, sweep_dir)  # (its next write is whole: the paths on disk are the old ones)
        m.sweep_dir = str(sweep_dir)
        for entry in m.jobs.values():
            entry.job_dir = moved(entry.job_dir)
            entry.extra = {k: moved(v) for k, v in entry.extra.items()}
    return m


def rerooter(recorded_sweep_dir: Any, sweep_dir: Path) -> Callable[[Any], Any]:
    """Where a path recorded under `recorded_sweep_dir` is now that the sweep (moved or copied) is in `sweep_dir`;
    any other value as it is."""
    old = str(recorded_sweep_dir or "")
    if not old or Path(old) == Path(sweep_dir).absolute():
        return lambda path: path

    def moved(path: Any) -> Any:
        if isinstance(path, str) and (path == old or path.startswith(old.rstrip("/") + "/")):
            return str(Path(sweep_dir).absolute() / os.path.relpath(path, old))
        return path

    return moved


def write_manifest(m: Manifest, changed: Iterable[int] | None = None) -> Path:
    """Record the manifest: the jobs `changed` since it was last written or read, appended to the journal; the whole
    manifest when `changed` is None, when the journal is due to be compacted, or when this copy is not what is on
    disk. Not fsynced (the jobs' results stay the truth); every write leaves the manifest readable."""
    m.updated_at = now_iso()
    sweep_dir = Path(m.sweep_dir)
    disk = m._disk
    if changed is not None and disk is not None and not compact_now(disk.journal_bytes, disk.snapshot_bytes):
        nums = [n for n in sorted(set(changed)) if n in m.jobs]
        if not nums:
            return SweepPaths(sweep_dir).manifest
        texts = [json.dumps(disk.codec.encode(m.jobs[n])) for n in nums]
        n_bytes = append_records(sweep_dir, texts, m.updated_at)
        if n_bytes is not None:
            disk.journal_bytes += n_bytes
            _keep_live(m, disk, dict(zip(nums, texts, strict=True)))
            return SweepPaths(sweep_dir).manifest
    m.generation, m.version = m.generation + 1, MANIFEST_VERSION
    before = disk.tally if disk is not None else None
    m._disk = None  # until both files are written
    path = SweepPaths(sweep_dir).manifest
    codec = m.codec()
    with atomic_file(path, fsync=False) as out:
        size = m.write_json(out, codec)
    m._disk = _OnDisk(size, start_journal(sweep_dir, m.generation), codec)
    _keep_live(m, m._disk, None, before)
    return path


def _keep_live(m: Manifest, disk: _OnDisk, changed: dict[int, str] | None, before: Tally | None = None) -> None:
    """`sweep.live.json` brought up to date with the records just written (`changed`: each as written; None: all of
    them, `before` the count of the snapshot before), for a sweep with more jobs than `sweepit status` lists (a
    smaller one is read whole at no cost)."""
    if len(m.jobs) <= LIVE_ROWS:
        if before is not None:
            before.close()
        return
    if disk.tally is None or changed is None:
        disk.tally = Tally(m.jobs)
        disk.tally.take_file(before)
    else:
        disk.tally.update(m.jobs, changed)
    write_live(Path(m.sweep_dir), m.generation, disk.journal_bytes, disk.tally, m.jobs, disk.codec, m.updated_at)


def read_live_manifest(sweep_dir: Path, kind: type[Manifest] = Manifest) -> tuple[Manifest, Live] | None:
    """The manifest with only the jobs `sweep.live.json` lists, and what it counts, when it describes the records
    on disk now; None otherwise (then `read_manifest` reads every record)."""
    sweep_dir = Path(sweep_dir).absolute()
    try:
        head, _, _ = _read_snapshot(sweep_dir, head_only=True)
        codec = _codec(head)
        live = read_live(sweep_dir, head.get("generation", 0), codec)
        if live is None or Path(str(head.get("sweep_dir"))) != sweep_dir:
            return None
        head["updated_at"] = live.updated_at or head.get("updated_at", "")
        m = kind(**head, jobs={job["num"]: JobEntry(**job) for job in live.jobs})
    except (OSError, ValueError, TypeError):
        return None
    return m, live


def hydra_quote(value: str) -> str:
    """A value for a Hydra override: quoted when it holds characters the override grammar gives meaning to."""
    if _PLAIN_VALUE.fullmatch(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def rerun_argv(argv: list[str], sweep_dir: Path, extra: Sequence[str] = ()) -> list[str]:
    """`argv` as a multirun into `sweep_dir` with `hydra.launcher.resume=true` and the overrides `extra`, earlier
    values of those keys dropped."""
    keys = {*_RESUME_KEYS, *(override_key(a) for a in extra)}
    head, args = argv[:2], [*(a for a in argv[2:] if override_key(a) not in keys), *extra]
    if not any(a in ("-m", "--multirun") for a in args):
        args.insert(0, "-m")
    return [*head, *args, f"hydra.sweep.dir={hydra_quote(str(Path(sweep_dir).absolute()))}",
            "hydra.launcher.resume=true"]


def command_line(argv: list[str], cwd: str | None = None, env: dict[str, str] | None = None) -> str:
    """A shell line for `argv` with `env` set for it (a manifest's), prefixed with `cd CWD &&` when it must run
    elsewhere than here."""
    line = shell_line(argv, env or {})
    if cwd is not None and os.path.abspath(cwd) != os.getcwd():
        line = f"cd {shlex.quote(cwd)} && {line}"
    return line


class LaunchedJob(Protocol):
    num: int
    overrides: list[str]
    job_dir: Path


def failure_report(manifest: Manifest, jobs: Sequence[LaunchedJob], skipped: set[int], stop_signal: int | None,
                   fail_on_error: bool) -> str | None:
    """The message of the error that ends a sweep with failures (which jobs, their errors and logs, how to resume),
    or None when it ends cleanly: each job's state is the manifest's. `skipped`: jobs a resume found finished before."""
    statuses = {j.num: e.state if (e := manifest.jobs.get(j.num)) else JobState.NOT_STARTED for j in jobs}
    bad = [j for j in jobs if JobState.is_failure(statuses[j.num])]
    # Every reader of the sweep finds a job's record in the folder recorded for it: one ended there without it
    # (the folder moved or deleted since, by the app or by hand) is as good as failed.
    lost = [j for j in jobs if JobState.is_success(statuses[j.num]) and j.num not in skipped
            and not JobPaths(j.job_dir).result.exists()]
    if stop_signal is None and (not (bad or lost) or not fail_on_error):
        return None
    if stop_signal is not None:  # the jobs the stop interrupted need no line each: the stop is their error
        bad = [j for j in bad if statuses[j.num] != JobState.INTERRUPTED]
    tally = counts_text(Counter("finished before" if j.num in skipped else statuses[j.num] for j in jobs))
    if stop_signal is not None:
        lines = [f"sweep stopped by {signal.Signals(stop_signal).name}: {tally} (of {len(jobs)} jobs launched); what "
                 "finished is kept."]
    else:
        heads = ([f"{len(bad)} of {len(jobs)} jobs failed or were interrupted"] if bad else []) + (
            [f"{len(lost)} of {len(jobs)} jobs ended without their result.json in the folder recorded for them"]
            if lost else [])
        lines = [f"{'; '.join(heads)} ({tally}):"]
    for j in bad[:_MAX_LISTED]:
        what = error_line(read_record(j.job_dir).error) or "no error recorded"
        lines.append(f"  job {j.num} [{' '.join(j.overrides)}]: {statuses[j.num]}: {what}")
        lines.append(f"    logs: {JobPaths(j.job_dir).stderr}")
    if len(bad) > _MAX_LISTED:
        lines.append(f"  ... and {len(bad) - _MAX_LISTED} more (see the table above).")
    for j in lost[:_MAX_LISTED]:
        lines.append(f"  job {j.num} [{' '.join(j.overrides)}]: {statuses[j.num]}, but {JobPaths(j.job_dir).result} "
                     "is gone (its folder was moved or deleted since); a resume runs it again")
    if len(lost) > _MAX_LISTED:
        lines.append(f"  ... and {len(lost) - _MAX_LISTED} more (see the table above).")
    sweep_dir = Path(manifest.sweep_dir)
    lines += [
        f"Resume (finished jobs are skipped): sweepit resume {sweep_dir}",
        f"  which runs: {command_line(rerun_argv(manifest.argv, sweep_dir), manifest.cwd, manifest.env)}",
    ]
    if stop_signal is None:
        lines.append("Set hydra.launcher.fail_on_error=false to end with exit status 0 despite failed jobs.")
    return "\n".join(lines)
