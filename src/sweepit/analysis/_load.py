"""`sweepit.load`: a sweep, or every sweep under a folder, read as the report reads it (`reporting.load_sweep`: running,
partial and broken sweeps too), its rows the report's results table with the values typed for pandas."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweepit.errors import SweepitError
from sweepit.reporting import JobReport, Sweep, find_sweeps, load_sweep, sweep_folder
from sweepit.reporting.table import best_lines, results_table
from sweepit.results import (
    MAX_ROWS,
    JobPaths,
    finite_number,
    read_metrics,
)

if TYPE_CHECKING:
    import pandas as pd
    from omegaconf import DictConfig
    from torch import nn

WEIGHTS = {"best": JobPaths.best_weights, "last": JobPaths.last_weights}


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise SweepitError("sweepit.load needs pandas, which is not installed: install sweepit's extra with "
                           "`pip install -e '.[analysis]'` (or `pip install pandas`).") from None
    return pandas


def load(sweep_dir: str | Path) -> SweepResults:
    """The sweep in `sweep_dir`, or every sweep under it (a study's folder, `outputs/`): what it holds now; load again
    to see a running sweep further on."""
    _pandas()  # before any reading: a missing pandas is said at once
    path = sweep_folder(Path(sweep_dir), "sweepit.load('{}')", many=True)
    found = find_sweeps(path)
    one = found == [path]
    return SweepResults(path, {path.absolute().name if one else str(s.relative_to(path)): load_sweep(s)
                               for s in found})


class JobResult:
    """One job of a loaded sweep: its record, its epochs (`history`), its `config` and its trained `model()`."""

    def __init__(self, job: JobReport, sweep: str) -> None:
        self.sweep = sweep  # the name of its sweep: the `sweep` column of the frame
        self.report = job
        self._data: Any = None

    num = property(lambda self: self.report.num)
    status = property(lambda self: self.report.status)
    objective = property(lambda self: self.report.objective)
    job_dir = property(lambda self: _absolute(self.report.job_dir))
    overrides = property(lambda self: dict(self.report.overrides))
    result = property(lambda self: dict(self.report.result), doc="result.json's fields ({} before it is written)")

    def __repr__(self) -> str:
        overrides = " ".join(f"{k}={v}" for k, v in self.report.overrides.items())
        return f"JobResult(job {self.num} of {self.sweep}: {self.status}, objective={self.objective}; {overrides})"

    @property
    def history(self) -> pd.DataFrame:
        """metrics.jsonl, one row per epoch logged (so far, while the job runs); read again at each call."""
        rows, _ = read_metrics(self.job_dir)
        return _pandas().DataFrame(rows)

    @cached_property
    def config(self) -> DictConfig:
        """The job's config as its task got it (`.hydra/config.yaml`)."""
        from omegaconf import OmegaConf

        config = self.report.config()
        if not config:
            raise SweepitError(f"a job's config must be readable, but job {self.num}'s {JobPaths(self.job_dir).config} "
                               "is missing or not YAML (a job the launcher has not started yet has none).")
        return OmegaConf.create(config)

    def model(self, which: str = "best") -> nn.Module:
        """The trained model, built from the job's config with the weights it saved (`model_best.pt`, or
        `model_last.pt` with which="last"), on the CPU in eval mode."""
        from sweepit.train import load_model

        if which not in WEIGHTS:
            raise SweepitError(f"which must be one of {', '.join(map(repr, WEIGHTS))}, but got which={which!r}.")
        path = self.job_dir / WEIGHTS[which]
        if not path.is_file():
            has = [w.name for w in WEIGHTS.values() if (self.job_dir / w).is_file()]
            raise SweepitError(
                f"model(which={which!r}) reads {path.name}, but job {self.num} has "
                + (f"only {', '.join(has)} in {self.job_dir}: model(which={'last' if which == 'best' else 'best'!r})"
                   " reads it." if has else
                   f"no weights in {self.job_dir}: sweepit's loop keeps them as trainer.save_model says (best, last, "
                   "both), once an epoch has ended; a loop of your own saves what it saves (see checkpoint()).")
            )
        return load_model(self.config, path, self.data())

    def data(self) -> Any:
        """The job's data as its loop loads it (`x_train`, `y_train`, `x_val`, `y_val`, `n_classes` for the built-in
        sets), on the CPU; loaded once."""
        import torch

        from sweepit.train import load_data

        if self._data is None:
            self._data = load_data(self.config, torch.device("cpu"))
        return self._data

    def checkpoint(self) -> Any:
        """The state the job saved with its checkpoint (`sweepit.save_checkpoint`'s, or the loop's: epoch, model,
        optimizer), loaded on the CPU."""
        from sweepit.train import read_state

        path = JobPaths(self.job_dir).checkpoint
        if not path.is_file():
            raise SweepitError(f"job {self.num} must have a checkpoint for checkpoint(), but {path} does not exist.\n"
                               "Load its trained weights with model(), or run it again with "
                               "trainer.keep_checkpoint=true.\n"
                               "See docs/troubleshooting.md#no-checkpoint")
        state = read_state(path)
        if state is None:
            raise SweepitError(f"a checkpoint must be one this sweepit writes, but {path} is not (another version's?).")
        return state


class SweepResults:
    """A sweep, or several (the folder `sweepit.load` was given holds them), as loaded: `df`, `best`, `job(num)`."""

    def __init__(self, path: Path, sweeps: dict[str, Sweep]) -> None:
        self.path = path
        self.sweeps = sweeps  # by name: the sweep directory's path under `path` (its own name when `path` is one)

    def __repr__(self) -> str:
        """Each sweep's counts, the jobs' swept values, status and objective (pandas' own table, its first and last
        rows of a large sweep), and a single sweep's best job with the command that trains it again."""
        one = len(self.sweeps) == 1
        columns = [*([] if one else ["sweep"]), "job", *self.swept, "status", "objective"]
        lines = [f"{name}: {sweep.counts_line()}" for name, sweep in self.sweeps.items()]
        lines.append(self.df[columns].to_string(index=False, max_rows=MAX_ROWS))
        if one:
            lines += best_lines(next(iter(self.sweeps.values())))
        lines.append(".df: every column; .best and .job(num): a job's history, config, model")
        return f"sweepit.load({str(self.path)!r})\n" + "\n".join(lines)

    @cached_property
    def df(self) -> pd.DataFrame:
        """One row per job: sweep, job, the swept values, status, objective, the last metrics, best epoch and value,
        epochs, times, GPU-hours (jobs on GPUs), job_dir, note."""
        pd = _pandas()
        frames = [_frame(pd, name, sweep) for name, sweep in self.sweeps.items()]
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)

    @property
    def swept(self) -> list[str]:
        """The keys whose value differs between a sweep's jobs, of every sweep loaded: the frame's columns after job."""
        return list(dict.fromkeys(key for sweep in self.sweeps.values() for key in sweep.swept))

    @property
    def jobs(self) -> list[JobResult]:
        return [JobResult(job, name) for name, sweep in self.sweeps.items() for job in sweep.jobs]

    def job(self, num: int, sweep: str | None = None) -> JobResult:
        """Job `num` (of `sweep`, a name of `sweeps`, when several are loaded)."""
        if sweep is None and len(self.sweeps) > 1:
            raise SweepitError(f"job({num}) must name its sweep when several are loaded, as job({num}, sweep=...) "
                               f"with one of: {', '.join(self.sweeps)}.")
        name = sweep if sweep is not None else next(iter(self.sweeps))
        if name not in self.sweeps:
            raise SweepitError(f"sweep must be one of those loaded ({', '.join(self.sweeps)}), but got {sweep!r}.")
        found = [job for job in self.sweeps[name].jobs if job.num == num]
        if not found:
            nums = [job.num for job in self.sweeps[name].jobs]
            raise SweepitError(f"job must be a job number of {name} ({_spans(nums)}), but got {num}.")
        return JobResult(found[0], name)

    @property
    def best(self) -> JobResult | None:
        """The completed job with the best objective (the report's best); of several sweeps, the best of theirs when
        they share their metric and direction. None before any job completed, and in a speed study."""
        goals = {(sweep.metric, sweep.direction) for sweep in self.sweeps.values()}
        if len(goals) > 1:
            raise SweepitError("the sweeps must share their metric and direction to have one best job, but they "
                               f"have {', '.join(f'{d} {m}' for m, d in sorted(goals))}; take one sweep's best with "
                               "sweepit.load(<its directory>).best.")
        bests = [JobResult(sweep.best, name) for name, sweep in self.sweeps.items() if sweep.best is not None]
        if not bests:
            return None
        (_, direction), = goals
        pick = max if direction == "maximize" else min
        return pick(bests, key=lambda job: job.objective)


