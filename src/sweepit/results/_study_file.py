"""`optuna_study.yaml`: the search record of a sweep directory, written by the Optuna sweeper when it opens the
study: where the study is stored (`storage`, `study_name`), the objective (`metric`, `direction`), the sampler,
pruner and space, and the single-run command prefix.

It lives with the results because every reader of a sweep directory needs it (the summary's and the report's
"best" take the sweep's direction from it); reading it needs no Optuna.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sweepit._files import atomic_write
from sweepit.results._paths import SweepPaths


def write_study_file(sweep_dir: Path, info: dict[str, Any]) -> Path:
    """`info`: storage, study_name, metric, direction, sampler, pruner, space, command (the single-run prefix)."""
    path = SweepPaths(sweep_dir).study_file
    text = ("# The Optuna study of this sweep: optuna.load_study(study_name=..., storage=...); "
            "optuna-dashboard <storage>\n" + yaml.safe_dump(info, sort_keys=False))
    atomic_write(path, text)
    return path


def read_study_file(sweep_dir: Path) -> dict[str, Any] | None:
    """The record, or None for a sweep without a study (or an unreadable record)."""
    try:
        data = yaml.safe_load(SweepPaths(sweep_dir).study_file.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) and data.get("storage") and data.get("study_name") else None
