"""A study's files besides `optuna_study.yaml`: `best_params.yaml`, `trials.csv` and `optimization_results.yaml` in
the released hydra-optuna-sweeper's format, so that scripts written for it keep working."""

from __future__ import annotations

import csv
import io
import math
import shlex
from pathlib import Path
from typing import Any

import yaml

from sweepit._files import atomic_write
from sweepit.results import SweepPaths, read_study_file
from sweepit.search._pruning import open_storage


def load_study_of(sweep_dir: Path) -> Any:
    """The sweep's study, read-only in spirit (no sampler state is kept), or None when it has none."""
    info = read_study_file(sweep_dir)
    if info is None:
        return None
    import optuna

    return optuna.load_study(study_name=str(info["study_name"]), storage=open_storage(str(info["storage"])),
                             sampler=optuna.samplers.RandomSampler())


def _value(trial: Any) -> float | None:
    value = trial.value if trial.values is not None and len(trial.values) == 1 else None
    return float(value) if value is not None and math.isfinite(value) else None


def trials_table(study: Any) -> tuple[list[str], list[list[Any]]]:
    """One row per trial (`trials.csv` and the report's table)."""
    trials = study.get_trials(deepcopy=False)
    names: list[str] = []
    for t in trials:
        names += [n for n in t.params if n not in names]
    multi = len(study.directions) > 1
    value_columns = ["value"]
    if multi:  # one column per objective, and whether the trial is on the Pareto front
        metrics = study.user_attrs.get("sweepit_metrics") or [f"value_{i}" for i in range(len(study.directions))]
        value_columns = [*(f"value_{m}" if not str(m).startswith("value_") else str(m) for m in metrics), "pareto"]
        front = {t.number for t in study.best_trials}
    columns = ["trial", "state", "status", *value_columns, *names, "epochs_reported", "duration_s",
               "datetime_start", "datetime_complete", "job_num", "job_dir", "error"]
    rows = []
    for t in trials:
        duration = t.duration.total_seconds() if t.duration is not None else None
        values = ([*(t.values or [None] * len(study.directions)), t.number in front] if multi else [_value(t)])
        rows.append([t.number, t.state.name, t.user_attrs.get("sweepit_status"), *values,
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
    """The best COMPLETE trial, or None (Optuna raises when there is none, or several objectives)."""
    if len(study.directions) > 1:
        return None
    try:
        return study.best_trial
    except ValueError:
        return None


def best_command(info: dict[str, Any], trial: Any) -> str:
    """The single run that trains the best trial's configuration again (no sweeper, no study)."""
    prefix = str(info.get("command") or "python train.py")  # shell words already (`PYTHONPATH=... python ...`)
    overrides = trial.user_attrs.get("overrides")
    if not isinstance(overrides, list):
        overrides = [f"{k}={v}" for k, v in trial.params.items()]
    return " ".join([prefix, *(shlex.quote(str(o)) for o in overrides)])


def best_params_yaml(study: Any, info: dict[str, Any]) -> str:
    if len(study.directions) > 1:
        front = [{"trial": t.number, "values": list(t.values), "job_dir": t.user_attrs.get("job_dir"),
                  "params": dict(t.params), "command": best_command(info, t)} for t in study.best_trials]
        data = {"study_name": study.study_name, "metrics": info.get("metrics") or None,
                "directions": [d.name.lower() for d in study.directions], "pareto_front": front}
        head = ("# The Pareto front of the study: trials no other trial beats in every objective; each `command` "
                "trains one again as a single run.\n")
        return head + yaml.safe_dump(data, sort_keys=False)
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


def optimization_results(study: Any) -> dict[str, Any] | None:
    """The released hydra-optuna-sweeper's `optimization_results.yaml`; None while no trial completed."""
    if len(study.directions) > 1:
        front = study.best_trials
        return {"name": "optuna", "solutions": [{"params": dict(t.params), "values": list(t.values)} for t in front]
                } if front else None
    best = best_trial(study)
    return None if best is None else {"name": "optuna", "best_params": dict(best.params), "best_value": best.value}


def write_results(sweep_dir: Path, study: Any, info: dict[str, Any], out_dir: Path | None = None) -> list[Path]:
    """The files into `out_dir` (default: the sweep directory)."""
    out = SweepPaths(Path(sweep_dir) if out_dir is None else out_dir)
    paths = [out.best_params, out.trials]
    atomic_write(paths[0], best_params_yaml(study, info))
    atomic_write(paths[1], trials_csv(study))
    results = optimization_results(study)
    if results is not None:
        paths.append(out.optimization_results)
        atomic_write(paths[2], yaml.safe_dump(results, sort_keys=False))
    return paths
