"""What a user does once a study has ended: `sweepit status` (pruned trials are ends, not failures), `sweepit resume`
(nothing left to run, or more trials with `hydra.sweeper.n_trials`), and the best trial's reproduce line, also for a
project whose own config group makes the search (lightning-hydra-template's `hparams_search=mnist_optuna`). Real
drivers, `sweepit` commands and single runs in subprocesses; the apps are torch-free."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from optuna.trial import TrialState
from optuna_testing import load

from sweepit_testing import REPO, SWEEPIT

pytestmark = pytest.mark.slow

APP = Path(__file__).parent / "app" / "plain_app.py"
# The local launcher with nothing preloaded: the apps need no torch.
LOCAL = ["hydra/launcher=local", "hydra.launcher.preload=[]", "hydra.launcher.n_workers=2"]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def test_pruned_trials_are_ends_and_a_finished_study_says_how_to_search_on(tmp_path: Path) -> None:
    sweep = tmp_path / "p"
    _ok(_run([sys.executable, str(APP.with_name("pruning_app.py")), "-m", *LOCAL, "hydra/sweeper=optuna",
              "x=choice(-1,1)", "hydra/sweeper/sampler=grid", "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={sweep}"],
             tmp_path))
    assert sorted(t.state.name for t in load(sweep, "sweepit").trials) == ["COMPLETE", "PRUNED"]

    status = _ok(_run([SWEEPIT, "status", str(sweep)], tmp_path))
    assert "2 jobs: 1 completed, 1 pruned" in status, status
    assert "did not complete" not in status and "sweepit resume" not in status, status

    resumed = _ok(_run([SWEEPIT, "resume", str(sweep)], tmp_path))
    assert "has tried every point of its grid (2): nothing to run" in resumed, resumed
    assert len(load(sweep, "sweepit").trials) == 2


def test_a_resume_raises_n_trials_to_search_on_in_the_same_study(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    _ok(_run([sys.executable, str(APP), "-m", *LOCAL, "hydra/sweeper=optuna", "x=interval(-1, 1)", "y=choice(0,5)",
              "hydra.sweeper.n_trials=2", "hydra/sweeper/sampler=random", "hydra.sweeper.sampler.seed=0",
              f"hydra.sweep.dir={sweep}"], tmp_path))
    said = _ok(_run([SWEEPIT, "resume", str(sweep)], tmp_path))
    assert "has its hydra.sweeper.n_trials=2 trials already" in " ".join(said.split()), said
    assert f"sweepit resume {sweep} hydra.sweeper.n_trials=4" in " ".join(said.split()), said

    _ok(_run([SWEEPIT, "resume", str(sweep), "hydra.sweeper.n_trials=3"], tmp_path))
    study = load(sweep, "sweepit")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 3
    assert sorted(t.user_attrs["job_num"] for t in study.trials) == [0, 1, 2]
    assert sorted(p.name.split("_")[0] for p in sweep.iterdir() if p.name[0].isdigit()) == ["0", "1", "2"]

    refused = _run([SWEEPIT, "resume", str(sweep), "x=0.5"], tmp_path)
    assert refused.returncode == 2 and "hydra.sweeper.n_trials=40" in refused.stderr, refused.stderr


def _docs_target_override() -> str:
    """The one line docs/howto-hydra-plugins.md tells a project with the released plugin's `_target_` to add."""
    page = (REPO / "docs" / "howto-hydra-plugins.md").read_text()
    found = re.findall(r"hydra\.sweeper\._target_=\S+?(?=`| )", page)
    assert found, "docs/howto-hydra-plugins.md must show the hydra.sweeper._target_ override for such a project"
    return found[0]


def test_a_projects_own_search_config_runs_and_its_best_trial_reproduces_as_one_run(tmp_path: Path) -> None:
    """A config group option in lightning-hydra-template's habit (hparams_search=plain_optuna: `# @package
    _global_`, hydra.mode MULTIRUN, the released plugin's `_target_`, its own `params`), swept by sweepit's sweeper
    with the override docs/howto-hydra-plugins.md gives, without -m. Each printed reproduce line runs as printed: one
    run with the best trial's values, no new sweep."""
    sweep = tmp_path / "lht"
    out = _ok(_run([sys.executable, str(APP), "hparams_search=plain_optuna", _docs_target_override(), *LOCAL,
                    f"hydra.sweep.dir={sweep}"], tmp_path))
    study = load(sweep, "sweepit")
    assert len(study.trials) == 3 and study.direction.name == "MAXIMIZE"  # the group's n_trials and direction
    best = study.best_trial

    lines = {"the sweep's end": re.findall(r"^reproduce: (.+)$", out, re.MULTILINE)}
    lines["sweepit summary"] = re.findall(r"^reproduce: (.+)$", _ok(_run([SWEEPIT, "summary", str(sweep)], tmp_path)),
                                          re.MULTILINE)
    _ok(_run([SWEEPIT, "report", str(sweep)], tmp_path))
    page = (sweep / "report" / "summary.md").read_text()
    lines["summary.md"] = re.findall(r"as one run:\n\n```bash\n(.+)\n```", page)
    lines["best_params.yaml"] = [yaml.safe_load((sweep / "best_params.yaml").read_text())["command"]]
    commands = {line for found in lines.values() for line in found}
    assert all(found for found in lines.values()) and len(commands) == 1, lines  # each says the same
    [command] = commands
    assert "hparams_search=plain_optuna" in command, command  # the job's config came from it too

    single = _run(["bash", "-c", command], tmp_path)  # as a user pastes it, where the sweep ran
    _ok(single)
    runs = list((tmp_path / "outputs").glob("*/*/.hydra/config.yaml"))
    assert len(runs) == 1, runs  # one single run ...
    config = yaml.safe_load(runs[0].read_text())
    assert (config["x"], config["y"]) == pytest.approx((best.params["x"], best.params["y"]))  # ... of the best trial
    assert not (tmp_path / "multirun").exists() and len(load(sweep, "sweepit").trials) == 3  # and no new search
