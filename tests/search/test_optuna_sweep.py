"""Real multiruns of the Optuna sweeper in subprocesses: trials, asynchrony, pruning, resume, failures, bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from optuna_testing import job_dirs, load, run_search

from sweepit.results import iter_manifest

pytestmark = pytest.mark.slow

SPACE = ["optimizer=choice(adam,sgd)", "lr=tag(log, interval(1e-3, 0.3))"]


def _out(proc: object) -> str:
    return f"stdout:\n{getattr(proc, 'stdout', '')[-3000:]}\nstderr:\n{getattr(proc, 'stderr', '')[-3000:]}"


def test_n_trials_results_and_resume_without_overwriting(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    args = [*SPACE, "epochs=2", f"hydra.sweep.dir={sweep}", "hydra.sweeper.n_jobs=2", "hydra.sweeper.sampler.seed=1",
            "study=resume_test"]
    proc = run_search([*args, "hydra.sweeper.n_trials=3"], tmp_path)
    assert proc.returncode == 0, _out(proc)
    study = load(sweep, "resume_test")  # plain Optuna API on the journal file
    assert len(study.trials) == 3 and all(t.state == TrialState.COMPLETE for t in study.trials)
    first = {p.name: (p / "result.json").read_text() for p in job_dirs(sweep)}
    assert [p.name.split("_")[0] for p in job_dirs(sweep)] == ["0", "1", "2"]
    best = yaml.safe_load((sweep / "best_params.yaml").read_text())
    assert best["best_value"] == pytest.approx(study.best_value)
    assert best["command"].startswith("python ") and f"lr={best['params']['lr']!r}" in best["command"]
    assert "SWEEPIT_OPTUNA" not in best["command"] and "hydra.job" not in best["command"]
    assert (sweep / "trials.csv").read_text().count("\n") == 4
    # The job's overrides and directory name hold the searched values only, not the trial bookkeeping.
    assert all("optuna" not in p.name.lower() for p in job_dirs(sweep))
    # The report draws sampled values with Optuna's plots (a numeric, log lr axis), not as a grid's categories.
    from sweepit.reporting import build_report

    report = build_report(sweep)
    assert (report / "optuna_slice.png").is_file() and (report / "optuna_history.png").is_file()
    assert not (report / "objective_heatmap.png").exists() and not (report / "objective_by_param.png").exists()

    proc = run_search([*args, "hydra.sweeper.n_trials=5"], tmp_path)  # the same command, more trials: resumes
    assert proc.returncode == 0, _out(proc)
    study = load(sweep, "resume_test")
    assert [t.number for t in study.trials] == [0, 1, 2, 3, 4]
    dirs = job_dirs(sweep)
    assert [p.name.split("_")[0] for p in dirs] == ["0", "1", "2", "3", "4"]
    assert {p.name: (p / "result.json").read_text() for p in dirs[:3]} == first  # nothing overwritten
    assert {t.user_attrs["job_num"] for t in study.trials} == {0, 1, 2, 3, 4}

    proc = run_search([*args, "hydra.sweeper.n_trials=5"], tmp_path)  # finished: nothing more to do
    assert proc.returncode == 0, _out(proc)
    assert len(load(sweep, "resume_test").trials) == 5


def test_int_interval_searches_integers(tmp_path: Path) -> None:
    """The released plugin's `int(interval(16, 128))`: every trial gets an integer batch size and trains (before:
    floats such as batch_size=57.3, and every trial failed)."""
    sweep = tmp_path / "s"
    proc = run_search(["optimizer=adam", "lr=0.01", "epochs=1", "batch_size=int(interval(16, 128))",
                       f"hydra.sweep.dir={sweep}", "hydra.sweeper.n_trials=2", "hydra.sweeper.sampler.seed=0",
                       "study=int_test"], tmp_path)
    assert proc.returncode == 0, _out(proc)
    trials = load(sweep, "int_test").trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    assert all(isinstance(t.params["batch_size"], int) and 16 <= t.params["batch_size"] <= 128 for t in trials)


def test_sweepits_loop_searches_two_named_metrics(tmp_path: Path) -> None:
    """train.py returns one number; hydra.sweeper.metrics names the objectives read from each job's result.json."""
    sweep = tmp_path / "s"
    proc = run_search(["optimizer=adam", "lr=tag(log, interval(1e-3, 0.1))", "epochs=1", f"hydra.sweep.dir={sweep}",
                       "hydra.sweeper.direction=[maximize,minimize]", "hydra.sweeper.metrics=[val_acc,wall_time_s]",
                       "hydra.sweeper.n_trials=3", "hydra.sweeper.sampler.seed=0", "study=mo_test"], tmp_path)
    assert proc.returncode == 0, _out(proc)
    study = load(sweep, "mo_test")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 3
    for t in study.trials:
        result = json.loads((Path(t.user_attrs["job_dir"]) / "result.json").read_text())
        assert t.values == [result["objective"], result["wall_time_s"]] and result["metric"] == "val_acc"
    assert "Pareto front (maximize val_acc, minimize wall_time_s): " in proc.stdout
    solutions = yaml.safe_load((sweep / "optimization_results.yaml").read_text())["solutions"]
    assert sorted(s["values"] for s in solutions) == sorted(t.values for t in study.best_trials)


