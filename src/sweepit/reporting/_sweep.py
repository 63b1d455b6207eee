"""A sweep directory read for reporting: summary's job rows plus per-epoch metrics, states and the sweep's config.

Nothing here raises on a broken job: a missing or corrupt file becomes a note in that job's row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import Any

from sweepit._files import collector_paused
from sweepit.results._job_files import METRICS_FILE, job_num, read_metrics, total_wall_time_s
from sweepit.results._manifest import read_manifest_data
from sweepit.results._overrides import app_script, config_source, load_yaml, own_key, typed_overrides
from sweepit.results._status import sweep_direction
from sweepit.results._summary import (
    JobRow,
    best_row,
    fixed_overrides,
    job_dirs,
    override_values,
    read_overrides,
    swept_keys,
    with_result,
)

# Up to this many jobs every metrics.jsonl is read (a bad line is a note in its job's row). Beyond, only those of
# jobs whose result.json lacks what the report takes from them (final metrics, mean epoch time) and of the jobs a
# learning-curve plot draws: a 100,000-job sweep's two million metrics lines are not read to draw 200 curves.
READ_ALL_METRICS_UP_TO = 2000
METRICS_DRAWN = 200  # the learning curves' cap (plots.MAX_CURVES)


def finite(value: Any) -> float | None:
    """`value` as a float when it is a finite number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass
class JobReport(JobRow):
    """summary's JobRow with what a report adds: the per-epoch rows of `metrics.jsonl`."""

    epochs: list[dict[str, Any]] = field(default_factory=list)
    _n_gpus: int | None = field(default=None, init=False, repr=False, compare=False)

    def add_note(self, note: str) -> None:
        self.note = f"{self.note}; {note}" if self.note else note

    @property
    def n_epochs(self) -> int:
        done = self.result.get("epochs_completed")
        return done if isinstance(done, int) else len(self.epochs)

    @property
    def last(self) -> dict[str, Any]:
        """Final metrics: `result.json`'s `final`, else the last epoch logged so far."""
        return self.final or (self.epochs[-1] if self.epochs else {})

    @property
    def epoch_time_s(self) -> float | None:
        """Mean epoch time, the first (warm-up) epoch left out when there are more: result.json's
        `epoch_time_s_mean` (the same mean, as the job computed it), else from its epochs."""
        recorded = finite(self.result.get("epoch_time_s_mean"))
        if recorded is not None:
            return recorded
        times = [t for t in (finite(r.get("epoch_time_s")) for r in self.epochs) if t is not None]
        if len(times) > 1:
            times = times[1:]
        if times:
            return sum(times) / len(times)
        return finite(self.last.get("epoch_time_s"))

    @property
    def wall_time_s(self) -> float | None:
        """Over all the job's attempts (a resumed job's GPU-hours are those of every run)."""
        return finite(total_wall_time_s(self.result))

    @property
    def n_gpus(self) -> int:
        """`world_size` from result.json; else `trainer.gpus` from the job's config (a launcher's result lacks it,
        read once)."""
        gpus = self.result.get("world_size")
        if isinstance(gpus, int):
            return gpus if gpus > 0 else 1
        if self._n_gpus is None:
            self._n_gpus = self._configured_gpus()
        return self._n_gpus

    def _configured_gpus(self) -> int:
        config = load_yaml(self.job_dir / ".hydra" / "config.yaml")
        trainer = config.get("trainer") if isinstance(config, dict) else None
        gpus = trainer.get("gpus") if isinstance(trainer, dict) else None
        return gpus if isinstance(gpus, int) and gpus > 0 else 1

    @property
    def gpu_hours(self) -> float | None:
        wall = self.wall_time_s
        return None if wall is None else self.n_gpus * wall / 3600

    @property
    def best_epoch(self) -> int | None:
        best = self.result.get("best_epoch")
        return best if isinstance(best, int) else None

    @property
    def label(self) -> str:
        return f"job {self.num}"


