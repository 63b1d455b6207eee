"""`sweepit clean DIR`: free the disk a finished sweep's weights take, keeping the best job's (docs/results.md says
what goes); a failed or interrupted job's checkpoint stays, since `sweepit resume` continues from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sweepit.errors import SweepitError
from sweepit.results._lock import SweepLock, describe_holder
from sweepit.results._paths import WEIGHT_FILES, JobPaths
from sweepit.results._status import JobState, sweep_direction
from sweepit.results._summary import best_row, collect
from sweepit.results._summary import size_text as _mb


@dataclass
class Cleaned:
    deleted: list[tuple[Path, int]] = field(default_factory=list)   # path, bytes
    kept: list[tuple[Path, int]] = field(default_factory=list)      # the best job's weights
    best_job: int | None = None

    def lines(self, dry_run: bool) -> list[str]:
        freed = sum(n for _, n in self.deleted)
        verb = "would delete" if dry_run else "deleted"
        out = [f"{verb} {len(self.deleted)} files, {_mb(freed)}"
               + (f": {', '.join(sorted({p.name for p, _ in self.deleted}))}" if self.deleted else "")]
        if self.kept:
            out.append(f"kept the best job's ({self.best_job}): "
                       + ", ".join(f"{p.parent.name}/{p.name} ({_mb(n)})" for p, n in self.kept))
        return out


def clean(sweep_dir: Path, keep_best: bool = True, dry_run: bool = False) -> Cleaned:
    sweep_dir = Path(sweep_dir)
    holder = SweepLock(sweep_dir).holder()
    if holder is not None:
        raise SweepitError("sweepit clean runs on a sweep that has ended, since its best job may still change; "
                           + describe_holder(holder, sweep_dir))
    rows = collect(sweep_dir)
    if not rows:
        raise SweepitError(f"a sweep directory must hold job directories (<num>_<overrides>/), but {sweep_dir} holds "
                           "none; list sweeps with `sweepit ls`.")
    best = best_row(rows, sweep_direction(sweep_dir, (r.result.get("direction") for r in rows))) if keep_best else None
    out = Cleaned(best_job=None if best is None else best.num)
    for row in rows:
        paths, names = JobPaths(row.job_dir), [n for n in WEIGHT_FILES if (row.job_dir / n).is_file()]
        if JobState.is_success(row.status):  # the checkpoint, and each rank's random states beside it
            names += [p.name for p in (paths.checkpoint, *paths.rank_states()) if p.is_file()]
        for name in names:
            path = row.job_dir / name
            entry = (path, path.stat().st_size)
            if best is not None and row.num == best.num and name in WEIGHT_FILES:
                out.kept.append(entry)
            else:
                out.deleted.append(entry)
    if not dry_run:
        for path, _ in out.deleted:
            path.unlink(missing_ok=True)
    return out
