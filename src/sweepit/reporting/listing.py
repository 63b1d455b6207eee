"""`sweepit ls`: every sweep under a directory, newest first, with its counts by status and best job."""

from __future__ import annotations

import os
from pathlib import Path

from sweepit.errors import SweepitError
from sweepit.reporting._report_data import Sweep, load_sweep
from sweepit.results import JobPaths, SweepPaths, aligned, default_direction_line, job_num

# outputs/<study>/<timestamp>/ is two levels down; a little more for hand-made layouts.
_MAX_DEPTH = 4
_SKIP = {JobPaths.hydra.name, SweepPaths.report.name, ".git", "runs"}
_DEFAULT = " *"  # marks a best judged in the default direction, which a line under the listing explains


def is_sweep(path: Path) -> bool:
    """A directory Hydra's sweeper or sweepit's launchers wrote: multirun.yaml or sweep.json, or job directories."""
    if SweepPaths(path).multirun.is_file() or SweepPaths(path).manifest.is_file():
        return True
    try:
        return any(e.is_dir() and job_num(Path(e.name)) is not None
                   and os.path.isdir(os.path.join(e.path, JobPaths.hydra)) for e in os.scandir(path))
    except OSError:
        return False


def find_sweeps(root: Path, depth: int = 0) -> list[Path]:
    """Sweep directories at or under `root` (not inside another sweep), `_MAX_DEPTH` levels down at most."""
    if is_sweep(Path(root)):
        return [Path(root)]
    if depth == _MAX_DEPTH:
        return []
    try:
        children = sorted(e.path for e in os.scandir(root) if e.is_dir() and e.name not in _SKIP)
    except OSError:
        return []
    return [s for child in children for s in find_sweeps(Path(child), depth + 1)]


def sweep_folder(path: Path, run: str, many: bool = False) -> Path:
    """`path` when it is a sweep folder (with `many`, also a folder with sweeps under it); else the one error that
    every command gives a wrong folder, naming the folder to pass instead. `run` is the command, `{}` for the folder."""
    path = Path(path)
    takes = (f"`{run.format('DIR')}` takes a sweep folder (one holding multirun.yaml, sweep.json or job folders "
             f"<num>_<overrides>/){' or a folder with sweeps under it' if many else ''}")
    if not path.is_dir():
        raise SweepitError(f"{takes}, but {path} {'is a file' if path.exists() else 'does not exist'}.\n"
                           "List the sweeps under a folder with `sweepit ls <folder>`.")
    if is_sweep(path):
        return path
    whole = path.absolute()
    num = job_num(whole)
    if num is not None and is_sweep(whole.parent):
        raise SweepitError(f"{takes}, but {path} is job {num} of the sweep {_shown(whole.parent)}.\n"
                           f"Run `{run.format(_shown(whole.parent))}`.")
    found = find_sweeps(path)
    if found and many:
        return path
    if found:
        newest = max(found, key=_started)
        raise SweepitError(f"{takes}, but {path} holds {len(found)} sweep(s) under it.\n"
                           f"Pass one of them: `{run.format(_shown(newest))}` (the newest); `sweepit ls {path}` "
                           "lists them all.")
    raise SweepitError(f"{takes}, but {path} holds none, nor any sweep under it.\n"
                       "List the sweeps under a folder with `sweepit ls <folder>` (sweeps go to outputs/, or to "
                       "Hydra's multirun/, in the folder the app ran in).")


def _started(sweep_dir: Path) -> float:
    """When the sweep began, from Hydra's multirun.yaml (written then), else its folder."""
    multirun = SweepPaths(sweep_dir).multirun
    return (multirun if multirun.is_file() else sweep_dir).stat().st_mtime


def _shown(path: Path) -> str:
    """A path relative to the working folder when it is under it, else as it is."""
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel


def _row(sweep: Sweep) -> list[str]:
    best = sweep.best
    mark = _DEFAULT if sweep.direction_default else ""
    best_text = "-" if best is None else f"{sweep.metric}={best.objective:.4g}{mark}"
    overrides = "" if best is None or not sweep.swept else sweep.typed_swept(best)
    return [_shown(sweep.sweep_dir), sweep.study,
            f"{sweep.created_at.astimezone():%Y-%m-%d %H:%M}", sweep.counts_line(), best_text, overrides]


def list_sweeps(root: Path) -> list[Sweep]:
    """The sweeps under `root`, newest first (metrics.jsonl is not read: counts and results are enough)."""
    sweeps = [load_sweep(p, with_metrics=False) for p in find_sweeps(root)]
    return sorted(sweeps, key=lambda s: s.created_at, reverse=True)


def format_listing(sweeps: list[Sweep]) -> str:
    header = ["sweep", "study", "started", "jobs", "best", "best overrides"]
    lines = aligned(header, [_row(s) for s in sweeps], rule=False)
    if any(s.direction_default and s.best is not None for s in sweeps):
        lines.append("*: " + default_direction_line("value").removeprefix("warning: "))
    return "\n".join(lines)