def test_trials_start_as_soon_as_any_ends(tmp_path: Path) -> None:
    """With the local launcher a trial starts as soon as any ends, while a slower earlier trial still runs."""
    sweep = tmp_path / "s"
    proc = run_search(["optimizer=adam", "lr=tag(log, interval(1e-3, 0.1))", "epochs=choice(1,12)",
                       f"hydra.sweep.dir={sweep}", "hydra.sweeper.n_trials=6", "hydra.sweeper.n_jobs=2",
                       "hydra.launcher.n_workers=2", "hydra/sweeper/sampler=random",
                       "hydra.sweeper.sampler.seed=3", "study=async_test"], tmp_path)
    assert proc.returncode == 0, _out(proc)
    assert "batches" not in proc.stdout + proc.stderr
    trials = load(sweep, "async_test").trials
    assert len(trials) == 6 and len({t.params["epochs"] for t in trials}) == 2
    # The launcher's records (sweep.json, millisecond times): job b started after job c ended, while job a,
    # started before b, still ran. A batch of 2 would start b only after both jobs of its batch ended.
    jobs = list(iter_manifest(sweep)[1])
    assert [j["state"] for j in jobs] == ["completed"] * 6
    overlaps = [(a["num"], b["num"], c["num"]) for a in jobs for b in jobs for c in jobs
                if a["started_at"] < b["started_at"] < a["ended_at"] and c["ended_at"] < b["started_at"]]
    assert overlaps, [(j["num"], j["overrides"], j["started_at"], j["ended_at"]) for j in jobs]
    # Optuna's records agree: trial b was asked while trial a was in flight, after trial c was told.
    assert any(a.datetime_start < b.datetime_start < a.datetime_complete and c.datetime_complete < b.datetime_start
               for a in trials for b in trials for c in trials)


