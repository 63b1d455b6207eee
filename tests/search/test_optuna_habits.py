"""What users of Hydra's released Optuna plugin rely on, through real multiruns in this process (Hydra's sweep
runner, sweepit's local launcher forking each job): the search's own bookkeeping never shows as an override."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.test_utils.test_utils import TSweepRunner
from omegaconf import DictConfig

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hydra_default_version_base")]


def _task(cfg: DictConfig) -> float:
    """Writes what the job sees of its trial (the pruning channel) into its directory."""
    out = Path(HydraConfig.get().runtime.output_dir)
    seen = {k: v for k, v in os.environ.items() if k.startswith("SWEEPIT_OPTUNA_")}
    (out / "env.json").write_text(json.dumps(seen))
    return float(cfg.x)


@pytest.mark.parametrize("launcher", ["local", "basic"])
def test_the_trials_environment_is_never_an_override(hydra_sweep_runner: TSweepRunner, tmp_path: Path,
                                                     capfd: pytest.CaptureFixture[str], launcher: str) -> None:
    sweep_dir = tmp_path / "sweep"
    extra = ["hydra.launcher.preload=[]", "hydra.launcher.n_workers=1"] if launcher == "local" else []
    sweep = hydra_sweep_runner(calling_file=None, calling_module="hydra.test_utils.a_module", config_path="configs",
                               config_name=None, task_function=_task, temp_dir=str(sweep_dir),
                               overrides=["hydra/sweeper=optuna", f"hydra/launcher={launcher}", *extra,
                                          "+x=interval(-1, 1)", "hydra.sweeper.n_trials=2",
                                          "hydra/sweeper/sampler=random", "hydra.sweeper.sampler.seed=0"])
    with sweep:  # the runner removes the sweep directory at the end of the block
        assert sweep.returns is not None
        returns = [r for batch in sweep.returns for r in batch]
        envs = [json.loads((sweep_dir / str(n) / "env.json").read_text()) for n in (0, 1)]
        hydra_overrides = [yaml.safe_load((sweep_dir / str(n) / ".hydra" / "hydra.yaml").read_text())["hydra"]
                           ["overrides"]["hydra"] for n in (0, 1) if launcher == "local"]
        manifest = json.loads((sweep_dir / "sweep.json").read_text()) if launcher == "local" else {"jobs": []}
    assert len(returns) == 2
    for ret in returns:  # what Hydra and other plugins get back: the searched value, nothing of the search's
        assert len(ret.overrides) == 1 and ret.overrides[0].startswith("+x="), ret.overrides
    assert [e["SWEEPIT_OPTUNA_TRIAL"] for e in envs] == ["0", "1"]  # the job still learns its trial (pruning)
    assert not any("SWEEPIT" in o for overrides in hydra_overrides for o in overrides), hydra_overrides
    if launcher == "local":
        assert [len(j["overrides"]) for j in manifest["jobs"]] == [1, 1], manifest["jobs"]
        printed = capfd.readouterr()
        assert "env_set" not in printed.out + printed.err and "job  x" in printed.out


def _two_objectives(cfg: DictConfig) -> list[float]:
    """The released plugin's multi-objective habit: the task returns one value per direction."""
    return [float(cfg.x) ** 2, (float(cfg.x) - 1.0) ** 2]


