"""A sweep directory read for reporting: results' job rows plus per-epoch metrics, states and the sweep's config.
Nothing here raises on a broken job: a missing or corrupt file becomes a note in that job's row."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from sweepit._files import collector_paused
from sweepit.errors import SweepitError
from sweepit.results import (
    ConfigSource,
    JobPaths,
    JobRow,
    SweepPaths,
    UnreadKeys,
    app_command,
    best_row,
    config_source,
    counts_text,
    direction_is_default,
    finite_number,
    fixed_overrides,
    iter_manifest,
    job_row,
    load_yaml,
    measures_speed,
    own_key,
    read_metrics,
    records_digest,
    short_value,
    sweep_direction,
    sweep_jobs,
    swept_keys,
    total_wall_time_s,
    typed_overrides,
)

# Up to this many jobs every metrics.jsonl is read (a bad line is a note in its job's row). Beyond, only those of
# jobs whose result.json lacks what the report takes from them (final metrics, mean epoch time) and of the jobs a
# learning-curve plot draws: a 100,000-job sweep's two million metrics lines are not read to draw 200 curves.
READ_ALL_METRICS_UP_TO = 2000
METRICS_DRAWN = 200  # the learning curves' cap (plots.MAX_CURVES)
T = TypeVar("T")


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def best_first(items: Iterable[T], objective: Callable[[T], Any], direction: str) -> list[T]:
    """The items with a finite objective, best first (ties in their order)."""
    sign = -1.0 if direction == "maximize" else 1.0
    return sorted((x for x in items if finite_number(objective(x)) is not None), key=lambda x: sign * objective(x))


@dataclass
class JobReport(JobRow):
    """summary's JobRow with what a report adds: the per-epoch rows of `metrics.jsonl`."""

    epochs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n_epochs(self) -> int:
        done = self.result.get("epochs_completed")
        return done if isinstance(done, int) else len(self.epochs)

    @property
    def last(self) -> dict[str, Any]:
        """Final metrics: `result.json`'s `final`, else the last epoch logged so far."""
        return self.final or (self.epochs[-1] if self.epochs else {})

    def warm_mean(self, key: str) -> float | None:
        """The mean of an epoch metric (`epoch_time_s`, `samples_per_s`), the first (warm-up) epoch left out when
        there are more: result.json's `<key>_mean` (the same mean, as the job computed it), else from its epochs."""
        recorded = finite_number(self.result.get(f"{key}_mean"))
        if recorded is not None:
            return recorded
        values = [v for v in (finite_number(r.get(key)) for r in self.epochs) if v is not None]
        values = values[1:] if len(values) > 1 else values
        return sum(values) / len(values) if values else None

    @property
    def epoch_time_s(self) -> float | None:
        """Mean epoch time (`warm_mean`), else the final metrics' when no epoch was logged."""
        mean = self.warm_mean("epoch_time_s")
        return mean if mean is not None else finite_number(self.last.get("epoch_time_s"))

    @property
    def wall_time_s(self) -> float | None:
        """Over all the job's attempts (a resumed job's GPU-hours are those of every run)."""
        return finite_number(total_wall_time_s(self.result))

    @property
    def n_devices(self) -> int:
        """`world_size` from result.json (its devices: GPUs, or ranks on CPU); else `trainer.gpus` from the job's
        config (a launcher's result lacks it)."""
        devices = self.result.get("world_size")
        if isinstance(devices, int):
            return devices if devices > 0 else 1
        return self._configured[0]

    @property
    def on_cpu(self) -> bool:
        """Whether the job ran on CPU: result.json's `device`, else its config's (`device=cpu`)."""
        device = self.result.get("device")
        return (self._configured[1] if device is None else str(device)) == "cpu"

    def config(self) -> dict[str, Any]:
        """The job's `.hydra/config.yaml`; {} when it cannot be read."""
        config = load_yaml(JobPaths(self.job_dir).config)
        return config if isinstance(config, dict) else {}

    @cached_property
    def _configured(self) -> tuple[int, str]:
        """`trainer.gpus` and `device` from the job's config."""
        config = self.config()
        trainer = config.get("trainer")
        gpus = trainer.get("gpus") if isinstance(trainer, dict) else None
        return gpus if isinstance(gpus, int) and gpus > 0 else 1, str(config.get("device", ""))

    @property
    def n_gpus(self) -> int:
        """The GPUs the job was given: none when it reported training on the CPU (`device`), else the count its
        session recorded (`n_gpus`: its Slurm allocation, CUDA_VISIBLE_DEVICES). A record without it (a launcher's,
        of a job that died first) gets what the launchers give its config: `n_devices` GPUs, none for `device=cpu`."""
        given = self.result.get("n_gpus")
        if str(self.result.get("device")) == "cpu":
            return 0
        if isinstance(given, int) and not isinstance(given, bool):
            return max(given, 0)
        return 0 if self.on_cpu else self.n_devices

    @property
    def gpu_hours(self) -> float | None:
        """GPUs given x wall time; None for a job given none (on CPU)."""
        wall, gpus = self.wall_time_s, self.n_gpus
        return None if wall is None or not gpus else gpus * wall / 3600

    @property
    def best_epoch(self) -> int | None:
        best = self.result.get("best_epoch")
        return best if isinstance(best, int) else None


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
    config: ConfigSource = field(default_factory=ConfigSource)  # what a single run needs to get a job's config
    launcher: str = ""
    app: str = "python train.py"      # the shell words that run the sweep's app alone where it ran (`app_command`)
    records: str = ""                 # the digest of sweep.json's job records read (`records_digest`)
    direction_default: bool = False   # nobody chose `direction`: every "best" line says so (default_direction_line)

    @cached_property
    def measures_speed(self) -> bool:
        """A speed study: its jobs differ only in their device count and repeats (results' `measures_speed`)."""
        return measures_speed(self.jobs, self.swept)

    @cached_property
    def best(self) -> JobReport | None:
        """The best job (computed once: a report asks for it in every section); none in a speed study."""
        if self.measures_speed:
            return None
        best = best_row(list(self.jobs), self.direction)
        return best if isinstance(best, JobReport) else None

    @cached_property
    def unread(self) -> list[str]:
        """A sentence per swept key that looks unread (the end-of-sweep summary's rule: `UnreadKeys`)."""
        return UnreadKeys(self.jobs).lines()

    def counts_line(self) -> str:
        return f"{len(self.jobs)} jobs: {counts_text(Counter(job.status for job in self.jobs))}"

    def job_label(self, job: JobReport, width: int = 60, short: bool = False) -> str:
        """The job's swept overrides, `key=value` joined, shortened to `width` characters; `short`: numbers to 4
        significant digits (a legend's labels: Optuna samples 17-digit floats)."""
        text = " ".join(f"{k}={short_value(job.overrides.get(k, '')) if short else job.overrides.get(k, '')}"
                        for k in self.swept) or f"job {job.num}"
        return clip(text, width)

    def typed_swept(self, job: JobReport) -> str:
        """The job's swept overrides as they were typed (`+model.hidden=64`: pasteable), else its label."""
        swept = set(self.swept)
        return " ".join(o for o in typed_overrides(job.job_dir) if own_key(o) in swept) or self.job_label(job, 200)


