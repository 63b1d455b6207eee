"""`sweepit compare` on real sweeps of train.py: two linreg grids that share half their jobs and differ in their epochs,
one sweep along a key, and the inputs it refuses."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from report_helpers import assert_plot

from sweepit.cli import main
from sweepit_testing import run_train

pytestmark = pytest.mark.slow

COMMON = ["task=linreg", "device=cpu", "trainer.threads=1", "hydra.callbacks.summary.report=false"]


def _sweep(root: Path, *args: str) -> Path:
    proc = run_train(["-m", *COMMON, *args], root, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = (root / "outputs" / "multirun").iterdir()
    return sweep


@pytest.fixture(scope="module")
def after(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Against the reporting tests' sweep (epochs=3, lr 0.01 and 0.1): epochs=2, lr 0.1 and 0.5, on sweepit's own
    launcher (it keeps a sweep.json; the other sweep's launcher keeps none)."""
    return _sweep(tmp_path_factory.mktemp("after"), "epochs=2", "optimizer=adam,sgd", "lr=0.1,0.5")


def _objectives(sweep: Path) -> dict[tuple[str, str], float]:
    """(optimizer, lr) -> objective, read from each job's result.json and its Hydra overrides."""
    found = {}
    for result in sweep.glob("*/result.json"):
        overrides = dict(o.split("=", 1) for o in yaml.safe_load((result.parent / ".hydra" / "overrides.yaml")
                                                                 .read_text()))
        found[(overrides["optimizer"], overrides["lr"])] = json.loads(result.read_text())["objective"]
    return found


