"""How a job's state is read from squeue, sacct and its result.json (no jobs submitted here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweepit.results._job_files import write_result
from sweepit.results._manifest import JobEntry
from sweepit.slurm._cluster import QueueRow
from sweepit.slurm._states import LOST, _decide, _mine, record_dead

pytestmark = pytest.mark.no_cluster  # decisions on recorded squeue/sacct rows: no cluster needed

NAME = "train-abc123"


def entry(tmp_path: Path, status: str | None = None) -> JobEntry:
    if status is not None:
        write_result(tmp_path, {"status": status})
    return JobEntry(num=3, overrides=["lr=0.1"], job_dir=str(tmp_path), state="running",
                    extra={"slurm_job_id": "40_3", "slurm_job_name": NAME, "stderr": str(tmp_path / "err")})


def row(state: str, name: str = NAME, reason: str = "") -> QueueRow:
    return QueueRow("40_3", state, name, reason, "node1")


@pytest.mark.parametrize("queued,accounted,state,final", [
    (row("PENDING"), None, "queued", False),
    (row("RUNNING"), None, "running", False),
    (row("COMPLETING"), row("REQUEUED"), "running", False),   # being requeued: it comes back
    (row("COMPLETING"), row("PREEMPTED"), "running", False),  # still in the queue: Slurm requeues it
    (row("COMPLETING"), row("CANCELLED"), "interrupted", True),  # processes still dying (KillWait)
    (row("CANCELLED"), None, "interrupted", True),
    (row("TIMEOUT"), None, "failed", True),
    (None, row("OUT_OF_MEMORY"), "failed", True),              # gone from squeue: accounting has it
    (None, row("PREEMPTED"), "interrupted", True),
    (None, None, "failed", True),                              # lost: neither knows it
])
def test_a_job_without_result(tmp_path: Path, queued: QueueRow | None, accounted: QueueRow | None, state: str,
                              final: bool) -> None:
    seen = _decide(entry(tmp_path), None, queued, accounted, squeue_failed=False)
    assert (seen.state, seen.final, seen.dead) == (state, final, final)


def test_a_failed_result_of_a_requeued_run_does_not_end_the_job(tmp_path: Path) -> None:
    e = entry(tmp_path, "failed")
    assert _decide(e, "failed", row("PENDING"), None, False).final is False
    ended = _decide(e, "failed", row("COMPLETING"), row("FAILED", reason="1:0"), False)
    assert (ended.state, ended.final, ended.dead) == ("failed", True, False)  # its own result stands


def test_a_completed_result_ends_the_job_whatever_slurm_says(tmp_path: Path) -> None:
    seen = _decide(entry(tmp_path, "completed"), "completed", row("RUNNING"), None, False)
    assert (seen.state, seen.final, seen.dead) == ("completed", True, False)


def test_a_row_of_another_job_with_the_same_id_is_not_this_job(tmp_path: Path) -> None:
    e = entry(tmp_path)  # job ids restart at 1 after a cluster's cold start
    assert _mine({"40_3": row("RUNNING", name="someone-else")}, e) is None
    assert _mine({"40_3": row("RUNNING")}, e) == row("RUNNING")


def test_squeue_not_answering_changes_nothing(tmp_path: Path) -> None:
    seen = _decide(entry(tmp_path), None, None, None, squeue_failed=True)
    assert (seen.state, seen.final) == ("running", False)


def test_a_dead_job_gets_a_result_with_the_slurm_state_and_its_stderr(tmp_path: Path) -> None:
    e = entry(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1, "val_loss": 0.5}\n')
    seen = _decide(e, None, None, row("TIMEOUT"), False)
    e.extra["timeout_min"] = 30
    assert record_dead(e, seen, "slurmstepd: *** JOB 40 CANCELLED DUE TO TIME LIMIT ***") == "failed"
    import json

    result = json.loads((tmp_path / "result.json").read_text())
    assert result["slurm_state"] == "TIMEOUT" and result["epochs_completed"] == 1
    assert result["error"].startswith("reached its Slurm time limit of 30 min (job 40_3) before it finished")
    assert "TIME LIMIT" in result["stderr_tail"] and result["final"] == {"epoch": 1, "val_loss": 0.5}
    assert _decide(e, None, None, None, False).slurm_state == LOST
