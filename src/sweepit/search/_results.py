"""What an Optuna study leaves in its sweep directory besides `optuna_study.yaml` (sweepit.results._study_file):
`best_params.yaml` (best parameters and the command that reproduces them) and `trials.csv`.

    study = load_study_of(sweep_dir)         # plain optuna.Study, or None for a sweep without a study

No Hydra here: the sweeper writes these files at the end of a search, the report rewrites them.
"""

from __future__ import annotations

import csv
import io
import math
import shlex
from pathlib import Path
from typing import Any

import yaml

from sweepit._files import atomic_write
from sweepit.results._study_file import read_study_file

BEST_FILE = "best_params.yaml"
TRIALS_FILE = "trials.csv"


def load_study_of(sweep_dir: Path) -> Any:
    """The sweep's study, read-only in spirit (no sampler state is kept), or None when it has none."""
    info = read_study_file(sweep_dir)
    if info is None:
        return None
    import optuna

    from sweepit.search._pruning import open_storage

    return optuna.load_study(study_name=str(info["study_name"]), storage=open_storage(str(info["storage"])),
                             sampler=optuna.samplers.RandomSampler())


def _value(trial: Any) -> float | None:
    value = trial.value if trial.values is not None and len(trial.values) == 1 else None
    return float(value) if value is not None and math.isfinite(value) else None


def trials_table(study: Any) -> tuple[list[str], list[list[Any]]]:
    """One row per trial: number, Optuna state, job status, value, parameters, epochs reported, times, job."""
    trials = study.get_trials(deepcopy=False)
    names: list[str] = []
    for t in trials:
        names += [n for n in t.params if n not in names]
    columns = ["trial", "state", "status", "value", *names, "epochs_reported", "duration_s",
               "datetime_start", "datetime_complete", "job_num", "job_dir", "error"]
    rows = []
    for t in trials:
        duration = t.duration.total_seconds() if t.duration is not None else None
        rows.append([t.number, t.state.name, t.user_attrs.get("sweepit_status"), _value(t),
                     *(t.params.get(n) for n in names), len(t.intermediate_values) or None, duration,
                     t.datetime_start.isoformat(timespec="seconds") if t.datetime_start else None,
                     t.datetime_complete.isoformat(timespec="seconds") if t.datetime_complete else None,
                     t.user_attrs.get("job_num"), t.user_attrs.get("job_dir"), t.user_attrs.get("error")])
    return columns, rows


def trials_csv(study: Any) -> str:
    columns, rows = trials_table(study)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if v is None else repr(v) if isinstance(v, float) else v for v in row])
    return out.getvalue()


def best_trial(study: Any) -> Any:
    """The best COMPLETE trial, or None (Optuna raises when there is none)."""
    try:
        return study.best_trial
    except ValueError:
        return None


def best_command(info: dict[str, Any], trial: Any) -> str:
    """The single run that trains the best trial's configuration again (no sweeper, no study)."""
    prefix = shlex.split(str(info.get("command") or "python train.py"))
    overrides = trial.user_attrs.get("overrides")
    if not isinstance(overrides, list):
        overrides = [f"{k}={v}" for k, v in trial.params.items()]
    return shlex.join([*prefix, *(str(o) for o in overrides)])


def best_params_yaml(study: Any, info: dict[str, Any]) -> str:
    best = best_trial(study)
    if best is None:
        return "# no trial of this study completed yet\n"
    data = {
        "study_name": study.study_name, "metric": info.get("metric"), "direction": study.direction.name.lower(),
        "best_value": best.value, "best_trial": best.number, "job_dir": best.user_attrs.get("job_dir"),
        "params": dict(best.params), "command": best_command(info, best),
    }
    head = "# Best trial of the study; `command` trains it again as a single run.\n"
    return head + yaml.safe_dump(data, sort_keys=False)


def write_results(sweep_dir: Path, study: Any, info: dict[str, Any], out_dir: Path | None = None) -> list[Path]:
    """`best_params.yaml` and `trials.csv` into `out_dir` (default: the sweep directory)."""
    out_dir = Path(sweep_dir) if out_dir is None else out_dir
    paths = [out_dir / BEST_FILE, out_dir / TRIALS_FILE]
    atomic_write(paths[0], best_params_yaml(study, info))
    atomic_write(paths[1], trials_csv(study))
    return paths
