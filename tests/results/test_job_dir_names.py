"""A job's directory is one folder of a bounded name whatever its swept values hold, and every reader of a sweep (the
end-of-sweep table, `sweepit summary`, `sweepit status`, the report) finds each job in it. Real sweeps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sweepit.results._job_files import MAX_JOB_DIR_NAME, job_dir_name, job_num
from sweepit.results._manifest import read_manifest
from sweepit_testing import REPO, TINY, read_by_every_reader, run_train

ANY_HYDRA_APP = REPO / "examples" / "any_hydra_app" / "app.py"


def test_a_name_is_one_folder_bounded_and_the_same_for_the_same_job() -> None:
    assert job_dir_name(3, "lr=0.1,optimizer=adam") == "3_lr=0.1,optimizer=adam"  # the usual names are unchanged
    assert job_dir_name(0, "+tag=runs/a,x=50%") == "0_+tag=runs%2Fa,x=50%25"
    assert "\n" not in job_dir_name(0, "note=a\nb") and "/" not in job_dir_name(0, "p=/a/b/c")
    long_a, long_b = (job_dir_name(7, f"+a={c * 120},+b={c * 120}") for c in "xy")
    for name in (long_a, long_b, job_dir_name(7, "+a=" + "é" * 200)):
        assert len(name.encode()) <= MAX_JOB_DIR_NAME and job_num(Path(name)) == 7, name
        name.encode().decode()  # never half a character
    assert long_a != long_b and long_a == job_dir_name(7, f"+a={'x' * 120},+b={'x' * 120}")
    # Two values alike in their first 200 bytes still get two folders.
    assert job_dir_name(1, "v=" + "a" * 300 + "1") != job_dir_name(1, "v=" + "a" * 300 + "2")


def _sweepit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sweepit.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["local", "basic"])
def test_every_reader_finds_each_job_of_a_sweep_whose_values_hold_slashes_or_are_long(
        tmp_path: Path, launcher: str) -> None:
    """Both in one sweep: job 0's values hold `/`, job 1's name is past 255 bytes (its folder's name is cut)."""
    values = ["runs/a", "b" * 240]
    proc = run_train(["-m", "task=linreg", *TINY, f"hydra/launcher={launcher}", f"+tag={','.join(values)}",
                      f"+note={values[0]}"], tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (sweep,) = (tmp_path / "outputs" / "multirun").iterdir()
    jobs = sorted(p for p in sweep.iterdir() if job_num(p) is not None)
    assert len(jobs) == 2 and all((job / "result.json").is_file() for job in jobs), [p.name for p in sweep.iterdir()]
    assert all(len(job.name.encode()) <= MAX_JOB_DIR_NAME for job in jobs)
    assert "+note=runs%2Fa" in jobs[0].name and values[1] not in jobs[1].name  # a `/` kept in one folder; a cut name
    assert "2 jobs: 2 completed" in proc.stdout, proc.stdout  # the end-of-sweep table
    summary = _sweepit("summary", str(sweep))
    assert "2 jobs: 2 completed" in summary.stdout, summary.stdout + summary.stderr
    if launcher == "local":  # sweep.json: the launcher's record of every job
        status = _sweepit("status", str(sweep))
        assert status.returncode == 0 and "2 completed" in status.stdout, status.stdout + status.stderr
    report = _sweepit("report", str(sweep))
    assert report.returncode == 0, report.stderr
    table = (sweep / "report" / "results.csv").read_text()
    assert table.count("completed") == 2, table


@pytest.mark.slow
def test_an_apps_own_subdir_nests_each_job_and_every_reader_finds_it_where_the_launcher_recorded_it(
        tmp_path: Path) -> None:
    """examples/any_hydra_app names its jobs' folders itself (`${hydra.job.num}_${hydra.job.override_dirname}`): a
    value holding `/` nests the job's folder, as Hydra's own launchers nest it. Before: the end-of-sweep table,
    `sweepit summary` and the report read the folder `0_+tag=runs` for job 0 and found no result in it (both jobs
    `pending` and exit 0; the report: `completed` without an objective, "no result.json")."""
    sweep = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, str(ANY_HYDRA_APP), "-m", "x=0", "+tag=runs/a,runs/b",
                           f"hydra.sweep.dir={sweep}"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folders = {num: Path(e.job_dir) for num, e in read_manifest(sweep).jobs.items()}
    assert folders == {0: sweep / "0_+tag=runs" / "a,x=0", 1: sweep / "1_+tag=runs" / "b,x=0"}  # the app's layout
    assert all((folder / "result.json").is_file() for folder in folders.values())
    said = read_by_every_reader(sweep)
    for reader, out in [("the end-of-sweep table", proc.stdout), *said.items()]:
        assert "pending" not in out and "no result.json" not in out, f"{reader}:\n{out}"
    for reader, out in [("the end-of-sweep table", proc.stdout), *((r, said[r]) for r in ("summary", "report"))]:
        assert "2 jobs: 2 completed" in out and "best (minimize objective): job 0 = 1.25" in out, f"{reader}:\n{out}"
    assert "2 jobs: 2 completed" in said["status"], said["status"]
    assert said["results.csv"].count(",completed,1.25,") == 2, said["results.csv"]
    resumed = subprocess.run([sys.executable, "-m", "sweepit.cli", "resume", str(sweep)], capture_output=True,
                             text=True, timeout=120, cwd=tmp_path)
    assert resumed.returncode == 0 and "2 jobs: 2 completed" in resumed.stdout, resumed.stderr[-3000:]
    assert "job 0 completed in" not in resumed.stdout + resumed.stderr, "a resume runs no finished job again"
