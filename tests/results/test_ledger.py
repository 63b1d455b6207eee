"""The ledger is the one owner of a job's life: nothing else in src/ changes a job's state or builds a record to write,
one type carries how a job ended, and an ended job is not changed again, however many writers race to end it."""

from __future__ import annotations

import ast
import json
import multiprocessing
from pathlib import Path

import pytest

from sweepit.results import JobState, Ledger, Recorder, read_record
from sweepit.results._job_files import write_result
from sweepit.results._manifest import JobEntry
from sweepit.slurm._job_states import Seen, record_dead

SRC = Path(__file__).resolve().parents[2] / "src" / "sweepit"
LEDGER = "results/_ledger.py"
SESSION = "train/_session.py"  # the job's own record
# Where a JobRecord is made: the ledger's `record_end` (the session's record too), the reader of result.json, and a copy
# the Optuna sweeper tells its study (never written).
BUILDERS = {LEDGER, "results/_job_files.py", "search/_trials.py"}
# Classes with a job's state or status. JobOutcome is the one type that carries how a job ended; the others hold what
# a file or a program said, which only the ledger turns into a job's state.
STATE_HOLDERS = {
    "JobOutcome": "how a job ended, as its process or its driver tells it",
    "JobRecord": "result.json as read",
    "JobEntry": "the ledger's line for a job in sweep.json",
    "JobRow": "a table's row, read from the record",
    "QueueRow": "Slurm's own word for its job",
    "Seen": "one look at Slurm, which only the ledger applies (`_job_states.apply`)",
}


def _calls(tree: ast.AST, name: str) -> list[int]:
    """Lines that call `name` (a function, or `X.name` for a method)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            called = f.id if isinstance(f, ast.Name) else f"{ast.unparse(f.value)}.{f.attr}" if isinstance(
                f, ast.Attribute) else ""
            if called == name:
                out.append(node.lineno)
    return out


def _state_assignments(tree: ast.AST) -> list[int]:
    out = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AugAssign | ast.AnnAssign) else []
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and t.attr == "state" and isinstance(t.ctx, ast.Store):
                    out.append(node.lineno)
    return out


def test_only_the_ledger_changes_a_jobs_state_or_builds_a_record_to_write() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        tree = ast.parse(path.read_text())
        rules = [("assigns a job's state", _state_assignments(tree), {LEDGER}),
                 ("makes a JobEntry", _calls(tree, "JobEntry"), {LEDGER, "results/_manifest.py"}),
                 ("calls write_result", _calls(tree, "write_result"), {LEDGER, SESSION}),
                 ("builds a record (JobRecord)", _calls(tree, "JobRecord"), BUILDERS)]
        for what, lines, allowed in rules:
            found += [f"{rel}:{line} {what}" for line in lines if rel not in allowed]
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name not in STATE_HOLDERS:
                fields = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)
                          and isinstance(n.target, ast.Name)}
                if fields & {"state", "status"}:
                    found.append(f"{rel}:{node.lineno} class {node.name} carries a job's state")
    assert found == [], "\n".join(found)


def _ledger(tmp_path: Path, state: str = JobState.RUNNING, **extra: object) -> Ledger:
    job_dir = tmp_path / "0_lr=0.1"
    job_dir.mkdir(exist_ok=True)
    entry = JobEntry(num=0, overrides=["lr=0.1"], job_dir=str(job_dir), state=state,
                     extra={"slurm_job_id": "40", "stderr": str(job_dir / "stderr.log"), **extra})
    return Ledger(sweep_dir=str(tmp_path), argv=[], cwd=str(tmp_path), launcher="slurm", jobs={0: entry})


def test_an_ended_job_is_moved_only_by_a_new_attempt(tmp_path: Path) -> None:
    m = _ledger(tmp_path, JobState.COMPLETED)
    assert m.move(0, JobState.RUNNING) is False and m.jobs[0].state == JobState.COMPLETED
    assert m.move(0, JobState.INTERRUPTED) is False  # a driver's stop does not undo an end
    assert m.move(0, JobState.QUEUED, again=True) is True and m.jobs[0].state == JobState.QUEUED


def test_a_paused_job_is_left_by_a_resume_and_moved_only_by_its_promotion(tmp_path: Path) -> None:
    """Paused at a rung: its attempt ended (a stop, a requeue or a resume does not run it again); the halving
    sweeper's promotion is a new attempt."""
    m = _ledger(tmp_path, JobState.RUNNING)
    job_dir = Path(m.jobs[0].job_dir)
    write_result(job_dir, {"status": "paused", "epochs_completed": 1})
    assert m.end(0, JobState.FAILED, Recorder.LOCAL) == JobState.PAUSED  # the job's own record stands
    assert m.move(0, JobState.INTERRUPTED) is False and m.requeue(0) is False
    assert m.settle_orphans() == [] and m.jobs[0].state == JobState.PAUSED
    assert m.skip_finished(0, ["lr=0.1"], job_dir) is True and m.jobs[0].state == JobState.PAUSED
    assert m.move(0, JobState.QUEUED, again=True) is True and m.jobs[0].state == JobState.QUEUED


