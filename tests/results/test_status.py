"""The one rule for the objective's direction, read from what a sweep directory recorded (real files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweepit.results import write_study_file
from sweepit.results._job_files import write_result
from sweepit.results._status import objective_direction, sweep_direction
from sweepit.results._summary import summarize


def test_the_sweepers_direction_wins_then_the_jobs_then_minimize() -> None:
    assert objective_direction("maximize", "minimize") == "maximize"
    assert objective_direction(None, "maximize") == "maximize"
    assert objective_direction("", None) == "minimize"


def _jobs(sweep_dir: Path, direction: str | None) -> None:
    for num, value in enumerate((0.2, 0.9, 0.5)):
        job = sweep_dir / f"{num}_x={value}"
        job.mkdir(parents=True)
        write_result(job, {"status": "completed", "objective": value,
                           **({"direction": direction} if direction else {})})


@pytest.mark.parametrize(("study", "jobs", "expected", "best_job"), [
    ("maximize", "minimize", "maximize", 1),  # the study's direction, whatever the jobs' configs said
    ("minimize", None, "minimize", 0),        # a plain app's jobs record no direction
    (None, "maximize", "maximize", 1),        # no study: the jobs' configs
    (None, None, "minimize", 0),              # neither: Optuna's default
])
def test_sweep_direction_and_the_summarys_best(tmp_path: Path, study: str | None, jobs: str | None,
                                               expected: str, best_job: int) -> None:
    _jobs(tmp_path, jobs)
    if study is not None:
        write_study_file(tmp_path, {"storage": "optuna.journal", "study_name": "s", "direction": study})
    assert sweep_direction(tmp_path, [jobs]) == expected
    assert f"best ({expected} objective): job {best_job} =" in summarize(tmp_path)