def _read_epochs(job: JobReport) -> None:
    try:
        job.epochs, notes = read_metrics(job.job_dir)
    except (OSError, ValueError) as e:
        notes = [f"{JobPaths.metrics} unreadable: {e}"]
    for note in notes[:3]:
        job.add_note(note)
    if len(notes) > 3:
        job.add_note(f"{len(notes) - 3} more bad lines in {JobPaths.metrics}")


def _created_at(sweep_dir: Path, manifest: dict[str, Any]) -> datetime:
    stamp = manifest.get("created_at")
    if isinstance(stamp, str):
        try:
            moment = datetime.fromisoformat(stamp)
            return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
        except ValueError:
            pass
    multirun = SweepPaths(sweep_dir).multirun  # else Hydra's, written as the sweep began
    return datetime.fromtimestamp((multirun if multirun.is_file() else sweep_dir).stat().st_mtime, tz=timezone.utc)


def _folder_study(sweep_dir: Path) -> str:
    """The study a sweep's folder names: outputs/<study>/<time>, or Hydra's own multirun/<date>/<time> (the date is no
    study: `multirun` is)."""
    parent = sweep_dir.absolute().parent
    return parent.parent.name if re.fullmatch(r"\d{4}-\d{2}-\d{2}", parent.name) else parent.name


@collector_paused()
def load_sweep(sweep_dir: Path | str, with_metrics: bool = True) -> Sweep:
    """Every job of the sweep (job directories, plus jobs sweep.json lists that have none yet), in job order."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise SweepitError(f"a sweep directory must exist, but {sweep_dir} does not; list sweeps with `sweepit ls`.")
    manifest, listed = iter_manifest(sweep_dir)
    found = list(sweep_jobs(sweep_dir, manifest, listed))
    read_all = with_metrics and sum(folder is not None for _, folder, _ in found) <= READ_ALL_METRICS_UP_TO

    def read(job: JobReport) -> None:
        if not job.overrides and not JobPaths(job.job_dir).overrides.is_file():
            job.add_note(f"no {JobPaths.overrides}")
        if read_all:
            _read_epochs(job)

    jobs = [job_row(JobReport, *job, read=read) for job in found]
    job_config = next((config for job in jobs[:5] if (config := job.config())), {})
    study = job_config.get("study")
    if not isinstance(study, str):
        multirun = load_yaml(SweepPaths(sweep_dir).multirun)
        study = multirun.get("study") if isinstance(multirun, dict) else None
    metric = next((str(j.result["metric"]) for j in jobs if "metric" in j.result), None)
    # The Optuna sweeper's direction when it ran the sweep, else the jobs' configs': the study's "best" is ours.
    chosen = [*(j.result.get("direction") for j in jobs), job_config.get("direction")]
    direction = sweep_direction(sweep_dir, chosen)
    if with_metrics and not read_all:  # a large sweep: the metrics that a report draws or lacks otherwise
        drawn = {id(j) for j in best_first(jobs, lambda j: j.objective, direction)[:METRICS_DRAWN]}
        for job in jobs:
            if id(job) in drawn or not job.final or finite_number(job.result.get("epoch_time_s_mean")) is None:
                _read_epochs(job)
    rows: list[JobRow] = list(jobs)
    swept = swept_keys(rows) if len(jobs) > 1 else []
    return Sweep(
        sweep_dir=sweep_dir, jobs=jobs,
        study=study if isinstance(study, str) else _folder_study(sweep_dir),
        metric=metric or str(job_config.get("metric", "objective")),
        direction=direction, direction_default=direction_is_default(sweep_dir, chosen),
        created_at=_created_at(sweep_dir, manifest),
        swept=swept,
        fixed=fixed_overrides(rows, swept),
        config=config_source(sweep_dir, (j.job_dir for j in jobs)),
        launcher=str(manifest.get("launcher", "")), app=app_command(manifest, sweep_dir),
        records=records_digest(entry for *_, entry in found if entry is not None),
    )
