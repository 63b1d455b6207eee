"""A job run again (`sweepit resume`, a retry) keeps its earlier runs' record and logs as attempt n's files, and its
record counts the attempts and their time together. The Slurm launcher's logs are links into its submitit folder:
they move as links, still reaching their logs. The local launcher's whole path, with a real signal and `sweepit
resume`, is tests/examples/test_examples.py's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sweepit.results import JobRow, format_table, job_row
from sweepit.results._job_files import read_result, start_clean, write_result


def test_each_run_again_keeps_the_last_runs_record_and_log_links_and_the_record_counts_them(tmp_path: Path) -> None:
    job = tmp_path / "0_lr=0.1"
    logs = tmp_path / ".submitit" / "0001"
    logs.mkdir(parents=True)
    job.mkdir()
    (logs / "7_0_log.out").write_text("epoch 1\nepoch 2\n")
    (job / "stdout.log").symlink_to(os.path.relpath(logs / "7_0_log.out", job))
    (job / "stderr.log").symlink_to(os.path.relpath(logs / "7_0_log.err", job))  # never written: no log of a run
    write_result(job, {"status": "interrupted", "wall_time_s": 5.0, "started_at": "2026-11-25T10:00:00+00:00"})
    assert "attempts" not in (read_result(job) or {})  # a job run once: no count, its wall_time_s is its time

    start_clean(job)
    assert read_result(job) is None and not (job / "stdout.log").exists()
    assert (job / "stdout.1.log").read_text() == "epoch 1\nepoch 2\n"  # the link moved, and still reaches the log
    assert (read_result(job, "result.1.json") or {})["status"] == "interrupted"
    assert not os.path.lexists(job / "stderr.1.log")  # a link to nothing was no log of that run

    write_result(job, {"status": "completed", "wall_time_s": 3.0})
    second = read_result(job) or {}
    assert second["attempts"] == 2 and second["total_wall_time_s"] == pytest.approx(8.0)
    row = job_row(JobRow, 0, job, {"num": 0, "overrides": ["lr=0.1"]})
    assert row.note == "2 attempts" and "8.0" in format_table([row]).splitlines()[2]  # time_s: both runs'

    (job / "stdout.log").write_text("epoch 3\n")
    start_clean(job)
    assert sorted(p.name for p in job.iterdir()) == ["result.1.json", "result.2.json", "stderr.log", "stdout.1.log",
                                                     "stdout.2.log"]  # (the link to nothing: the next submission's)
    assert write_result(job, {"status": "failed", "wall_time_s": 1.0}, replace=False) == "failed"  # a record of its
    # death counts too
    third = read_result(job) or {}
    assert third["attempts"] == 3 and third["total_wall_time_s"] == pytest.approx(9.0)
