"""`sweep.json`: which jobs a sweep launched, where, in which state, and the command that runs it again.

Every launcher (local workers, Slurm) writes the same manifest; each job's `result.json` stays the truth
about its outcome, so a resume asks the results, not the manifest, which jobs are done.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sweepit.errors import ManifestError
from sweepit.results._job_files import read_result

MANIFEST_FILE = "sweep.json"
MANIFEST_VERSION = 1

# A resume never runs these again: a diverged job is a result (same seed, same divergence), not an error.
FINISHED_STATUSES = ("completed", "diverged")
# Statuses that make a sweep exit non-zero (unless the launcher is told otherwise).
FAILED_STATUSES = ("failed", "interrupted")

# Overrides that a resume sets itself; any earlier value is dropped from the re-run command.
_RESUME_KEYS = ("hydra.sweep.dir", "hydra.launcher.resume")
_PLAIN_VALUE = re.compile(r"[\w./:@+-]+")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class JobEntry:
    num: int
    overrides: list[str]
    job_dir: str                     # absolute
    state: str = "queued"            # queued | running | not started | a result.json status
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
    created_at: str = field(default_factory=now_iso)
    updated_at: str = ""
    jobs: dict[int, JobEntry] = field(default_factory=dict)
    version: int = MANIFEST_VERSION

    def to_json(self) -> str:
        """Sweep fields, then one job per line: readable, and written fast (no indentation pass) on every
        job start and end."""
        head = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "jobs"}
        jobs = [json.dumps(_job_dict(self.jobs[n])) for n in sorted(self.jobs)]
        text = json.dumps(head, indent=1)[:-2]
        return text + ',\n "jobs": [\n  ' + ",\n  ".join(jobs) + "\n ]\n}\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"the manifest must be a JSON object, but is {type(data).__name__}")
        jobs = [JobEntry(**j) for j in data.pop("jobs", [])]
        return cls(**data, jobs={j.num: j for j in jobs})


def _job_dict(j: JobEntry) -> dict[str, Any]:
    return {"num": j.num, "overrides": j.overrides, "job_dir": j.job_dir, "state": j.state, "pid": j.pid,
            "started_at": j.started_at, "ended_at": j.ended_at, "extra": j.extra}


def manifest_path(sweep_dir: Path) -> Path:
    return Path(sweep_dir) / MANIFEST_FILE


def driver_argv() -> list[str]:
    """This process's command line, runnable from anywhere: the interpreter and the script made absolute."""
    script = sys.argv[0] if sys.argv else ""
    if script and script != "-c" and os.path.exists(script):
        script = os.path.abspath(script)
    return [sys.executable, script, *sys.argv[1:]]


def read_manifest(sweep_dir: Path) -> Manifest:
    path = manifest_path(sweep_dir)
    try:
        return Manifest.from_json(path.read_text())
    except FileNotFoundError:
        raise ManifestError(
            f"a sweep directory must hold {MANIFEST_FILE} to be resumed, but {path} does not exist; "
            "only sweeps run by sweepit's launchers (hydra/launcher=local or slurm) write it."
        ) from None
    except (ValueError, TypeError) as e:
        raise ManifestError(f"{path} must be a sweepit manifest, but it cannot be read: {e}") from e


def open_manifest(sweep_dir: Path, launcher: str, argv: list[str] | None = None) -> Manifest:
    """The manifest to update for this run: the existing one (its jobs kept) or a new one."""
    sweep_dir = Path(sweep_dir).absolute()
    argv = driver_argv() if argv is None else argv
    try:
        m = read_manifest(sweep_dir)
    except ManifestError:
        return Manifest(sweep_dir=str(sweep_dir), argv=argv, cwd=os.getcwd(), launcher=launcher)
    m.sweep_dir, m.argv, m.cwd, m.launcher = str(sweep_dir), argv, os.getcwd(), launcher
    return m


def write_manifest(m: Manifest) -> Path:
    """Atomic (temporary file and rename) but not fsynced: it is rewritten often, and results stay the truth."""
    m.updated_at = now_iso()
    path = manifest_path(Path(m.sweep_dir))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(m.to_json())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; others on a shared machine may follow the sweep
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def result_status(job_dir: Path) -> str | None:
    """The status in the job's `result.json`; None when it has none or it cannot be read."""
    try:
        result = read_result(Path(job_dir))
    except ValueError:
        return None
    return None if result is None else str(result.get("status"))


def is_finished(job_dir: Path) -> bool:
    """True when a resume must skip the job: its result says completed (or diverged)."""
    return result_status(job_dir) in FINISHED_STATUSES


def unfinished_jobs(m: Manifest) -> list[JobEntry]:
    """Jobs a resume would run again, in job-number order."""
    return [m.jobs[n] for n in sorted(m.jobs) if not is_finished(Path(m.jobs[n].job_dir))]


def _override_key(arg: str) -> str:
    return arg.split("=", 1)[0].lstrip("+~") if "=" in arg else ""


def hydra_quote(value: str) -> str:
    """A value for a Hydra override: quoted when it holds characters the override grammar gives meaning to."""
    if _PLAIN_VALUE.fullmatch(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def rerun_argv(argv: list[str], sweep_dir: Path) -> list[str]:
    """`argv` as a multirun into `sweep_dir` with `hydra.launcher.resume=true`, earlier such values dropped."""
    head, args = argv[:2], [a for a in argv[2:] if _override_key(a) not in _RESUME_KEYS]
    if not any(a in ("-m", "--multirun") for a in args):
        args.insert(0, "-m")
    return [*head, *args, f"hydra.sweep.dir={hydra_quote(str(Path(sweep_dir).absolute()))}",
            "hydra.launcher.resume=true"]


def resume_command(sweep_dir: Path) -> list[str]:
    """The argv that runs the sweep in `sweep_dir` again, skipping finished jobs (run it in `Manifest.cwd`)."""
    m = read_manifest(sweep_dir)
    return rerun_argv(m.argv, Path(m.sweep_dir))


def command_line(argv: list[str], cwd: str | None = None) -> str:
    """A shell line for `argv`, prefixed with `cd CWD &&` when it must run elsewhere than here."""
    line = shlex.join(argv)
    if cwd is not None and os.path.abspath(cwd) != os.getcwd():
        line = f"cd {shlex.quote(cwd)} && {line}"
    return line
