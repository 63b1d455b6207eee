"""A folder that is not a sweep: every command that takes one (and `sweepit.load`) says the same, what the folder is
(a job of a sweep, a folder of sweeps, nothing) and the command to run instead, and exits non-zero."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import sweepit
from sweepit.cli import main
from sweepit.errors import SweepitError
from synthetic_sweep import write_synthetic_sweep

OLDER, NEWER = Path("outputs/multirun/2026-11-20_09-00-00"), Path("outputs/multirun/2026-11-21_09-00-00")
TAKES = "takes a sweep folder (one holding multirun.yaml, sweep.json or job folders <num>_<overrides>/)"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder with two sweeps in Hydra's outputs/multirun/ and a folder of notes; the working folder."""
    monkeypatch.chdir(tmp_path)
    for sweep in (OLDER, NEWER):
        write_synthetic_sweep(sweep, n_jobs=2, n_epochs=1, grid={"lr": ["0.1", "0.01"]}, study="multirun")
    os.utime(OLDER / "multirun.yaml", (1_700_000_000, 1_700_000_000))
    (tmp_path / "notes").mkdir()
    return tmp_path


@pytest.mark.parametrize("command", [["summary"], ["report"], ["status"], ["status", "--watch", "1"], ["resume"],
                                     ["clean"], ["compare", "--by", "lr"]], ids=" ".join)
def test_every_command_tells_a_wrong_folder_alike(project: Path, command: list[str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    name, *options = command
    run = f"sweepit {name}" + (" {} --by lr" if name == "compare" else " {}")
    job = next(NEWER.glob("0_*"))
    cases = {
        "outputs/multirun": ("outputs/multirun holds 2 sweep(s) under it.",
                             f"Pass one of them: `{run.format(NEWER)}` (the newest); `sweepit ls outputs/multirun` "
                             "lists them all."),
        ".": (". holds 2 sweep(s) under it.", f"Pass one of them: `{run.format(NEWER)}` (the newest); `sweepit ls .` "
                                              "lists them all."),
        str(job): (f"{job} is job 0 of the sweep {NEWER}.", f"Run `{run.format(NEWER)}`."),
        "notes": ("notes holds none, nor any sweep under it.",
                  "List the sweeps under a folder with `sweepit ls <folder>` (sweeps go to outputs/, or to Hydra's "
                  "multirun/, in the folder the app ran in)."),
        "nowhere": ("nowhere does not exist.", "List the sweeps under a folder with `sweepit ls <folder>`."),
    }
    for folder, (what, fix) in cases.items():
        assert main([name, folder, *options]) == 2, folder
        out, err = capsys.readouterr()
        assert err.splitlines() == [f"sweepit: error: `{run.format('DIR')}` {TAKES}, but {what}", fix]
        assert out == ""
    assert not Path("outputs/multirun/report").exists() and not (job / "report").exists()  # nothing written


def test_load_takes_a_folder_of_sweeps_and_tells_a_job_folder(project: Path) -> None:
    assert sorted(sweepit.load("outputs").sweeps) == [str(OLDER.relative_to("outputs")),
                                                       str(NEWER.relative_to("outputs"))]
    job = next(OLDER.glob("1_*"))
    with pytest.raises(SweepitError) as told:
        sweepit.load(job)
    assert str(told.value).splitlines() == [
        f"`sweepit.load('DIR')` {TAKES} or a folder with sweeps under it, but {job} is job 1 of the sweep {OLDER}.",
        f"Run `sweepit.load('{OLDER}')`."]
