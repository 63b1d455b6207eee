"""The trackers and the report on the Slurm launchers: a job per Slurm job and packed workers each leave every job's
tracker rows and status, and `sweepit status` and `report` read the sweeps they left (the local paths:
tests/trackers/test_entry_paths.py)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from slurm_launcher_testing import CPU_ONLY, LINREG, TRAIN, manifest, run, sweepit

from sweepit.results._job_files import read_metrics


@pytest.mark.parametrize("pack", [[], ["hydra.launcher.workers=1", CPU_ONLY]], ids=["per-job", "packed"])
def test_slurm_jobs_feed_the_trackers_and_the_report(tmp_path: Path, pack: list[str]) -> None:
    sweep = tmp_path / "sweep"
    proc = run(TRAIN, sweep, *LINREG, "lr=0.01,0.02", "logger=csv", *pack)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "could not record" not in proc.stderr + proc.stdout
    m = manifest(sweep)
    assert {e.state for e in m.jobs.values()} == {"completed"}
    for entry in m.jobs.values():
        job_dir = Path(entry.job_dir)
        rows, _ = read_metrics(job_dir)
        with (job_dir / "metrics.csv").open() as f:
            assert [int(r["epoch"]) for r in csv.DictReader(f)] == [r["epoch"] for r in rows] == [1, 2]
    status = sweepit("status", str(sweep))
    assert status.returncode == 0, status.stderr
    assert "2 jobs: 2 completed" in status.stdout
    report = sweepit("report", str(sweep))
    assert report.returncode == 0, report.stderr[-3000:]
    assert (sweep / "report" / "index.html").is_file()
