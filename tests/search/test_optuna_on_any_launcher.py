"""The Optuna sweeper driving a plain Hydra app (no sweepit in its config, so no callback writes result.json) on
Hydra's own `basic` launcher: every reader (the end-of-sweep table, `sweepit summary`, the study itself) names the
same values and the same best job, and a task returning a tuple searches several objectives. Real subprocesses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from optuna.trial import TrialState
from optuna_testing import load

from sweepit_testing import REPO

pytestmark = pytest.mark.slow

APP = REPO / "examples" / "any_hydra_app" / "app.py"
# The released plugin's multi-objective example (Binh and Korn), as a user would write it: a tuple returned.
BINH_KORN = '''import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path=".", config_name="config")
def main(cfg: DictConfig) -> tuple[float, float]:
    v0 = 4 * cfg.x**2 + 4 * cfg.y**2
    v1 = (cfg.x - 5) ** 2 + (cfg.y - 5) ** 2
    return v0, v1


if __name__ == "__main__":
    main()
'''


# The released plugin's single-objective example (sphere.py), as a user would write it.
SPHERE = '''import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path=".", config_name="config")
def sphere(cfg: DictConfig) -> float:
    return cfg.x**2 + cfg.y**2


if __name__ == "__main__":
    sphere()
'''


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def test_the_released_plugins_example_runs_under_python_w_error(tmp_path: Path) -> None:
    """`python -W error`, as the released plugin's own tests run its example: the default sampler (TPE with
    sweepit's multivariate and constant_liar, experimental arguments in Optuna 4) warns the user of nothing."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "sphere.py").write_text(SPHERE)
    (app / "config.yaml").write_text("x: 1.0\ny: 1.0\n")
    sweep = tmp_path / "sweep"
    proc = _run(["-W", "error", str(app / "sphere.py"), "-m", "hydra/sweeper=optuna", "hydra/launcher=basic",
                 "x=range(-5.5, 5.5, step=0.5)", "y=choice(-5, 0, 5)", "hydra.sweeper.n_trials=3",
                 "hydra.sweeper.sampler.seed=123", "hydra.sweeper.study_name=sphere", f"hydra.sweep.dir={sweep}"],
                tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [t.state for t in load(sweep, "sphere").trials] == [TrialState.COMPLETE] * 3


def test_a_plain_app_on_hydras_basic_launcher_gets_its_values_and_best_in_every_table(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = _run([str(APP), "-m", "hydra/sweeper=optuna", "hydra/launcher=basic", "x=interval(-2, 2)", "y=range(0, 4)",
                 "hydra.sweeper.n_trials=4", "hydra.sweeper.direction=minimize", "hydra.sweeper.sampler.seed=0",
                 "hydra.sweeper.study_name=plain", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    best = load(sweep, "plain").best_trial
    assert all(t.state == TrialState.COMPLETE for t in load(sweep, "plain").trials)
    job = best.user_attrs["job_num"]
    out = proc.stdout
    assert "4 jobs: 4 completed" in out, out
    shown = re.search(r"best \(minimize objective\): job (\d+) = (\S+)", out)
    assert shown, out
    assert int(shown.group(1)) == job and float(shown.group(2)) == pytest.approx(best.value, rel=1e-3), out
    summary = _run(["-m", "sweepit.cli", "summary", str(sweep)], tmp_path)
    assert "4 jobs: 4 completed" in summary.stdout and f"job {job} = " in summary.stdout, summary.stdout


def test_a_task_returning_a_tuple_searches_a_pareto_front_on_the_basic_launcher(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "binh_korn.py").write_text(BINH_KORN)
    (app / "config.yaml").write_text("x: 0.0\ny: 0.0\n")
    sweep = tmp_path / "sweep"
    proc = _run([str(app / "binh_korn.py"), "-m", "hydra/sweeper=optuna", "hydra/launcher=basic",
                 "x=range(0, 5)", "y=range(0, 3)", "hydra.sweeper.direction=[minimize,minimize]",
                 "hydra.sweeper.n_trials=6", "hydra.sweeper.sampler.seed=0", "hydra.sweeper.study_name=bk",
                 f"hydra.sweep.dir={sweep}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = load(sweep, "bk")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 6
    assert all(t.values == [4 * t.params["x"] ** 2 + 4 * t.params["y"] ** 2,
                            (t.params["x"] - 5) ** 2 + (t.params["y"] - 5) ** 2] for t in study.trials)
    front = {t.user_attrs["job_num"] for t in study.best_trials}
    assert "6 jobs: 6 completed" in proc.stdout, proc.stdout
    printed = re.search(r"Pareto front \(minimize value 0, minimize value 1\): (\d+) job\(s\)", proc.stdout)
    assert printed and int(printed.group(1)) == len(front), proc.stdout
    assert {int(n) for n in re.findall(r"^  job (\d+): ", proc.stdout, re.MULTILINE)} == front, proc.stdout
