"""The one writer of result.json and its merge rules: the job's own record wins, a stderr tail is added, what Slurm
says is told; and a record of an older sweepit, times to the second, still reads."""

from __future__ import annotations

import json
from pathlib import Path

from sweepit.results import JobState, Recorder, record_end
from sweepit.results._job_files import RESULT_FILE, read_record, read_result, write_result


def test_the_jobs_own_record_wins_and_one_that_says_no_status_is_replaced(tmp_path: Path) -> None:
    died = record_end(None, JobState.FAILED, Recorder.LOCAL, error="died from signal SIGKILL")
    (tmp_path / RESULT_FILE).write_text('{"objective": 0.5}')  # an app's own file, without a status
    assert write_result(tmp_path, died, replace=False) == "failed"
    assert read_result(tmp_path) == {"status": "failed", "objective": None, "error": "died from signal SIGKILL",
                                     "recorded_by": "sweepit local launcher"}
    (tmp_path / RESULT_FILE).write_text('{"status": "completed", "objective": 0.5}')
    assert write_result(tmp_path, died, replace=False) == "completed"
    assert read_result(tmp_path) == {"status": "completed", "objective": 0.5}


def test_a_stderr_tail_is_added_to_a_failure_the_jobs_session_recorded(tmp_path: Path) -> None:
    own = record_end(None, JobState.FAILED, Recorder.SESSION, error="ValueError: x")
    write_result(tmp_path, own)
    died = record_end(None, JobState.FAILED, Recorder.LOCAL, error="exited with code 1")
    assert write_result(tmp_path, died, replace=False, stderr_tail=lambda: "Traceback ...") == "failed"
    assert read_result(tmp_path) == {**own.result, "stderr_tail": "Traceback ..."}  # its own error stays


def test_what_slurm_says_is_told_to_a_record_of_a_stop(tmp_path: Path) -> None:
    write_result(tmp_path, {"status": "interrupted", "error": "KeyboardInterrupt: SIGTERM", "wall_time_s": 7.0})
    told = record_end(None, JobState.FAILED, Recorder.SLURM, error="reached its Slurm time limit",
                      slurm_state="TIMEOUT")
    status = write_result(tmp_path, told, replace=False, stderr_tail=lambda: "", retell=lambda own: True)
    assert status == "failed" and read_result(tmp_path) == {
        "status": "failed", "objective": None, "error": "reached its Slurm time limit", "slurm_state": "TIMEOUT",
        "recorded_by": "sweepit slurm launcher", "stderr_tail": "", "wall_time_s": 7.0,
        "job_error": "KeyboardInterrupt: SIGTERM"}


def test_an_older_record_reads_with_its_status_as_the_enum(tmp_path: Path) -> None:
    old = {"status": "completed", "objective": 0.25, "started_at": "2026-01-02T03:04:05+00:00",
           "ended_at": "2026-01-02T03:05:00+00:00", "wall_time_s": 55.0, "attempts": 2}
    (tmp_path / RESULT_FILE).write_text(json.dumps(old))
    record = read_record(tmp_path)
    assert record.status is JobState.COMPLETED and record.ended and record.result == old
    assert (record.objective, record.wall_time_s, record.attempts, record.recorded_by) == (0.25, 55.0, 2, None)