def _csv(path: Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["compare", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_two_sweeps_matched_by_their_swept_values(linreg_sweep_once: Path, after: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, str(linreg_sweep_once), str(after), "--out", str(tmp_path / "cmp"))
    assert code == 0, err
    assert "the same in every job of each, but not between them: epochs=3 in A, 2 in B" in out
    assert "only in A (2 job(s)): optimizer=adam lr=0.01; optimizer=sgd lr=0.01" in out
    assert "only in B (2 job(s)): optimizer=adam lr=0.5; optimizer=sgd lr=0.5" in out
    assert "B against A on 2 matched job(s): objective (minimize val_loss)" in out
    before, later = _objectives(linreg_sweep_once), _objectives(after)
    rows = {(r["optimizer"], r["lr"]): r for r in _csv(tmp_path / "cmp" / "compare.csv")}
    assert len(rows) == 6
    for key in [("adam", "0.1"), ("sgd", "0.1")]:  # in both: side by side, and B - A
        row = rows[key]
        assert row["status:A"] == row["status:B"] == "completed"
        assert math.isclose(float(row["objective:A"]), before[key], rel_tol=1e-12)
        assert math.isclose(float(row["objective:B"]), later[key], rel_tol=1e-12)
        assert math.isclose(float(row["objective:B-A"]), later[key] - before[key], rel_tol=1e-9)
        assert float(row["epoch_time_s:A"]) > 0 and row["epoch_time_s:B-A"] != ""
    for key in [("adam", "0.01"), ("sgd", "0.01")]:
        assert rows[key]["status:A"] == "completed" and rows[key]["status:B"] == rows[key]["objective:B-A"] == ""
    for key in [("adam", "0.5"), ("sgd", "0.5")]:
        assert rows[key]["status:A"] == "" and rows[key]["status:B"] == "completed"
    page = (tmp_path / "cmp" / "compare.html").read_text()
    assert "<h1>Compare A and B</h1>" in page and "objective:B-A" in page and "data:image/png;base64," in page
    assert_plot(tmp_path / "cmp" / "compare.png")
    assert f"compare: {tmp_path / 'cmp' / 'compare.html'}" in out


def test_one_sweep_along_a_key_a_column_group_per_value(linreg_sweep: Path, capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    code, out, err = _run(capsys, str(linreg_sweep), "--by", "optimizer")
    assert code == 0, err
    assert "along optimizer, matched on lr" in out and "sgd against adam on 2 matched job(s)" in out
    folder = linreg_sweep / "report" / "compare_by_optimizer"  # the default: in the sweep's report folder
    rows = _csv(folder / "compare.csv")
    assert [r["lr"] for r in rows] == ["0.01", "0.1"] and "optimizer" not in rows[0]
    objectives = _objectives(linreg_sweep)
    for row in rows:
        adam, sgd = objectives[("adam", row["lr"])], objectives[("sgd", row["lr"])]
        assert (float(row["objective:adam"]), float(row["objective:sgd"])) == (adam, sgd)
        assert math.isclose(float(row["objective:sgd-adam"]), sgd - adam, rel_tol=1e-9)
    assert_plot(folder / "compare.png")
    assert "<h1>Compare along optimizer</h1>" in (folder / "compare.html").read_text()


def test_a_folder_that_is_not_a_sweep(linreg_sweep: Path, after: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    job = next(p for p in linreg_sweep.iterdir() if p.name.startswith("0_"))
    code, _, err = _run(capsys, str(job), str(after))
    assert code == 2 and "takes a sweep folder (one holding multirun.yaml, sweep.json or job folders" in err
    assert f"but {job} is job 0 of the sweep {linreg_sweep}.\nRun `sweepit compare {linreg_sweep} {after}`." in err
    (tmp_path / "empty").mkdir()
    code, _, err = _run(capsys, str(after), str(tmp_path / "empty"))
    assert code == 2 and f"but {tmp_path / 'empty'} holds none, nor any sweep under it." in err
    code, _, err = _run(capsys, str(after), str(tmp_path))  # the folder the sweep copied here is under
    assert code == 2 and f"but {tmp_path} holds 1 sweep(s) under it.\nPass one of them: `sweepit compare {after} " \
        in err
    code, _, err = _run(capsys, str(tmp_path / "nowhere"), "--by", "lr")
    assert code == 2 and "`sweepit compare DIR --by lr` takes a sweep folder" in err
    assert f"but {tmp_path / 'nowhere'} does not exist." in err


def test_two_sweeps_with_no_job_in_common(linreg_sweep_once: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    other = _sweep(tmp_path, "epochs=2", "optimizer=rmsprop", "lr=0.5")
    code, out, err = _run(capsys, str(linreg_sweep_once), str(other))
    assert code == 2 and out == ""
    assert ("A and B share no job: none of A's 4 jobs has the values of optimizer, lr of one of B's 1. "
            f"A ({linreg_sweep_once}) has optimizer=adam,sgd lr=0.01,0.1; B ({other}) has optimizer=rmsprop lr=0.5.\n"
            "Compare two sweeps of one grid") in err
    assert "sweepit compare DIR --by KEY.\nSee docs/troubleshooting.md#compare-no-shared-job" in err


def test_a_key_the_sweep_does_not_sweep(linreg_sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, str(linreg_sweep), "--by", "task")
    assert code == 2
    assert "--by must name a key the sweep sweeps (optimizer, lr), but got 'task' (task=linreg in every job); " \
           "for example --by optimizer." in err
    code, _, err = _run(capsys, str(linreg_sweep), "--by", "momentum")
    assert code == 2 and "but got 'momentum'; for example --by optimizer." in err
    code, _, err = _run(capsys, str(linreg_sweep))
    assert code == 2 and "compare takes two sweep directories (sweepit compare A B), or one and the key" in err


def test_a_folder_it_cannot_write_loses_not_the_comparison(linreg_sweep_once: Path, after: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    taken = tmp_path / "a_file"
    taken.write_text("")
    code, out, err = _run(capsys, str(linreg_sweep_once), str(after), "--out", str(taken))
    assert code == 2 and "B against A on 2 matched job(s)" in out  # printed before the files are written
    assert f"the comparison's folder must be writable, but {taken} is not (File exists); pass another with --out " \
           "DIR." in err


def test_values_along_a_key_that_share_no_other_values(linreg_sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With Adam's jobs at one learning rate and SGD's at the other, no two jobs differ in the optimizer alone."""
    for result in linreg_sweep.glob("*/result.json"):
        overrides = yaml.safe_load((result.parent / ".hydra" / "overrides.yaml").read_text())
        if {"optimizer=adam", "lr=0.1"} <= set(overrides) or {"optimizer=sgd", "lr=0.01"} <= set(overrides):
            shutil.rmtree(result.parent)
    code, out, err = _run(capsys, str(linreg_sweep), "--by", "optimizer")
    assert code == 2 and out == ""
    assert ("values of optimizer compare where they share the other swept keys' values, but no two do: "
            "optimizer=adam,sgd lr=0.01,0.1.\nCompare along another key: sweepit compare DIR --by lr.\n"
            "See docs/troubleshooting.md#compare-by-no-match") in err, err
