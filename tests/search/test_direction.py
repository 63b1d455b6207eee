"""The objective's direction comes from one place: every "best" sweepit prints (the sweeper's last lines,
`sweepit summary`, the report, `sweepit ls`) names the trial that Optuna's study holds best, also for a plain
app that writes no result.json and has no `direction` in its config."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from optuna_testing import load

from sweepit.cli import main as sweepit_main
from sweepit.reporting import load_sweep
from sweepit.reporting.listing import list_sweeps
from sweepit.reporting.table import best_lines

pytestmark = pytest.mark.slow

APP = Path(__file__).parent / "app" / "plain_app.py"
# The local launcher with nothing preloaded: the app needs no torch.
LOCAL = ["hydra/launcher=local", "hydra.launcher.preload=[]", "hydra.launcher.n_workers=2"]
BEST_LINE = re.compile(r"^best \((\w+) (\w+)\): job (\d+) = (\S+)", re.MULTILINE)


def run_app(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    proc = subprocess.run([sys.executable, str(APP), "-m", *LOCAL, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return proc


def best_of(text: str) -> tuple[str, int, str]:
    """(direction, job, value) of the summary's best line in `text`."""
    found = BEST_LINE.findall(text)
    assert len(found) == 1, text
    direction, _metric, job, value = found[0]
    return direction, int(job), value


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_every_best_is_the_studys(tmp_path: Path, direction: str, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "s"
    proc = run_app(["hydra/sweeper=optuna", f"hydra.sweeper.direction={direction}", "x=interval(-1, 1)",
                    "y=choice(0,5)", "hydra.sweeper.n_trials=6", "hydra.sweeper.n_jobs=2",
                    "hydra/sweeper/sampler=random", "hydra.sweeper.sampler.seed=0",
                    f"hydra.sweep.dir={sweep}"], tmp_path)
    study = load(sweep, "sweepit")
    best = study.best_trial
    assert study.direction.name.lower() == direction
    values = [t.value for t in study.trials]
    assert best.value == (max(values) if direction == "maximize" else min(values))
    assert not any("direction" in (p / "result.json").read_text() for p in sweep.iterdir() if p.name.isdigit())
    expected = (direction, best.user_attrs["job_num"], f"{best.value:.4g}")

    assert best_of(proc.stdout) == expected  # the sweeper's last lines
    assert (f"Optuna: best trial {best.number} (job {best.user_attrs['job_num']}): {direction} objective = "
            f"{best.value:.4g}") in proc.stdout
    assert sweepit_main(["summary", str(sweep)]) == 0
    assert best_of(capsys.readouterr().out) == expected
    report = load_sweep(sweep)
    assert report.direction == direction and report.best is not None and report.best.num == expected[1]
    assert best_of(best_lines(report)[0]) == expected
    [listed] = list_sweeps(tmp_path)
    assert listed.best is not None and listed.best.num == expected[1]


def test_a_grid_of_a_plain_app_minimizes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No sweeper direction and no `direction` in the config: "best" is the smallest value (Optuna's default)."""
    sweep = tmp_path / "g"
    proc = run_app(["x=0.5,-0.25,0.75", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert best_of(proc.stdout) == ("minimize", 1, "-0.25")
    assert sweepit_main(["summary", str(sweep)]) == 0
    assert best_of(capsys.readouterr().out) == ("minimize", 1, "-0.25")
    report = load_sweep(sweep)
    assert report.direction == "minimize" and report.best is not None and report.best.num == 1


def test_a_task_that_raises_trial_pruned_ends_as_pruned_not_failed(tmp_path: Path) -> None:
    sweep = tmp_path / "p"
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    proc = subprocess.run([sys.executable, str(APP.with_name("pruning_app.py")), "-m", *LOCAL, "hydra/sweeper=optuna",
                           "x=choice(-1,1)", "hydra/sweeper/sampler=grid", "hydra.sweeper.n_trials=2",
                           f"hydra.sweep.dir={sweep}"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]  # a pruned trial is a result, not a failure
    states = {t.params["x"]: t.state.name for t in load(sweep, "sweepit").trials}
    assert states == {-1: "PRUNED", 1: "COMPLETE"}
    statuses = {p.name.split("_")[0]: json.loads((p / "result.json").read_text())["status"]
                for p in sweep.iterdir() if p.name[0].isdigit()}
    assert sorted(statuses.values()) == ["completed", "pruned"]
