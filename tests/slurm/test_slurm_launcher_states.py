"""How a job's state is read from squeue, sacct and its result.json (no jobs submitted here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweepit._signals import SLURM_STOP
from sweepit.results import Ledger
from sweepit.results._job_files import read_result, write_result
from sweepit.results._manifest import JobEntry
from sweepit.slurm._cluster import QueueRow, minutes
from sweepit.slurm._job_states import CANCELLED_BY_DRIVER, LOST, _decide, _mine, pending_reasons, record_dead

pytestmark = pytest.mark.no_cluster  # decisions on recorded squeue/sacct rows: no cluster needed

NAME = "train-abc123"


def entry(tmp_path: Path, status: str | None = None) -> JobEntry:
    if status is not None:
        write_result(tmp_path, {"status": status})
    return JobEntry(num=3, overrides=["lr=0.1"], job_dir=str(tmp_path), state="running",
                    extra={"slurm_job_id": "40_3", "slurm_job_name": NAME, "stderr": str(tmp_path / "err")})


def ledger_of(e: JobEntry) -> Ledger:
    return Ledger(sweep_dir=str(Path(e.job_dir).parent), argv=[], cwd="", launcher="slurm", jobs={e.num: e})


def row(state: str, name: str = NAME, reason: str = "") -> QueueRow:
    return QueueRow("40_3", state, name, reason, "node1")


@pytest.mark.parametrize("queued,accounted,state,final", [
    (row("PENDING"), None, "queued", False),
    (row("RUNNING"), None, "running", False),
    (row("COMPLETING"), row("REQUEUED"), "running", False),   # being requeued: it comes back
    (row("COMPLETING"), row("PREEMPTED"), "running", False),  # still in the queue: Slurm requeues it
    (row("COMPLETING"), row("CANCELLED"), "running", False),  # processes still stopping: one may yet write
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
    assert _decide(e, "failed", row("COMPLETING"), row("FAILED", reason="1:0"), False).final is False  # exiting
    ended = _decide(e, "failed", row("FAILED"), row("FAILED", reason="1:0"), False)
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
    m = ledger_of(e)
    record_dead(m, e.num, seen, "slurmstepd: *** JOB 40 CANCELLED DUE TO TIME LIMIT ***")
    assert m.jobs[e.num].state == "failed"
    import json

    result = json.loads((tmp_path / "result.json").read_text())
    assert result["slurm_state"] == "TIMEOUT" and result["epochs_completed"] == 1
    assert result["error"].startswith("reached its Slurm time limit of 30 min (job 40_3) before it finished")
    assert "TIME LIMIT" in result["stderr_tail"] and result["final"] == {"epoch": 1, "val_loss": 0.5}
    assert _decide(e, None, None, None, False).slurm_state == LOST


def test_a_job_slurm_forgot_reads_what_the_driver_did_or_what_slurmstepd_wrote(tmp_path: Path) -> None:
    """No accounting, or purged: neither squeue nor sacct lists the job any more."""
    e = entry(tmp_path)
    lost = _decide(e, None, None, None, False)
    assert (lost.state, lost.slurm_state) == ("failed", LOST)
    e.extra[CANCELLED_BY_DRIVER] = "2026-01-01T00:00:00+00:00"
    cancelled = _decide(e, None, None, None, False)
    assert (cancelled.state, cancelled.slurm_state) == ("interrupted", "CANCELLED")
    del e.extra[CANCELLED_BY_DRIVER]
    for said, state, status in (("CANCELLED AT 2026-01-01T10:00:00 ***", "CANCELLED", "interrupted"),
                                ("CANCELLED AT 2026-01-01T10:00:00 DUE TO TIME LIMIT ***", "TIMEOUT", "failed"),
                                ("CANCELLED AT 2026-01-01T10:00:00 DUE TO NODE FAILURE ***", "NODE_FAIL", "failed")):
        (tmp_path / "err").write_text(f"epoch 3\nslurmstepd: error: *** JOB 40 ON node1 {said}\n")
        seen = _decide(e, None, None, None, False)
        assert (seen.state, seen.slurm_state, seen.dead) == (status, state, True)


def test_a_job_sigterm_stopped_keeps_its_record_with_what_slurm_says_it_was(tmp_path: Path) -> None:
    e = entry(tmp_path)
    write_result(tmp_path, {"status": "interrupted", "error": f"KeyboardInterrupt: {SLURM_STOP}", "wall_time_s": 7.0,
                            "epochs_completed": 3})
    cancelled = _decide(e, "interrupted", row("CANCELLED"), None, False)
    assert (cancelled.state, cancelled.dead) == ("interrupted", True)  # told that scancel it was
    seen = _decide(e, "interrupted", row("TIMEOUT"), None, False)
    assert seen.dead is True
    m = ledger_of(e)
    record_dead(m, e.num, seen, "")
    assert m.jobs[e.num].state == "failed"
    result = read_result(tmp_path) or {}
    assert result["error"].startswith("reached its Slurm time limit") and result["wall_time_s"] == 7.0
    assert SLURM_STOP in result["job_error"]
    assert _decide(e, "failed", row("TIMEOUT"), None, False).dead is False  # told once


def test_pending_reasons_group_jobs_by_squeues_reason(tmp_path: Path) -> None:
    seen = {n: _decide(entry(tmp_path), None, row("PENDING", reason=r), None, False)
            for n, r in enumerate(["Resources", "Priority", "Priority"])}
    assert pending_reasons(seen) == "1 Resources (job 0), 2 Priority (jobs 1, 2)"
    assert _decide(entry(tmp_path), None, row("RUNNING", reason="None"), None, False).reason == ""


def test_slurm_time_limits_in_minutes() -> None:
    assert [minutes(t) for t in ("UNLIMITED", "30", "00:04:00", "1-00:00:00", "00:04:30")] == [None, 30, 4, 1440, 5]