@dataclass
class Sweep:
    sweep_dir: Path
    jobs: list[JobReport]
    study: str
    metric: str
    direction: str                    # maximize | minimize
    created_at: datetime              # from sweep.json, else the sweep directory's files
    swept: list[str]                  # override keys whose value differs between jobs
    fixed: dict[str, str]             # overrides every job shares
    config_name: str = "config"       # Hydra's --config-name (a study file of sweeps/ or the root config)
    config_dir: str | None = None     # Hydra's --config-dir, relative to where the sweep ran when inside it
    launcher: str = ""
    script: str = "train.py"          # the app the sweep ran (sweep.json's command), relative to where it ran
    job_config: dict[str, Any] = field(default_factory=dict)  # the first job's .hydra/config.yaml

    @cached_property
    def best(self) -> JobReport | None:
        """The best job (computed once: a report asks for it in every section)."""
        best = best_row(list(self.jobs), self.direction)
        return best if isinstance(best, JobReport) else None

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for job in self.jobs:
            counts[job.status] = counts.get(job.status, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def counts_line(self) -> str:
        return f"{len(self.jobs)} jobs: " + ", ".join(f"{n} {s}" for s, n in self.counts.items())

    def job_label(self, job: JobReport, width: int = 60, short: bool = False) -> str:
        """The job's swept overrides, `key=value` joined, shortened to `width` characters; `short`: numbers to 4
        significant digits (a legend's labels: Optuna samples 17-digit floats)."""
        text = " ".join(f"{k}={_short(job.overrides.get(k, '')) if short else job.overrides.get(k, '')}"
                        for k in self.swept) or job.label
        return text if len(text) <= width else text[: width - 1] + "…"


    def typed_swept(self, job: JobReport) -> str:
        """The job's swept overrides as they were typed (`+model.hidden=64`: pasteable), else its label."""
        swept = set(self.swept)
        return " ".join(o for o in typed_overrides(job.job_dir) if own_key(o) in swept) or self.job_label(job, 200)


def _short(value: str) -> str:
    """`0.0148442769549417` -> `0.01484`; other values as they are."""
    try:
        number = float(value)
    except ValueError:
        return value
    short = f"{number:.4g}"
    return short if len(short) < len(value) else value


def _manifest_jobs(sweep_dir: Path) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    """sweep.json's jobs by number (its journal folded in) and its top level; empty when absent or unreadable
    (it is optional)."""
    try:
        data, _, _ = read_manifest_data(sweep_dir)
    except (OSError, ValueError):
        return {}, {}
    jobs = data.get("jobs")
    entries = jobs.values() if isinstance(jobs, dict) else jobs if isinstance(jobs, list) else []
    out = {int(e["num"]): e for e in entries if isinstance(e, dict) and isinstance(e.get("num"), int)}
    return out, data


def _read_job(job_dir: Path, entry: dict[str, Any] | None, with_metrics: bool) -> JobReport:
    # sweep.json's overrides when it lists the job: a YAML parse a job saved (the same values: the launcher's).
    listed = entry.get("overrides") if entry else None
    overrides = override_values(str(item) for item in listed) if isinstance(listed, list) and listed else None
    num = job_num(job_dir)
    if overrides is None:
        overrides = read_overrides(job_dir)
    job = with_result(JobReport(num=-1 if num is None else num, job_dir=job_dir, overrides=overrides,
                                status="pending"))
    if not job.overrides and not (job_dir / ".hydra" / "overrides.yaml").is_file():
        job.add_note("no .hydra/overrides.yaml")
    if with_metrics:
        _read_epochs(job)
    if job.status == "pending":  # no result.json: the launcher's manifest knows whether it runs or waits
        state = str(entry.get("state", "")) if entry else ""
        job.status = state or "running"
        if state not in ("", "queued", "running", "not started", "skipped"):
            job.add_note("no result.json")
    return job


def _read_epochs(job: JobReport) -> None:
    try:
        job.epochs, notes = read_metrics(job.job_dir)
    except (OSError, ValueError) as e:
        notes = [f"{METRICS_FILE} unreadable: {e}"]
    for note in notes[:3]:
        job.add_note(note)
    if len(notes) > 3:
        job.add_note(f"{len(notes) - 3} more bad lines in {METRICS_FILE}")


def _read_needed_epochs(jobs: list[JobReport], direction: str) -> None:
    """A large sweep's metrics.jsonl files that the report needs (see READ_ALL_METRICS_UP_TO)."""
    sign = -1.0 if direction == "maximize" else 1.0
    best = sorted((j for j in jobs if finite(j.objective) is not None), key=lambda j: sign * (j.objective or 0.0))
    needed = {id(j) for j in best[:METRICS_DRAWN]}
    for job in jobs:
        if id(job) in needed or not job.final or finite(job.result.get("epoch_time_s_mean")) is None:
            _read_epochs(job)


def _queued_job(entry: dict[str, Any]) -> JobReport:
    """A job the manifest lists but that has no directory yet."""
    overrides = override_values(str(item) for item in entry.get("overrides") or [])
    return JobReport(num=int(entry["num"]), job_dir=Path(str(entry.get("job_dir", ""))), overrides=overrides,
                     status=str(entry.get("state") or "queued"))


def _created_at(sweep_dir: Path, manifest: dict[str, Any]) -> datetime:
    stamp = manifest.get("created_at")
    if isinstance(stamp, str):
        try:
            moment = datetime.fromisoformat(stamp)
            return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
        except ValueError:
            pass
    for path in (sweep_dir / "multirun.yaml", sweep_dir):
        try:
            return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)
        except OSError:
            continue
    return datetime.fromtimestamp(0, tz=timezone.utc)


