"""`sweepit ls`: one line per sweep, newest first, with counts by status and the best job's overrides."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sweepit.cli import main
from sweepit.reporting.listing import find_sweeps, list_sweeps
from synthetic_sweep import write_synthetic_sweep


def _sweep(root: Path, study: str, stamp: str, grid: dict[str, list[str]], created_at: str | None) -> Path:
    sweep = root / study / stamp
    write_synthetic_sweep(sweep, n_jobs=4, n_epochs=2, grid=grid, seed=1, study=study)
    if created_at is not None:
        (sweep / "sweep.json").write_text(json.dumps({"created_at": created_at, "launcher": "local", "jobs": []}))
    return sweep


@pytest.fixture
def outputs(tmp_path: Path) -> Path:
    root = tmp_path / "outputs"
    _sweep(root, "optimizer_lr", "2026-11-20_09-00-00", {"optimizer": ["adam", "sgd"], "lr": ["0.1", "0.01"]},
           "2026-11-20T09:00:00+00:00")
    _sweep(root, "batch_size", "2026-11-21_09-00-00", {"batch_size": ["32", "64", "128", "256"]},
           "2026-11-21T09:00:00+00:00")
    old = _sweep(root, "multirun", "2026-11-19_09-00-00", {"seed": ["0", "1", "2", "3"]}, None)
    os.utime(old / "multirun.yaml", (1_700_000_000, 1_700_000_000))  # 2023: the oldest, by file time
    (old / "2_seed=2" / "result.json").write_text("{not json")
    (root / "runs" / "2026-11-21_10-00-00" / ".hydra").mkdir(parents=True)  # a single run is not a sweep
    return root


def test_ls_lists_every_sweep_newest_first(outputs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ls", str(outputs)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["sweep", "study", "started", "jobs", "best", "best", "overrides"]
    assert [line.split()[1] for line in lines[1:]] == ["batch_size", "optimizer_lr", "multirun"]
    assert "4 jobs: 4 completed" in lines[1] and "batch_size=" in lines[1] and "val_acc=" in lines[1]
    assert "optimizer=" in lines[2] and "lr=" in lines[2]
    assert "1 corrupt" in lines[3]


def test_ls_counts_match_the_reports(outputs: Path) -> None:
    sweeps = list_sweeps(outputs)
    assert len(sweeps) == 3 and len(find_sweeps(outputs / "batch_size")) == 1
    best = sweeps[0].best
    assert best is not None and best.objective == max(j.objective or 0 for j in sweeps[0].jobs)


def test_ls_of_a_sweep_directory_and_of_nothing(outputs: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ls", str(outputs / "batch_size" / "2026-11-21_09-00-00")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    (tmp_path / "empty").mkdir()
    assert main(["ls", str(tmp_path / "empty")]) == 0
    assert "No sweeps under" in capsys.readouterr().out
    assert main(["ls", str(tmp_path / "missing")]) == 2
    assert "must exist" in capsys.readouterr().err


def test_ls_with_no_folder_finds_a_plain_hydra_apps_multirun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A plain Hydra app (no sweepit config) sweeps into Hydra's multirun/<date>/<time>/<num>: `sweepit ls` there,
    with no folder named, lists it, and its study is `multirun`, not the date."""
    monkeypatch.chdir(tmp_path)
    assert main(["ls"]) == 2
    assert capsys.readouterr().err.splitlines()[0] == ("sweepit: error: the directory to list must exist, but neither "
                                                       "outputs nor multirun (Hydra's) is here.")
    sweep = Path("multirun/2026-12-01/10-00-00")
    for num, lr in enumerate(["0.1", "0.01"]):
        (sweep / str(num) / ".hydra").mkdir(parents=True)
        (sweep / str(num) / ".hydra" / "config.yaml").write_text(f"lr: {lr}\n")
        (sweep / str(num) / ".hydra" / "overrides.yaml").write_text(f"- lr={lr}\n")
    (sweep / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    assert main(["ls"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].split()[:2] == [str(sweep), "multirun"], lines
    assert main(["ls", "multirun"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:2] == [str(sweep), "multirun"]
