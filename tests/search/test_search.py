"""sweepit.search.Search without Hydra: a real Optuna journal in a real sweep directory, driven through the
AsyncLauncher protocol by a launcher that runs each job in this process (objective (x - 0.3)^2)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from sweepit.errors import ConfigError, SweepFailedError
from sweepit.results._job_files import write_result
from sweepit.search import AsyncLauncher, JobDefaults, Param, Search, SearchOptions, SearchSpace, load_study_of

optuna.logging.set_verbosity(optuna.logging.WARNING)


class InlineLauncher:
    """Runs a job as it starts: writes its result.json (failed for x below `fail_below`); Ctrl-C after `stop_after`."""

    def __init__(self, sweep_dir: Path, fail_below: float = -2.0, stop_after: int | None = None) -> None:
        self.sweep_dir, self.fail_below, self.stop_after = sweep_dir, fail_below, stop_after
        self.ended: list[tuple[int, Any]] = []
        self.env: dict[int, dict[str, str]] = {}
        self.n_started = 0
        self.closed = False

    def start(self, overrides: Sequence[str], job_num: int) -> None:
        self.n_started += 1
        values = dict(o.split("=", 1) for o in overrides if not o.startswith("env:"))
        self.env[job_num] = dict(o[4:].split("=", 1) for o in overrides if o.startswith("env:"))
        if self.stop_after is not None and self.n_started > self.stop_after:
            return  # still running when Ctrl-C comes
        job_dir = self.sweep_dir / f"{job_num}_x={values['x']}"
        job_dir.mkdir()
        x = float(values["x"])
        if x < self.fail_below:
            write_result(job_dir, {"status": "failed", "objective": None, "error": "ValueError: x too small"})
        else:
            write_result(job_dir, {"status": "completed", "objective": (x - 0.3) ** 2})
        self.ended.append((job_num, f"return of job {job_num}"))

    def wait_any(self, timeout_s: float | None = None) -> list[tuple[int, Any]]:
        if not self.ended:
            raise KeyboardInterrupt
        ended, self.ended = self.ended, []
        return ended

    def close(self) -> None:
        self.closed = True


def _env(job_num: int, env: Mapping[str, str]) -> list[str]:
    return [f"env:{k}={v}" for k, v in env.items()]


def _search(sweep_dir: Path, job: JobDefaults | None = None, **options: Any) -> Search:
    space = SearchSpace([Param.interval("x", "", "interval(-1, 1)", -1.0, 1.0)], fixed=["y=2"])
    opts = SearchOptions(sampler={"_target_": "optuna.samplers.RandomSampler", "seed": 0}, **options)
    return Search(opts, space, sweep_dir, job or JobDefaults(), command="python app.py", env_overrides=_env)


def test_a_search_runs_over_any_async_launcher(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    search = _search(tmp_path, n_trials=5, n_jobs=2)
    search.open()
    launcher = InlineLauncher(tmp_path)
    assert isinstance(launcher, AsyncLauncher)
    returns = search.run(launcher)
    assert returns == [f"return of job {n}" for n in range(5)] and launcher.closed
    study = load_study_of(tmp_path)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 5 and study.direction.name == "MINIMIZE"
    assert launcher.env[3]["SWEEPIT_OPTUNA_TRIAL"] == "3" and launcher.env[3]["SWEEPIT_OPTUNA_STUDY"] == "sweepit"
    best = yaml.safe_load((tmp_path / "best_params.yaml").read_text())
    assert best["best_trial"] == study.best_trial.number and best["command"].startswith("python app.py y=2 x=")
    record = yaml.safe_load((tmp_path / "optuna_study.yaml").read_text())
    assert record["direction"] == "minimize" and record["metric"] is None
    out = capsys.readouterr().out
    assert f"best (minimize objective): job {study.best_trial.user_attrs['job_num']} =" in out

    more = _search(tmp_path, n_trials=7, n_jobs=2)  # the same directory again: the study resumes
    more.open()
    more.run(InlineLauncher(tmp_path))
    assert [t.user_attrs["job_num"] for t in load_study_of(tmp_path).trials] == list(range(7))


def test_failure_rate_stops_the_search_and_keeps_the_results(tmp_path: Path) -> None:
    search = _search(tmp_path, n_trials=20, failure_rate_min_trials=2)
    search.open()
    with pytest.raises(SweepFailedError, match=r"max_failure_rate=0.5 .* [23] of [23] failed"):
        search.run(InlineLauncher(tmp_path, fail_below=2.0))  # every job fails
    assert (tmp_path / "trials.csv").read_text().count("\n") in (3, 4)


def test_ctrl_c_interrupts_the_trials_in_flight(tmp_path: Path) -> None:
    search = _search(tmp_path, n_trials=6, n_jobs=2)
    search.open()
    with pytest.raises(KeyboardInterrupt):
        search.run(InlineLauncher(tmp_path, stop_after=3))
    trials = load_study_of(tmp_path).trials
    interrupted = [t for t in trials if t.user_attrs.get("sweepit_status") == "interrupted"]
    assert len(interrupted) == 2 and all(t.state == TrialState.FAIL for t in interrupted)
    assert sum(t.state == TrialState.WAITING for t in trials) == 2  # their parameters, enqueued for the next run
    assert (tmp_path / "trials.csv").is_file()


@pytest.mark.parametrize(("options", "job", "message"), [
    ({"direction": "max"}, JobDefaults(), "but hydra.sweeper.direction is 'max'; set hydra.sweeper.direction="),
    ({}, JobDefaults(direction="up"), "but direction (the job config's) is 'up'"),
    ({"n_trials": 0}, JobDefaults(), "n_trials must be >= 1, but got n_trials=0"),
    ({"direction": ["maximize", "minimize"], "metrics": ["val_acc"]}, JobDefaults(),
     "hydra.sweeper.metrics names one objective per direction, but hydra.sweeper.direction=['maximize', 'minimize'] "
     "has 2 and hydra.sweeper.metrics=['val_acc'] 1; give both the same length."),
    ({"direction": "maximize", "metrics": ["val_acc", "wall_time_s"]}, JobDefaults(),
     "names 2 (['val_acc', 'wall_time_s']) and hydra.sweeper.direction='maximize' is one; give as many directions, "
     "e.g. hydra.sweeper.direction=[minimize,minimize]."),
    ({"direction": ["maximize", "up"]}, JobDefaults(), "each of hydra.sweeper.direction must be maximize or minimize, "
                                                       "but it is ['maximize', 'up']"),
    ({"direction": ["maximize", "minimize"], "pruner": {"_target_": "optuna.pruners.MedianPruner"}}, JobDefaults(),
     "Optuna prunes single-objective studies only, but hydra.sweeper.direction=['maximize', 'minimize'] has 2 "
     "objectives and the pruner is median; use hydra/sweeper/pruner=none."),
    ({"pruner": {"_target_": "optuna.pruners.PercentilePruner", "percentile": 25.0}}, JobDefaults(direction="maximize"),
     "the app's config names no `metric`, so no job reports one and hydra/sweeper/pruner=percentile would prune "
     "nothing.\nAdd `metric: NAME` and `direction: maximize` or `minimize` to the config, or use "
     "hydra/sweeper/pruner=none.\nSee docs/troubleshooting.md#pruner-without-metric"),
])
def test_bad_input_names_the_key_and_the_value(tmp_path: Path, options: dict[str, Any], job: JobDefaults,
                                               message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        _search(tmp_path, job, **options)
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_sweepers_direction_wins_and_a_different_job_direction_is_warned(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        search = _search(tmp_path, JobDefaults(metric="val_acc", direction="maximize"), direction="minimize")
    assert search.direction == "minimize"
    assert "hydra.sweeper.direction=minimize and the job config's direction=maximize differ" in caplog.text
    search.open()
    _search(tmp_path, direction="minimize").open()
    with pytest.raises(ConfigError, match="must keep its direction, but it is minimize and the sweep asks maximize"):
        _search(tmp_path, direction="maximize").open()
    assert yaml.safe_load((tmp_path / "optuna_study.yaml").read_text())["direction"] == "minimize"  # kept


def test_several_objectives_need_a_value_each(tmp_path: Path) -> None:
    """A job that gives one number to a two-objective study fails with the rule and the fix; the search goes on."""
    search = _search(tmp_path, n_trials=2, direction=["minimize", "minimize"], failure_rate_min_trials=10)
    search.open()
    search.run(InlineLauncher(tmp_path))
    trials = load_study_of(tmp_path).trials
    assert [t.state for t in trials] == [TrialState.FAIL] * 2
    assert all("a study with 2 directions needs 2 finite values per trial: the task must return a list of 2 numbers, "
               "or hydra.sweeper.metrics must name them" in t.user_attrs["error"] for t in trials)
    assert not (tmp_path / "optimization_results.yaml").exists()  # nothing completed: no file, as the plugin has none