def load_sweep(sweep_dir: Path, with_metrics: bool = True) -> Sweep:
    """Every job of the sweep (job directories, plus jobs sweep.json lists that have none yet), in job order."""
    with collector_paused():
        return _load_sweep(Path(sweep_dir), with_metrics)


def _load_sweep(sweep_dir: Path, with_metrics: bool) -> Sweep:
    entries, manifest = _manifest_jobs(sweep_dir)
    dirs = job_dirs(sweep_dir)
    read_all = with_metrics and len(dirs) <= READ_ALL_METRICS_UP_TO
    jobs = [_read_job(p, entries.get(n), read_all) for p, n in dirs]
    seen = {j.num for j in jobs}
    jobs += [_queued_job(e) for n, e in entries.items() if n not in seen]
    jobs.sort(key=lambda j: j.num)

    job_config: dict[str, Any] = {}
    for job in jobs[:5]:
        data = load_yaml(job.job_dir / ".hydra" / "config.yaml")
        if isinstance(data, dict):
            job_config = data
            break
    study = job_config.get("study")
    if not isinstance(study, str):
        multirun = load_yaml(sweep_dir / "multirun.yaml")
        study = multirun.get("study") if isinstance(multirun, dict) else None
    metric = next((str(j.result["metric"]) for j in jobs if "metric" in j.result), None)
    # The Optuna sweeper's direction when it ran the sweep, else the jobs' configs': the study's "best" is ours.
    direction = sweep_direction(sweep_dir, [*(j.result.get("direction") for j in jobs), job_config.get("direction")])
    if with_metrics and not read_all:
        _read_needed_epochs(jobs, direction)
    config_name, config_dir = config_source(sweep_dir, (j.job_dir for j in jobs))
    rows: list[JobRow] = list(jobs)
    swept = swept_keys(rows) if len(jobs) > 1 else []
    return Sweep(
        sweep_dir=sweep_dir, jobs=jobs,
        study=study if isinstance(study, str) else sweep_dir.parent.name,
        metric=metric or str(job_config.get("metric", "objective")),
        direction=direction,
        created_at=_created_at(sweep_dir, manifest),
        swept=swept,
        fixed=fixed_overrides(rows, swept) if len(jobs) > 1 else dict(jobs[0].overrides) if jobs else {},
        config_name=config_name, config_dir=config_dir,
        launcher=str(manifest.get("launcher", "")), job_config=job_config, script=app_script(manifest, sweep_dir),
    )