def _typed(value: Any) -> Any:
    """A swept value as the number it is (an override is text: `lr=0.01`), else as written."""
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                pass
    return value


def _best_value(job: JobReport, metric: str, direction: str) -> float | None:
    """result.json's best value of the metric, else the best of the epochs logged so far (a running job)."""
    recorded = finite_number(job.result.get("best_value"))
    if recorded is not None:
        return recorded
    values = [v for row in job.epochs if (v := finite_number(row.get(metric))) is not None]
    return (max if direction == "maximize" else min)(values) if values else None


def _frame(pd: Any, name: str, sweep: Sweep) -> pd.DataFrame:
    """The sweep's results table (the report's, results.csv's columns) as a frame: the swept values typed, the job
    folders absolute, with what the table leaves to the page (the best value, GPU-hours on CPU, the times)."""
    table = results_table(sweep)
    df = pd.DataFrame(table.rows, columns=table.columns)
    jobs = sweep.jobs
    for key in sweep.swept:
        df[key] = df[key].map(_typed)
    best = f"best_{sweep.metric}"
    if best not in df:
        values = [_best_value(job, sweep.metric, sweep.direction) for job in jobs]
        df.insert(df.columns.get_loc("best_epoch") + 1, best, values)
    added = {
        "gpu_hours": [job.gpu_hours for job in jobs],
        "n_gpus": [job.n_gpus for job in jobs],
        "started_at": pd.to_datetime([job.result.get("started_at") for job in jobs], utc=True, errors="coerce"),
        "ended_at": pd.to_datetime([job.result.get("ended_at") for job in jobs], utc=True, errors="coerce"),
    }
    at = df.columns.get_loc("job_dir")
    for column, values in added.items():
        if column in df:
            df[column] = values
        else:
            df.insert(at, column, values)
            at += 1
    df["job_dir"] = [str(_absolute(job.job_dir)) for job in jobs]
    numeric = list(df.columns[df.columns.get_loc("objective"):df.columns.get_loc("n_gpus") + 1])
    df[numeric] = df[numeric].apply(_numeric, pd=pd)  # a column of None alone (no job has it yet): NaN, not objects
    df.insert(0, "sweep", name)
    return df


def _numeric(column: pd.Series, pd: Any) -> pd.Series:
    """The column as numbers; as it is when some value is no number (a metric that a job logs as text)."""
    try:
        return pd.to_numeric(column)
    except (TypeError, ValueError):
        return column


def _absolute(job_dir: Path) -> Path:
    """A job's folder as an absolute path; a queued job's with no folder recorded stays empty (not the cwd)."""
    return job_dir.absolute() if str(job_dir) not in ("", ".") else job_dir


def _spans(nums: list[int]) -> str:
    return f"{min(nums)}..{max(nums)}" if nums else "it has none"