def test_batch_launcher_falls_back_and_says_so(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    proc = run_search(["hydra/launcher=basic", "optimizer=adam", "lr=interval(0.001, 0.01)", "epochs=1",
                       f"hydra.sweep.dir={sweep}", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2"], tmp_path)
    assert proc.returncode == 0, _out(proc)
    assert "only offers Hydra's batch launch(): trials run in batches of 2" in proc.stdout + proc.stderr
    assert proc.stdout.count("\nsweep directory: ") == 1, proc.stdout  # the table once, not again by the callback
    assert len(job_dirs(sweep)) == 2


def test_strict_pruner_prunes(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    proc = run_search([*SPACE, "lr=tag(log, interval(1e-4, 0.3))", "epochs=4", f"hydra.sweep.dir={sweep}",
                       "hydra.sweeper.n_trials=6", "hydra.sweeper.n_jobs=2", "hydra.sweeper.sampler.seed=0",
                       "hydra/sweeper/pruner=percentile", "hydra.sweeper.pruner.percentile=90",
                       "hydra.sweeper.pruner.n_startup_trials=1", "study=prune_test"], tmp_path)
    assert proc.returncode == 0, _out(proc)
    trials = load(sweep, "prune_test").trials
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert pruned, [(t.number, t.state, t.intermediate_values) for t in trials]
    for t in pruned:
        result = json.loads((Path(t.user_attrs["job_dir"]) / "result.json").read_text())
        assert result["status"] == "pruned" and result["epochs_completed"] < 4
        assert len(t.intermediate_values) == result["epochs_completed"]
        # No objective, as docs/results.md says: the value where it stopped stays in `final`, the table shows "-".
        assert result["objective"] is None and result["final"]["val_acc"] == t.intermediate_values[t.last_step]
        (row,) = [line.split() for line in proc.stdout.splitlines() if line.startswith(f"{t.user_attrs['job_num']} ")]
        assert row[row.index("pruned") + 1] == "-", row


def test_failures_tolerated_up_to_the_rate(tmp_path: Path) -> None:
    sweep = tmp_path / "ok"
    # batch_size=-1 fails the job's config check: about half the trials fail.
    common = ["optimizer=adam", "lr=0.01", "epochs=1", "hydra.sweeper.n_jobs=2", "hydra/sweeper/sampler=random",
              "hydra.sweeper.sampler.seed=0"]  # seeded: unseeded, 6 draws held no batch_size=-1 1.6% of the time
    proc = run_search([*common, "batch_size=choice(32,-1)", f"hydra.sweep.dir={sweep}", "hydra.sweeper.n_trials=6",
                       "hydra.sweeper.max_failure_rate=0.9", "study=fail_ok"], tmp_path)
    assert proc.returncode == 0, _out(proc)
    trials = load(sweep, "fail_ok").trials
    assert len(trials) == 6
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert failed and all(t.params["batch_size"] == -1 for t in failed)
    assert all(t.user_attrs["sweepit_status"] == "failed" and "batch_size" in t.user_attrs["error"] for t in failed)

    sweep = tmp_path / "stop"
    proc = run_search([*common, "batch_size=-1", "seed=choice(0,1)", f"hydra.sweep.dir={sweep}",
                       "hydra.sweeper.n_trials=20", "hydra.sweeper.failure_rate_min_trials=2", "study=fail_stop"],
                      tmp_path)
    assert proc.returncode == 1, _out(proc)
    assert "max_failure_rate=0.5" in proc.stderr and re.search(r"[23] of [23] failed", proc.stderr), _out(proc)
    assert len(load(sweep, "fail_stop").trials) in (2, 3)  # a trial in flight when the rate was crossed ends
    assert (sweep / "trials.csv").is_file()


@pytest.mark.parametrize(("args", "expected"), [
    (["lr=interval(1e-4)"], "lr"),
    (["lr=tag(log, interval(0, 1))"], "a log-scaled interval must have low > 0"),
    (["lr=tag(loud, interval(0.1, 1))"], "search-space tags must be among"),
    (["lr=interval(0.1, 1)", "hydra.sweeper.storage=sqlite:////nonexistent/dir/db.sqlite"],
     "the Optuna storage must be reachable"),
    (["lr=interval(0.1, 1)", "hydra/sweeper/sampler=grid"], "the grid sampler needs a discrete space"),
    (["lrr=interval(0.1, 1)"], "lrr"),
    (["lr=interval(0.1, 1)", "hydra/sweeper/sampler=bayes"], "Could not find 'hydra/sweeper/sampler/bayes'"),
    (["lr=interval(0.1, 1)", "hydra.sweeper.direction=[maximize,minimize]", "hydra.sweeper.metrics=[val_acc]"],
     "hydra.sweeper.metrics names one objective per direction"),
    (["lr=interval(0.1, 1)", "+hydra.sweeper.search_space.lr.type=double"],
     "hydra.sweeper.search_space.lr.type must be int, float or categorical, but got 'double'"),
    (["lr=interval(0.1, 1)", "hydra.sweeper.custom_search_space=nosuch.module.fn"],
     "hydra.sweeper.custom_search_space must name an importable class or function"),
])
def test_bad_input_fails_before_any_trial(tmp_path: Path, args: list[str], expected: str) -> None:
    sweep = tmp_path / "s"
    proc = run_search([*args, "epochs=1", f"hydra.sweep.dir={sweep}"], tmp_path, timeout=120)
    assert proc.returncode != 0, _out(proc)
    assert expected in proc.stderr, _out(proc)
    assert "Traceback" not in proc.stderr, _out(proc)
    assert not sweep.exists() or not job_dirs(sweep)


def test_study_opens_with_sqlite_url(tmp_path: Path) -> None:
    db = tmp_path / "study.db"
    proc = run_search(["optimizer=adam", "lr=tag(log, interval(1e-3, 0.1))", "epochs=1",
                       f"hydra.sweep.dir={tmp_path / 's'}", "hydra.sweeper.n_trials=2", f"hydra.sweeper.storage=sqlite:///{db}",
                       "hydra.sweeper.study_name=sql"], tmp_path)
    assert proc.returncode == 0, _out(proc)
    study = optuna.load_study(study_name="sql", storage=f"sqlite:///{db}")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2


def test_a_choice_that_does_not_compose_fails_its_trial_and_the_search_goes_on(tmp_path: Path) -> None:
    """`optimizer=choice(adam,nosuch)`: the trials that draw `nosuch` are FAIL with the composition error, counted
    as failures; the others run, and the search ends normally (no interrupted trial to retry forever)."""
    sweep = tmp_path / "bad_choice"
    proc = run_search(["optimizer=choice(adam,nosuch)", "epochs=1", "hydra/sweeper/sampler=grid",
                       "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={sweep}", "study=bad_choice"], tmp_path)
    assert proc.returncode == 0, _out(proc)
    trials = {t.params["optimizer"]: t for t in load(sweep, "bad_choice").trials}
    assert trials["adam"].state == TrialState.COMPLETE
    bad = trials["nosuch"]
    assert bad.state == TrialState.FAIL and bad.user_attrs["sweepit_status"] == "failed"
    assert "nosuch" in bad.user_attrs["error"] and "optimizer" in bad.user_attrs["error"]
    assert "failed before it started" in proc.stdout + proc.stderr
    again = run_search(["optimizer=choice(adam,nosuch)", "epochs=1", "hydra/sweeper/sampler=grid",
                        "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={sweep}", "study=bad_choice"], tmp_path)
    assert again.returncode == 0, _out(again)  # resumed: nothing left to do, nothing crashes
    assert len(load(sweep, "bad_choice").trials) == 2


# The released plugin's deprecated space, in its own words, alone and beside `params` (a config file: a command line
# cannot add `params` where the schema has null); an empty one beside `params` is warned about too, as the released
# plugin tests `is not None`.
DEPRECATED = """defaults:
  - config
  - _self_
hydra:
  sweeper:
    search_space:
"""
LR_SPACE = "      lr: {type: float, low: 0.001, high: 0.3, log: true}\n"
PARAMS = "    params:\n      optimizer: adam,sgd\n"
BOTH = "Both hydra.sweeper.params and hydra.sweeper.search_space are configured."


@pytest.mark.parametrize(("space", "params", "warned"), [
    (LR_SPACE, "", "`hydra.sweeper.search_space` is deprecated and will be removed in the next major release."),
    (LR_SPACE, PARAMS, BOTH),
    ("      {}\n", PARAMS, BOTH),
], ids=["alone", "beside-params", "empty-beside-params"])
def test_the_deprecated_search_space_is_a_python_warning_as_in_the_released_plugin(
        tmp_path: Path, space: str, params: str, warned: str) -> None:
    (tmp_path / "deprecated.yaml").write_text(DEPRECATED + space + params)
    config = ("--config-dir", str(tmp_path), "--config-name", "deprecated")
    base = ["epochs=1", "hydra.sweeper.n_trials=1"]
    caught = run_search([*base, f"hydra.sweep.dir={tmp_path / 'caught'}"], tmp_path, timeout=120, options=config,
                        python=("-W", "error::UserWarning"))
    assert caught.returncode != 0, _out(caught)  # a user's `-W error` (or pytest.warns) sees it
    assert warned in caught.stderr, _out(caught)
    assert not (tmp_path / "caught").exists() or not job_dirs(tmp_path / "caught")

    sweep = tmp_path / "warned"
    proc = run_search([*base, f"hydra.sweep.dir={sweep}", "study=warned"], tmp_path, timeout=120, options=config)
    assert proc.returncode == 0, _out(proc)
    assert f"UserWarning: {warned}" in proc.stderr, _out(proc)  # Python's own warning line, once
    assert proc.stderr.count(warned) == 1, _out(proc)
    (trial,) = load(sweep, "warned").trials
    if params:  # params win outright, as in the released plugin: the deprecated lr is left out
        assert set(trial.params) == {"optimizer"}
    else:
        assert set(trial.params) == {"lr"} and "lr: tag(log, interval(0.001, 0.3))" in proc.stderr
