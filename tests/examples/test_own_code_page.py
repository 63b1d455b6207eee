"""docs/own-code.md's own-loop project, built from the page's code blocks alone and run as its user runs it: the one
config line (`- sweepit`) brings sweepit's launcher, table, report, job folders and a single run's result.json; a
"best" judged in a direction nobody chose says so and names the key; a pruner that would hear nothing is refused
before any trial. Real multiruns in subprocesses, tiny data, 2 epochs; the Slurm runs are in tests/slurm."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from own_code_page import run_app, sweep_dirs, write_page_app
from sweepit.results._summary import collect
from sweepit_testing import SWEEPIT, child_env, run_command

# make test-slow: make test covers their paths through the example's own loop (tests/examples), the Slurm run of this
# page's project (tests/slurm/test_examples_on_slurm.py) and the fast tests of every reader's default-direction line.
pytestmark = [pytest.mark.slow, pytest.mark.tier_slow]

TINY = ["epochs=2", "n_samples=400"]
NO_OBJECTIVE = ["~metric", "~direction"]  # the page's config without the two keys a new user leaves out
DEFAULT_WARNING = "warning: minimize is sweepit's default, as the config sets no `direction`"


def test_the_pages_project_sweeps_with_one_config_line_and_a_single_run_writes_its_record(tmp_path: Path) -> None:
    app = write_page_app(tmp_path)
    proc = run_app(app, "-m", "lr=0.03,0.3")  # the page's command, word for word
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = sweep_dirs(tmp_path)
    assert sorted(p.name for p in sweep.iterdir() if p.name[0].isdigit()) == ["0_lr=0.03", "1_lr=0.3"]
    done = {row.num: row.result for row in collect(sweep)}
    assert [(r["status"], r["epochs_completed"]) for r in done.values()] == [("completed", 5)] * 2, done
    assert (sweep / "sweep.json").is_file(), "sweepit's launcher ran the jobs, not Hydra's basic one"
    best = max(done, key=lambda n: done[n]["objective"])
    assert f"best (maximize val_acc): job {best} = " in proc.stdout and DEFAULT_WARNING not in proc.stdout
    assert (sweep / "report" / "index.html").is_file()
    listing = run_command([SWEEPIT, "ls"], tmp_path, child_env(), 60).stdout
    assert "2 jobs: 2 completed" in listing, listing

    single = run_app(app, "epochs=1", "n_samples=400")
    assert single.returncode == 0, single.stderr[-3000:]
    (record,) = (tmp_path / "outputs").glob("2*/*/result.json")  # Hydra's run folder: outputs/<date>/<time>
    result = json.loads(record.read_text())
    assert result["status"] == "completed" and result["epochs_completed"] == 1
    assert result["objective"] == result["final"]["val_acc"] and result["metric"] == "val_acc"


def test_a_best_in_the_default_direction_says_so_everywhere_it_is_printed(tmp_path: Path) -> None:
    """A new user's config without `metric` and `direction`: the app returns an accuracy, sweepit minimizes it. The
    grid's end, `sweepit summary`, the report and an Optuna search say that the direction is the default and which
    key changes it."""
    app = write_page_app(tmp_path)
    proc = run_app(app, "-m", "lr=0.03,0.3", *TINY, *NO_OBJECTIVE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = sweep_dirs(tmp_path)
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("best (minimize objective): job "))
    assert lines[at + 1].startswith(DEFAULT_WARNING) and "Add `direction: maximize`" in lines[at + 1], lines[at:]
    summary = run_command([SWEEPIT, "summary", str(sweep)], tmp_path, child_env(), 60)
    assert DEFAULT_WARNING in summary.stdout, summary.stdout
    assert DEFAULT_WARNING in (sweep / "report" / "summary.md").read_text()
    listing = run_command([SWEEPIT, "ls"], tmp_path, child_env(), 60).stdout
    assert " *" in listing and "*: minimize is sweepit's default" in listing, listing

    study = tmp_path / "study"
    proc = run_app(app, "-m", "hydra/sweeper=optuna", "lr=interval(0.01, 0.5)", "hydra.sweeper.n_trials=2",
                   "hydra.sweeper.n_jobs=2", f"hydra.sweep.dir={study}", *TINY, "~direction")
    assert proc.returncode == 0, proc.stderr[-3000:]
    opened = proc.stdout.index("Optuna study 'sweepit'")
    assert "minimize is sweepit's default" in proc.stdout[:opened]  # Hydra's log: as the study opens, before any trial
    assert DEFAULT_WARNING in proc.stdout[opened:] and "best trial" in proc.stdout
    assert DEFAULT_WARNING in run_command([SWEEPIT, "summary", str(study)], tmp_path, child_env(), 60).stdout
    page = (study / "report" / "summary.md").read_text()
    assert page.count(DEFAULT_WARNING) == 2 and "best (minimize val_acc): " in page  # its results and its study


def test_a_pruner_that_would_hear_nothing_is_refused_and_one_that_hears_prunes(tmp_path: Path) -> None:
    """hydra/sweeper/pruner=median on a config without `metric`: no job would report to its trial, so the search is
    refused before anything runs. With the page's `metric`, every trial reports each epoch."""
    app = write_page_app(tmp_path)
    pruned = ["-m", "hydra/sweeper=optuna", "lr=interval(0.01, 0.5)", "hydra/sweeper/pruner=median",
              "hydra.sweeper.n_trials=3", "hydra.sweeper.n_jobs=1", *TINY]
    refused = tmp_path / "refused"
    proc = run_app(app, *pruned, f"hydra.sweep.dir={refused}", *NO_OBJECTIVE)
    assert proc.returncode != 0
    assert ("a pruner stops trials on the metric their jobs report each epoch, but the app's config names no "
            "`metric`") in proc.stderr, proc.stderr[-3000:]
    assert "Add `metric: NAME`" in proc.stderr and "hydra/sweeper/pruner=none" in proc.stderr
    assert not refused.exists(), sorted(refused.rglob("*"))  # nothing ran, nothing is left

    study = tmp_path / "study"
    proc = run_app(app, *pruned, f"hydra.sweep.dir={study}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = list(csv.DictReader((study / "trials.csv").open()))
    assert len(trials) == 3 and {t["state"] for t in trials} <= {"COMPLETE", "PRUNED"}, trials
    assert all(t["epochs_reported"] for t in trials), trials  # each epoch's val_acc reached the pruner
    assert "completed without reporting" not in proc.stdout

    unheard = tmp_path / "unheard"  # a metric the loop never reports: said once, after the first trial
    proc = run_app(app, *pruned, f"hydra.sweep.dir={unheard}", "metric=val_loss", "hydra.sweeper.n_trials=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("completed without reporting val_loss at any epoch") == 1, proc.stdout[-3000:]
    assert "its last report had train_loss, val_acc" in proc.stdout