def test_several_objectives_give_a_pareto_front_everywhere(hydra_sweep_runner: TSweepRunner, tmp_path: Path,
                                                           capfd: pytest.CaptureFixture[str]) -> None:
    from optuna_testing import load

    from sweepit.cli import main as sweepit_main
    from sweepit.reporting import load_sweep
    from sweepit.reporting.optuna_section import OptunaSection

    sweep_dir = tmp_path / "sweep"
    sweep = hydra_sweep_runner(calling_file=None, calling_module="hydra.test_utils.a_module", config_path="configs",
                               config_name=None, task_function=_two_objectives, temp_dir=str(sweep_dir),
                               overrides=["hydra/sweeper=optuna", "hydra/launcher=local", "hydra.launcher.preload=[]",
                                          "hydra.launcher.n_workers=2", "+x=interval(-1, 2)",
                                          "hydra.sweeper.direction=[minimize,minimize]", "hydra.sweeper.n_trials=6",
                                          "hydra.sweeper.n_jobs=2", "hydra/sweeper/sampler=random",
                                          "hydra.sweeper.sampler.seed=0"])
    with sweep:  # the runner removes the sweep directory at the end of the block
        study = load(sweep_dir, "sweepit")
        front = sorted(study.best_trials, key=lambda t: t.number)
        assert [d.name for d in study.directions] == ["MINIMIZE", "MINIMIZE"]
        assert len(study.trials) == 6 and all(t.state.name == "COMPLETE" and len(t.values) == 2 for t in study.trials)
        # the released plugin's file
        results = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
        assert results["name"] == "optuna" and set(results) == {"name", "solutions"}
        assert sorted((s["params"]["x"], s["values"]) for s in results["solutions"]) == sorted(
            (t.params["x"], t.values) for t in front)
        best = yaml.safe_load((sweep_dir / "best_params.yaml").read_text())
        assert [p["trial"] for p in best["pareto_front"]] == [t.number for t in front]
        assert all(p["command"].startswith("python ") and "+x=" in p["command"] for p in best["pareto_front"])
        header, *lines = (sweep_dir / "trials.csv").read_text().splitlines()
        assert header.startswith("trial,state,status,value_0,value_1,pareto,")
        assert sum(line.split(",")[5] == "True" for line in lines) == len(front)
        # the printed summary, `sweepit summary` and the report name the same jobs
        jobs = {t.user_attrs["job_num"] for t in front}
        printed = capfd.readouterr().out
        assert f"Pareto front (minimize value 0, minimize value 1): {len(front)} job(s)" in printed
        assert {int(n) for n in re.findall(r"^  job (\d+): value 0=", printed, re.MULTILINE)} == jobs, printed
        assert sweepit_main(["summary", str(sweep_dir)]) == 0
        assert {int(n) for n in re.findall(r"^  job (\d+): ", capfd.readouterr().out, re.MULTILINE)} == jobs
        out = tmp_path / "report"
        out.mkdir()
        section = OptunaSection().build(load_sweep(sweep_dir), out)
        assert section is not None and not section.notes, section and section.notes
        assert [f.path.name for f in section.figures] == ["optuna_pareto.png"]
        head = f"Pareto front (minimize value 0, minimize value 1): {len(front)} trial(s)"
        assert any(head in line for line in section.text)


def _with_momentum(cfg: DictConfig) -> float:
    momentum = cfg.get("momentum")
    assert (momentum is not None) == (cfg.opt == "sgd"), cfg
    return float(cfg.x) + (momentum or 0.0) + cfg.y - 1


def test_custom_search_space_and_the_deprecated_search_space(hydra_sweep_runner: TSweepRunner, tmp_path: Path) -> None:
    """`custom_search_space` adds a conditional parameter through the trial; `search_space` (the released plugin's
    dict form) is read as params, with the released plugin's UserWarning, which shows them."""
    from optuna_testing import load

    sweep_dir = tmp_path / "sweep"
    sweep = hydra_sweep_runner(calling_file=__file__, calling_module=None, config_path="app/conf",
                               config_name="config", task_function=_with_momentum, temp_dir=str(sweep_dir),
                               overrides=["hydra/sweeper=optuna", "hydra/launcher=local", "hydra.launcher.preload=[]",
                                          "hydra.launcher.n_workers=2", "+opt=choice(adam,sgd)",
                                          "++hydra.sweeper.search_space={x: {type: float, low: 0, high: 1}, "
                                          "y: {type: int, low: 1, high: 9, step: 4}}", "y=1",
                                          "hydra.sweeper.custom_search_space=optuna_testing.conditional_space",
                                          "hydra.sweeper.n_trials=6", "hydra.sweeper.n_jobs=2",
                                          "hydra/sweeper/sampler=random", "hydra.sweeper.sampler.seed=1"])
    with pytest.warns(UserWarning, match="`hydra.sweeper.search_space` is deprecated") as warned, sweep:
        trials = load(sweep_dir, "sweepit").trials
    said = "\n".join(str(w.message) for w in warned)
    assert "    x: interval(0.0, 1.0)" in said and "    y: range(1, 10, 4)" in said
    assert [t.state.name for t in trials] == ["COMPLETE"] * 6, [t.user_attrs.get("error") for t in trials]
    assert {t.params["opt"] for t in trials} == {"adam", "sgd"}
    assert all(("+momentum" in t.params) == (t.params["opt"] == "sgd") for t in trials)
    for t in trials:
        assert "y" not in t.params  # the command line's fixed y=1 wins over the search_space entry
        if t.params["opt"] == "sgd":
            assert t.user_attrs["overrides"][-1] == f"+momentum={t.params['+momentum']!r}"
            assert t.value == pytest.approx(t.params["x"] + t.params["+momentum"])
