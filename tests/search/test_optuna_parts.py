"""The Optuna sweeper's parts, in-process and fast: search space, samplers, pruners, storage, job-side pruning,
outcomes told to Optuna, the batch fallback, the config schema and the report section."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from hydra_plugins.sweepit._space import parse_space
from hydra_plugins.sweepit.config import PRUNER_CONFS, SAMPLER_CONFS
from sweepit.errors import ConfigError
from sweepit.reporting.optuna_section import OptunaSection
from sweepit.results import Recorder, write_study_file
from sweepit.search import _samplers as _optuna_samplers
from sweepit.search._pruning import (
    ENV_STORAGE,
    ENV_STUDY,
    ENV_TRIAL,
    PRUNER_ATTR,
    PRUNER_CLASSES,
    build_pruner,
    open_storage,
    pruning_callback,
    resolve_pruner,
)
from sweepit.search._results import write_results
from sweepit.search._samplers import (
    SAMPLER_CLASSES,
    SAMPLER_DEFAULTS,
    build_sampler,
    check_sampler,
    resolve_sampler,
)
from sweepit.search._study import failure_rate, is_counted, recover, tell
from sweepit.search._trials import BatchLauncher, read_trial
from sweepit_testing import CONF

optuna.logging.set_verbosity(optuna.logging.WARNING)


# -- search space --------------------------------------------------------------------------------------
def test_space_from_the_override_grammar() -> None:
    space = parse_space({"optimizer": "choice(adam,sgd,rmsprop)", "epochs": "3"},
                        ["lr=tag(log, interval(1e-4, 1))", "hidden=range(16,65,16)", "drop=interval(0, 0.5)",
                         "+width=tag(int, interval(8, 64))", "mom=0.8,0.9"])
    d = space.distributions
    assert d["optimizer"] == CategoricalDistribution(["adam", "sgd", "rmsprop"])
    assert d["lr"] == FloatDistribution(1e-4, 1.0, log=True)
    assert d["hidden"] == IntDistribution(16, 64, step=16)
    assert d["drop"] == FloatDistribution(0.0, 0.5)
    assert d["width"] == IntDistribution(8, 64)
    assert d["mom"] == CategoricalDistribution([0.8, 0.9])
    assert space.fixed == ["epochs=3"]
    overrides = space.overrides({"optimizer": "sgd", "lr": 0.01, "hidden": 32, "drop": 0.25, "width": 9, "mom": 0.9})
    assert overrides == ["epochs=3", "optimizer=sgd", "lr=0.01", "hidden=32", "drop=0.25", "+width=9", "mom=0.9"]


def test_the_released_plugins_integer_and_shuffle_spellings() -> None:
    """`int(interval(...))` (Hydra's int() cast) is an integer distribution, also under tag(log, ...); shuffle(...)
    is a categorical. Before: the cast ints were read as floats, and batch_size=57.3 failed every trial."""
    space = parse_space({}, ["batch_size=int(interval(16, 128))", "width=tag(log, int(interval(8, 512)))",
                             "opt=shuffle(adam,sgd)", "depth=shuffle(range(1, 4))", "drop=interval(0, 1)"])
    d = space.distributions
    assert d["batch_size"] == IntDistribution(16, 128)
    assert d["width"] == IntDistribution(8, 512, log=True)
    assert d["opt"] == CategoricalDistribution(["adam", "sgd"])
    assert d["depth"] == CategoricalDistribution([1, 2, 3])
    assert d["drop"] == FloatDistribution(0.0, 1.0)  # interval() alone stays a float, as in the released plugin
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(5):
        params = study.ask(d).params
        assert isinstance(params["batch_size"], int) and isinstance(params["width"], int)
        assert f"batch_size={params['batch_size']}" in space.overrides(params)
    assert space.overrides({"batch_size": 17, "width": 9, "opt": "sgd", "depth": 2, "drop": 0.5}) == [
        "batch_size=17", "width=9", "opt=sgd", "depth=2", "drop=0.5"]


def test_command_line_wins_over_params() -> None:
    space = parse_space({"lr": "interval(0.1, 1)"}, ["lr=interval(0.2, 0.3)"])
    assert space.distributions == {"lr": FloatDistribution(0.2, 0.3)}


@pytest.mark.parametrize(("line", "message"), [
    ("lr=interval(1e-4)", "must follow Hydra's override grammar"),
    ("lr=interval(1, 0.1)", "must have low < high"),
    ("lr=tag(log, interval(0, 1))", "must have low > 0"),
    ("lr=tag(fast, interval(0.1, 1))", "tags must be among"),
    ("lr=tag(log, range(1, 10, 2))", "log-scaled range must have step 1"),
    ("lr=range(5, 1)", "must hold at least one value"),
    ("opt=choice(a,a)", "choices must differ"),
    ("opt=tag(log, choice(a,b))", "tags apply to interval and range only"),
    ("n=tag(log, shuffle(range(1, 4)))", "tags apply to interval and range only"),
])
def test_malformed_space_is_refused(line: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_space({}, [line])


def test_grid_space() -> None:
    space = parse_space({}, ["opt=adam,sgd", "n=range(1,4)"])
    assert space.grid() == {"opt": ["adam", "sgd"], "n": [1, 2, 3]}
    assert _optuna_samplers.grid_size(space) == 6
    with pytest.raises(ConfigError, match="grid sampler needs a discrete space"):
        parse_space({}, ["lr=interval(0.1, 1)"]).grid()


# -- samplers and pruners ------------------------------------------------------------------------------
def _compose(*overrides: str) -> Any:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=["hydra/sweeper=optuna", *overrides], return_hydra_config=True)


@pytest.mark.parametrize("name", [n for n in SAMPLER_CONFS if n != "motpe"])
def test_every_sampler_option_holds_every_keyword_and_builds(name: str) -> None:
    """hydra/sweeper/sampler=<name>: a `_target_` node with every keyword of the installed Optuna class, which
    the sweeper builds (or names the package it needs)."""
    cfg = _compose(f"hydra/sweeper/sampler={name}")
    node = cfg.hydra.sweeper.sampler
    cls = getattr(optuna.samplers, node._target_.rsplit(".", 1)[1])
    assert SAMPLER_CLASSES[name] == node._target_
    keywords = set(inspect.signature(cls).parameters) - {"search_space"}  # the grid is the space
    assert keywords <= set(node), sorted(keywords - set(node))
    for key, value in SAMPLER_DEFAULTS.get(name, {}).items():
        assert node[key] == value
    sweeper = instantiate(cfg.hydra.sweeper)
    space = parse_space({}, ["opt=adam,sgd", "n=range(1,4)"])
    try:
        spec = resolve_sampler(sweeper.options.sampler)
    except ConfigError as e:
        assert "pip install" in str(e)
        return
    sampler = build_sampler(spec, 0, space)
    assert type(sampler).__name__ == cls.__name__ or isinstance(sampler, cls)
    trial = optuna.create_study(sampler=sampler).ask(space.distributions)
    assert trial.params["opt"] in ("adam", "sgd")


@pytest.mark.parametrize("name", PRUNER_CONFS)
def test_every_pruner_option_holds_every_keyword_and_builds(name: str) -> None:
    extra = ["hydra.sweeper.pruner.upper=1.0"] if name == "threshold" else []
    cfg = _compose(f"hydra/sweeper/pruner={name}", *extra)
    node = cfg.hydra.sweeper.pruner
    cls = getattr(optuna.pruners, node._target_.rsplit(".", 1)[1])
    assert PRUNER_CLASSES[name] == node._target_
    assert set(inspect.signature(cls).parameters) <= set(node)
    assert isinstance(build_pruner(instantiate(cfg.hydra.sweeper).options.pruner), cls)


def test_keywords_reach_the_optuna_objects(tmp_path: Path) -> None:
    cfg = _compose("hydra/sweeper/sampler=tpe", "hydra.sweeper.sampler.multivariate=false",
                   "hydra.sweeper.sampler.n_startup_trials=3", "hydra.sweeper.sampler.n_ei_candidates=7",
                   "hydra/sweeper/pruner=patient", "hydra.sweeper.pruner.patience=4",
                   "hydra.sweeper.pruner.wrapped_pruner._target_=optuna.pruners.PercentilePruner",
                   "+hydra.sweeper.pruner.wrapped_pruner.percentile=40")
    sweeper = instantiate(cfg.hydra.sweeper)
    sampler = build_sampler(resolve_sampler(sweeper.options.sampler), 0, parse_space({}, ["x=interval(0, 1)"]))
    assert isinstance(sampler, optuna.samplers.TPESampler)
    assert (sampler._multivariate, sampler._n_startup_trials, sampler._parzen_estimator_parameters.consider_endpoints,
            sampler._n_ei_candidates) == (False, 3, False, 7)
    pruner = build_pruner(sweeper.options.pruner)
    assert isinstance(pruner, optuna.pruners.PatientPruner) and pruner._patience == 4
    assert isinstance(pruner._wrapped_pruner, optuna.pruners.PercentilePruner)
    assert pruner._wrapped_pruner._percentile == 40


def test_sampler_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"MOTPESampler was removed in Optuna 4.*hydra/sweeper/sampler=tpe"):
        resolve_sampler({"_target_": "optuna.samplers.MOTPESampler"})
    with pytest.raises(ConfigError, match=r"_target_ must name a class or function, but optuna.samplers has no"):
        resolve_sampler({"_target_": "optuna.samplers.NoSuchSampler"})
    with pytest.raises(ConfigError, match=r"hydra.sweeper.sampler must hold arguments .*NSGAIISampler accepts, but it "
                                          r"refused {'population_size': 1, 'seed': 0}: .*population_size"):
        build_sampler(resolve_sampler({"_target_": "optuna.samplers.NSGAIISampler", "population_size": 1}), 0,
                      parse_space({}, ["x=interval(0, 1)"]))
    monkeypatch.setattr(_optuna_samplers.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="pip install cmaes"):
        check_sampler("cmaes")
    with pytest.raises(ConfigError, match="pip install scipy"):
        check_sampler("qmc")


def test_seeded_samplers_repeat() -> None:
    space = parse_space({}, ["lr=tag(log, interval(1e-4, 1))"])
    spec = resolve_sampler({"_target_": "optuna.samplers.RandomSampler"})
    draws = [optuna.create_study(sampler=build_sampler(spec, 7, space)).ask(space.distributions).params
             for _ in range(2)]
    assert draws[0] == draws[1]


def test_unknown_sweeper_key_is_refused() -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"), pytest.raises(Exception, match="n_trial"):
        compose(config_name="config", overrides=["hydra/sweeper=optuna", "hydra.sweeper.n_trial=3"],
                return_hydra_config=True)


# -- storage and job-side pruning ----------------------------------------------------------------------
def test_storage_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must be reachable"):
        open_storage(f"sqlite:///{tmp_path}/missing/dir/db.sqlite")
    with pytest.raises(ConfigError, match="journal file's folder must exist"):
        open_storage(str(tmp_path / "missing" / "optuna.journal"))


def _study(tmp_path: Path, pruner: dict[str, Any]) -> tuple[str, Any]:
    url = str(tmp_path / "optuna.journal")
    study = optuna.create_study(storage=open_storage(url), study_name="s", direction="maximize")
    study.set_user_attr(PRUNER_ATTR, pruner)
    return url, study


def test_job_reports_each_epoch_and_stops_when_pruned(tmp_path: Path) -> None:
    url, study = _study(tmp_path, {"_target_": "optuna.pruners.MedianPruner", "n_startup_trials": 1})
    good = study.ask({"x": FloatDistribution(0, 1)})
    for epoch in (1, 2, 3):
        good.report(0.9, epoch)
    study.tell(good, 0.9)
    bad = study.ask({"x": FloatDistribution(0, 1)})
    env = {ENV_STORAGE: url, ENV_STUDY: "s", ENV_TRIAL: str(bad.number)}
    on_epoch = pruning_callback(SimpleNamespace(metric="val_acc"), env)
    assert on_epoch is not None
    assert on_epoch(1, {"val_acc": 0.2}) is True  # below the median of the finished trial at epoch 1
    reloaded = optuna.load_study(study_name="s", storage=open_storage(url))
    assert reloaded.trials[bad.number].intermediate_values == {1: 0.2}


def test_no_callback_outside_a_study() -> None:
    assert pruning_callback(SimpleNamespace(metric="val_acc"), {}) is None


# -- outcomes, failure rate, recovery ------------------------------------------------------------------
def _tell_job(study: Any, job_dir: Path, result: dict[str, Any], diverged_value: float | None = None,
              metrics: list[str] | None = None) -> str:
    """A new trial whose job left `result` as its result.json, told to the study as the sweeper tells it."""
    trial = study.ask({"x": FloatDistribution(0, 1)})
    if result["status"] == "pruned":
        trial.report(0.3, 1)
    job_dir.mkdir()
    (job_dir / "result.json").write_text(json.dumps(result))
    return tell(study, trial, *read_trial(job_dir, None, metrics, len(study.directions)), diverged_value, job_dir)


def test_outcomes_told_to_optuna(tmp_path: Path) -> None:
    _, study = _study(tmp_path, {"_target_": "optuna.pruners.NopPruner"})
    results = [{"status": "completed", "objective": 0.5}, {"status": "completed", "objective": math.inf},
               {"status": "pruned", "objective": 0.3}, {"status": "diverged"}, {"status": "failed", "error": "boom"},
               {"status": "interrupted"}]
    states = [_tell_job(study, tmp_path / f"{i}_x", result) for i, result in enumerate(results)]
    assert states == ["COMPLETE", "FAIL", "PRUNED", "FAIL", "FAIL", "FAIL"]
    trials = study.get_trials()
    assert [t.user_attrs["sweepit_status"] for t in trials[:6]] == [r["status"] for r in results]
    assert trials[0].value == 0.5 and trials[0].user_attrs["job_dir"] == str(tmp_path / "0_x")
    assert trials[4].user_attrs["error"] == "boom"
    assert trials[-1].state == TrialState.WAITING  # interrupted: its parameters are enqueued again
    assert trials[-1].system_attrs["fixed_params"] == trials[5].params
    assert [is_counted(t) for t in trials] == [True] * 5 + [False, False]
    assert failure_rate(study) == (2, 5)  # completed inf and failed; not diverged, pruned or interrupted
    assert _tell_job(study, tmp_path / "6_x", {"status": "diverged"}, diverged_value=0.0) == "COMPLETE"
    assert study.trials[-1].value == 0.0


def test_multi_objective_outcomes_and_missing_values(tmp_path: Path) -> None:
    """With several objectives a trial has all its values or FAILs, a diverged one too; a completed job whose values
    are missing FAILs with why, and so does a single-objective job that returned no number."""
    storage = open_storage(str(tmp_path / "optuna.journal"))
    study = optuna.create_study(storage=storage, study_name="multi", directions=["maximize", "minimize"])
    both = {"status": "completed", "val_acc": 0.9, "final": {"wall_time_s": 3.0}}
    assert _tell_job(study, tmp_path / "0_x", both, metrics=["val_acc", "wall_time_s"]) == "COMPLETE"
    assert _tell_job(study, tmp_path / "1_x", {"status": "completed", "objectives": [0.8, 2.0]}) == "COMPLETE"
    assert _tell_job(study, tmp_path / "2_x", {"status": "diverged"}, diverged_value=0.0) == "FAIL"
    assert _tell_job(study, tmp_path / "3_x", {"status": "completed", "val_acc": 0.7},
                     metrics=["val_acc", "wall_time_s"]) == "FAIL"
    assert [t.values for t in study.trials[:2]] == [[0.9, 3.0], [0.8, 2.0]]
    missing = study.trials[3].user_attrs
    assert missing["sweepit_status"] == "completed"
    assert missing["error"].startswith("each of hydra.sweeper.metrics=['val_acc', 'wall_time_s'] must be a finite")
    single = optuna.create_study(storage=storage, study_name="single", direction="maximize")
    assert _tell_job(single, tmp_path / "4_x", {"status": "completed", "returned": "'text'"}) == "FAIL"
    assert single.trials[0].user_attrs["error"] == "the job returned 'text', not a number"


def test_recover_reads_finished_jobs_and_retries_others(tmp_path: Path) -> None:
    _, study = _study(tmp_path, {"_target_": "optuna.pruners.NopPruner"})
    dist = {"x": FloatDistribution(0, 1)}
    done, lost = study.ask(dist), study.ask(dist)
    job = tmp_path / "0_x=1"
    job.mkdir()
    (job / "result.json").write_text(json.dumps({"status": "completed", "objective": 0.7}))
    done.set_user_attr("job_num", 0)
    lost.set_user_attr("job_num", 1)
    assert recover(study, tmp_path, None) == 2
    trials = study.get_trials()
    assert trials[0].state == TrialState.COMPLETE and trials[0].value == 0.7
    assert trials[1].state == TrialState.FAIL and trials[1].user_attrs["sweepit_status"] == "interrupted"
    assert trials[2].state == TrialState.WAITING


def test_read_trial_without_result_file() -> None:
    assert read_trial(None, None)[0].status == "failed"
    record, values = read_trial(None, SimpleNamespace(return_value=0.25))
    assert (record.status, record.objective, record.recorded_by, values) == ("completed", 0.25, Recorder.SWEEPER,
                                                                              [0.25])


def test_batch_fallback_launches_consecutive_runs() -> None:
    calls: list[tuple[list[list[str]], int]] = []

    class Batch:
        def launch(self, job_overrides: list[list[str]], initial_job_idx: int) -> list[str]:
            calls.append((list(job_overrides), initial_job_idx))
            return [f"r{initial_job_idx + i}" for i in range(len(job_overrides))]

    runner = BatchLauncher(Batch())
    for num in (4, 5, 7):
        runner.start([f"a={num}"], num)
    assert runner.wait_any() == [(4, "r4"), (5, "r5"), (7, "r7")]
    assert calls == [([["a=4"], ["a=5"]], 4), ([["a=7"]], 7)]


# -- results and report --------------------------------------------------------------------------------
def test_results_and_report_section(tmp_path: Path) -> None:
    url, study = _study(tmp_path, {"_target_": "optuna.pruners.NopPruner"})
    space = parse_space({}, ["optimizer=adam,sgd", "lr=tag(log, interval(1e-4, 1))"])
    for i in range(8):
        trial = study.ask(space.distributions)
        trial.set_user_attr("overrides", space.overrides(trial.params))
        for epoch in (1, 2):
            trial.report(0.4 + 0.05 * i * epoch / 2, epoch)
        study.tell(trial, 0.5 + 0.05 * i)
    pruned = study.ask(space.distributions)
    pruned.report(0.1, 1)
    study.tell(pruned, state=optuna.trial.TrialState.PRUNED)
    info = {"storage": url, "study_name": "s", "metric": "val_acc", "command": "python train.py",
            "sampler": {"_target_": "optuna.samplers.TPESampler"},
            "pruner": {"_target_": "optuna.pruners.NopPruner"}, "space": {"lr": "tag(log, interval(1e-4, 1))"}}
    write_study_file(tmp_path, info)
    best_yaml, csv_path, results_yaml = write_results(tmp_path, study, info)
    assert "best_trial: 7" in best_yaml.read_text()
    # the released hydra-optuna-sweeper's file, as its scripts read it
    assert yaml.safe_load(results_yaml.read_text()) == {"name": "optuna", "best_params": study.best_params,
                                                        "best_value": study.best_value}
    assert csv_path.read_text().count("\n") == 10  # header, 8 complete trials and the pruned one
    out = tmp_path / "report"
    out.mkdir()
    sweep = SimpleNamespace(sweep_dir=tmp_path, metric="val_acc")
    section = OptunaSection().build(sweep, out)  # type: ignore[arg-type]
    assert section is not None and not section.notes, section and section.notes
    # Optuna's own plots: numeric axes for the log-uniform lr (slice, contour), pruned trials in the history
    # and the intermediate values
    assert [f.path.name for f in section.figures] == ["optuna_history.png", "optuna_intermediate.png",
                                                     "optuna_slice.png", "optuna_importances.png",
                                                     "optuna_contour.png", "optuna_parallel.png"]
    for figure in section.figures:
        assert figure.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.path.stat().st_size > 5000
    assert section.command.startswith("python train.py optimizer=")
    assert OptunaSection().build(SimpleNamespace(sweep_dir=out, metric="x"), out) is None  # type: ignore[arg-type]


def test_study_file_composes() -> None:
    from sweepit_testing import REPO

    with initialize_config_dir(config_dir=str(REPO / "sweeps"), version_base="1.3"):
        cfg = compose(config_name="optuna_lr", return_hydra_config=True, overrides=[f"hydra.searchpath=[file://{CONF}]"])
    sweeper = instantiate(cfg.hydra.sweeper)
    assert sweeper.params == {"optimizer": "choice(adam,sgd,rmsprop)", "lr": "tag(log, interval(1e-4, 1))"}
    assert resolve_pruner(sweeper.options.pruner) == {"_target_": "optuna.pruners.HyperbandPruner", "min_resource": 1,
                                                      "reduction_factor": 3, "bootstrap_count": 0}
    assert resolve_sampler(sweeper.options.sampler)["seed"] == 0 and cfg.study == "optuna_lr"
    space = parse_space(sweeper.params, [])
    assert space.distributions["lr"] == FloatDistribution(1e-4, 1.0, log=True)
    # The study leaves the pruner's keys to its group option, so another pruner replaces it whole.
    with initialize_config_dir(config_dir=str(REPO / "sweeps"), version_base="1.3"):
        cfg = compose(config_name="optuna_lr", return_hydra_config=True,
                      overrides=[f"hydra.searchpath=[file://{CONF}]", "hydra/sweeper/pruner=none"])
    assert resolve_pruner(instantiate(cfg.hydra.sweeper).options.pruner)["_target_"] == "optuna.pruners.NopPruner"


def test_local_launcher_runs_trials_one_by_one() -> None:
    from hydra_plugins.sweepit.local_launcher import LocalLauncher
    from sweepit.search._trials import AsyncLauncher

    assert isinstance(LocalLauncher(), AsyncLauncher)
    assert not isinstance(BatchLauncher(None).launcher, AsyncLauncher)


def test_the_deprecated_search_space_reads_as_params() -> None:
    from hydra_plugins.sweepit._space import from_search_space

    params = from_search_space({"lr": {"type": "float", "low": 1e-4, "high": 1, "log": True},
                                "drop": {"type": "float", "low": 0, "high": 0.5, "step": 0.25},
                                "width": {"type": "int", "low": 8, "high": 64, "log": True},
                                "depth": {"type": "int", "low": 1, "high": 4},
                                "opt": {"type": "categorical", "choices": ["adam", "sgd", True]}})
    d = parse_space(params, []).distributions
    assert d == {"lr": FloatDistribution(1e-4, 1.0, log=True), "drop": FloatDistribution(0.0, 0.5, step=0.25),
                 "width": IntDistribution(8, 64, log=True), "depth": IntDistribution(1, 4),
                 "opt": CategoricalDistribution(["adam", "sgd", True])}
    with pytest.raises(ConfigError, match=r"search_space.lr.type must be int, float or categorical, but got 'double'"):
        from_search_space({"lr": {"type": "double", "low": 0, "high": 1}})
    with pytest.raises(ConfigError, match=r"search_space.lr must give numbers `low` and `high` for type float"):
        from_search_space({"lr": {"type": "float", "low": 0}})