def test_a_requeue_is_refused_once_the_jobs_own_end_is_recorded(tmp_path: Path) -> None:
    m = _ledger(tmp_path, packed=0)
    job_dir = Path(m.jobs[0].job_dir)
    write_result(job_dir, {"status": "interrupted", "error": "KeyboardInterrupt"})  # its stop: no end
    assert m.requeue(0) is True and m.jobs[0].state == JobState.QUEUED
    m.move(0, JobState.RUNNING)
    write_result(job_dir, {"status": "completed", "objective": 0.5})
    assert m.requeue(0) is False and m.jobs[0].state == JobState.RUNNING
    assert m.mirror(0) and m.jobs[0].state == JobState.COMPLETED


def _end_dead(sweep: str, who: str, barrier: multiprocessing.synchronize.Barrier, queue: multiprocessing.Queue) -> None:
    """A writer of a dead Slurm job's end: the driver's follower or `sweepit status`, each with its own ledger."""
    m = _ledger(Path(sweep))
    barrier.wait()
    record_dead(m, 0, Seen(state=JobState.INTERRUPTED, slurm_state="CANCELLED", final=True, dead=True), f"by {who}")
    queue.put((who, m.jobs[0].state))


def _end_own(job_dir: str, barrier: multiprocessing.synchronize.Barrier, queue: multiprocessing.Queue) -> None:
    """The job's own record (sweepit's own loop writes its whole story)."""
    barrier.wait()
    write_result(job_dir, {"status": "completed", "objective": 0.25})
    queue.put(("job", JobState.COMPLETED))


def _requeue(sweep: str, barrier: multiprocessing.synchronize.Barrier, queue: multiprocessing.Queue) -> None:
    """The packed driver giving a job back to the queue: its worker died under it, as Slurm says."""
    m = _ledger(Path(sweep), packed=0)
    barrier.wait()
    queue.put(("requeue", (m.requeue(0), m.jobs[0].state)))


def test_a_worker_ending_a_job_and_the_driver_requeuing_it_leave_one_end(tmp_path: Path) -> None:
    """Raced: either the requeue came first (the job runs again, its record of this attempt is then an earlier
    attempt's) or it is refused and the job's own end stands; never a second record, never a requeue over an end
    already on disk."""
    ctx = multiprocessing.get_context("fork")
    for round_ in range(12):
        sweep = tmp_path / str(round_)
        sweep.mkdir()
        job_dir = Path(_ledger(sweep).jobs[0].job_dir)
        barrier, queue = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_requeue, args=(str(sweep), barrier, queue)),
                 ctx.Process(target=_end_own, args=(str(job_dir), barrier, queue))]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        said = dict(queue.get(timeout=5) for _ in range(2))
        requeued, state = said["requeue"]
        assert state == (JobState.QUEUED if requeued else JobState.RUNNING)
        assert sorted(p.name for p in job_dir.iterdir() if p.name.startswith("result")) == ["result.json"]
        assert json.loads((job_dir / "result.json").read_text()) == {"status": "completed", "objective": 0.25}
        if requeued:  # it looked before the end was on disk; a look now refuses
            assert _ledger(sweep, packed=0).requeue(0) is False


@pytest.mark.parametrize("with_own", [False, True], ids=["driver-and-status", "driver-status-and-the-job"])
def test_writers_racing_to_end_one_job_leave_one_record_the_jobs_own_where_it_has_one(tmp_path: Path,
                                                                                      with_own: bool) -> None:
    ctx = multiprocessing.get_context("fork")
    for round_ in range(12):
        sweep = tmp_path / str(round_)
        sweep.mkdir()
        job_dir = Path(_ledger(sweep).jobs[0].job_dir)
        n = 3 if with_own else 2
        barrier, queue = ctx.Barrier(n), ctx.Queue()
        procs = [ctx.Process(target=_end_dead, args=(str(sweep), who, barrier, queue)) for who in ("driver", "status")]
        if with_own:
            procs.append(ctx.Process(target=_end_own, args=(str(job_dir), barrier, queue)))
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        said = dict(queue.get(timeout=5) for _ in range(n))
        files = sorted(p.name for p in job_dir.iterdir() if p.name.startswith("result"))
        assert files == ["result.json"]  # one record, no attempt made of another's
        record = json.loads((job_dir / "result.json").read_text())
        if with_own:
            assert record == {"status": "completed", "objective": 0.25}  # the job's own, untouched
        else:
            assert record["recorded_by"] == Recorder.SLURM and record["stderr_tail"] in ("by driver", "by status")
            # Each writer's ledger took the record that stands, whoever wrote it.
            assert said["driver"] == said["status"] == read_record(job_dir).status == JobState.INTERRUPTED
