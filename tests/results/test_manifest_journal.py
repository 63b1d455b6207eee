"""sweep.json and its journal: a job's start or end is one appended line, not a rewrite of every job's record;
every reader (read_manifest, the report, `sweepit status`) folds the journal in; a driver killed mid-write, or
between a snapshot and its new journal, leaves a manifest that reads back as the last whole writes left it; a
moved sweep directory reads and writes at its new place."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sweepit.reporting import load_sweep
from sweepit.reporting.sweep_status import sweep_status
from sweepit.results import SweepPaths, _journal, is_finished
from sweepit.results._claims import claim
from sweepit.results._job_files import write_result
from sweepit.results._manifest import (
    JobEntry,
    Manifest,
    iter_manifest,
    read_manifest,
    write_manifest,
)


def _sweep(tmp_path: Path, n_jobs: int = 3) -> Manifest:
    sweep = tmp_path / "sweep"
    jobs = {}
    for n in range(n_jobs):
        job_dir = sweep / f"{n}_x={n}"
        (job_dir / ".hydra").mkdir(parents=True)
        (job_dir / ".hydra" / "overrides.yaml").write_text(f"- x={n}\n")
        jobs[n] = JobEntry(num=n, overrides=[f"x={n}"], job_dir=str(job_dir))
    m = Manifest(sweep_dir=str(sweep), argv=[sys.executable, "app.py", "-m", "x=0,1,2"], cwd=str(tmp_path),
                 launcher="local", jobs=jobs)
    write_manifest(m)
    return m


def test_a_state_change_is_appended_and_every_reader_sees_it(tmp_path: Path) -> None:
    m = _sweep(tmp_path)
    snapshot = SweepPaths(Path(m.sweep_dir)).manifest.read_bytes()
    m.jobs[1].state, m.jobs[1].pid = "running", 4242
    write_manifest(m, [1])
    m.jobs[1].state = "completed"
    write_result(Path(m.jobs[1].job_dir), {"status": "completed", "objective": 0.5})
    write_manifest(m, [1])
    assert SweepPaths(Path(m.sweep_dir)).manifest.read_bytes() == snapshot  # not rewritten
    assert len(SweepPaths(Path(m.sweep_dir)).journal.read_text().splitlines()) == 3  # head + two records
    back = read_manifest(Path(m.sweep_dir))
    assert back.jobs == m.jobs and back.updated_at == m.updated_at
    assert [n for n, j in back.jobs.items() if not is_finished(Path(j.job_dir))] == [0, 2]  # what a resume runs
    assert {j.num: j.status for j in load_sweep(Path(m.sweep_dir)).jobs} == {0: "queued", 1: "completed", 2: "queued"}
    # A reader's copy appends too, and a whole write folds the journal in and starts it afresh.
    back.jobs[2].state = "running"
    write_manifest(back, [2])
    assert read_manifest(Path(m.sweep_dir)).jobs[2].state == "running"
    write_manifest(back)
    assert [j["state"] for j in iter_manifest(Path(m.sweep_dir))[1]][2] == "running"
    assert SweepPaths(Path(m.sweep_dir)).journal.read_text() == json.dumps({"generation": back.generation}) + "\n"


def test_writes_cost_linear_bytes_over_a_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every job started and ended once: the snapshot is rewritten each time the journal has grown as large as it,
    a few times over the sweep, never at every change (that would be 2 x 400 whole rewrites)."""
    monkeypatch.setattr(_journal, "MIN_COMPACT_BYTES", 0)
    m = _sweep(tmp_path, n_jobs=400)
    first = m.generation
    for n in range(400):
        m.jobs[n].state = "running"
        write_manifest(m, [n])
        m.jobs[n].state = "completed"
        write_manifest(m, [n])
    assert 1 <= m.generation - first <= 4
    assert [e.state for e in read_manifest(Path(m.sweep_dir)).jobs.values()] == ["completed"] * 400


def test_a_whole_write_streams_the_same_json_and_knows_its_size(tmp_path: Path) -> None:
    """The snapshot is written a job at a time (never the whole text in memory); it is the text `write_json` gives
    at once, and the size the driver keeps (to know when the journal has grown as large) is the file's."""
    m = _sweep(tmp_path, n_jobs=5)
    m.jobs[3].overrides = ["lr=0.1", "+note=caf\u00e9"]  # not ASCII: written escaped, one byte a character
    write_manifest(m)
    path = SweepPaths(Path(m.sweep_dir)).manifest
    whole = io.StringIO()
    m.write_json(whole)
    assert path.read_text() == whole.getvalue()
    assert m._disk is not None and m._disk.snapshot_bytes == path.stat().st_size
    assert read_manifest(Path(m.sweep_dir)).jobs == m.jobs
    empty = Manifest(sweep_dir=str(tmp_path / "empty"), argv=["python"], cwd=str(tmp_path), launcher="local")
    write_manifest(empty)
    assert read_manifest(tmp_path / "empty").jobs == {}


def test_a_line_cut_short_is_skipped_and_the_next_write_is_whole(tmp_path: Path) -> None:
    m = _sweep(tmp_path)
    m.jobs[0].state = "running"
    write_manifest(m, [0])
    with open(SweepPaths(Path(m.sweep_dir)).journal, "a") as f:  # the driver killed in the middle of its next write
        f.write('{"job": {"num": 1, "overrides": ["x=1"], "job_di')
    back = read_manifest(Path(m.sweep_dir))
    assert [e.state for e in back.jobs.values()] == ["running", "queued", "queued"]
    generation = back.generation
    back.jobs[2].state = "not started"  # `sweepit status` settling a dead driver's queued jobs, say
    write_manifest(back, [2])
    assert back.generation == generation + 1  # written whole: nothing is appended after a torn line
    again = read_manifest(Path(m.sweep_dir))
    assert [e.state for e in again.jobs.values()] == ["running", "queued", "not started"]


def test_a_journal_of_an_older_snapshot_is_not_folded_in(tmp_path: Path) -> None:
    """Killed between writing a new snapshot and starting its journal: the old journal's records are in the
    snapshot already, and older than it; folding them in would undo a later state."""
    m = _sweep(tmp_path)
    m.jobs[0].state = "running"
    write_manifest(m, [0])
    stale = SweepPaths(Path(m.sweep_dir)).journal.read_bytes()
    m.jobs[0].state = "completed"
    write_manifest(m)
    SweepPaths(Path(m.sweep_dir)).journal.write_bytes(stale)
    back = read_manifest(Path(m.sweep_dir))
    assert back.jobs[0].state == "completed"
    back.jobs[1].state = "running"
    write_manifest(back, [1])  # not appended to a journal that continues another snapshot
    assert [e.state for e in read_manifest(Path(m.sweep_dir)).jobs.values()] == ["completed", "running", "queued"]


def test_a_moved_sweep_reads_its_journal_and_writes_at_its_new_place(tmp_path: Path) -> None:
    m = _sweep(tmp_path)
    m.jobs[0].state = "running"
    m.jobs[0].pid = 2 ** 22 + 7  # no such process: the driver is gone, and so is the job
    write_manifest(m, [0])
    moved = tmp_path / "elsewhere" / "sweep"
    shutil.move(m.sweep_dir, moved)
    back = read_manifest(moved)
    assert back.sweep_dir == str(moved) and back.jobs[0].job_dir == str(moved / "0_x=0")
    assert back.jobs[0].state == "running"  # from the journal
    write_result(moved / "1_x=1", {"status": "completed", "objective": 1.0})
    text, going = sweep_status(moved)
    assert not going and "1 completed" in text and "1 interrupted" in text
    on_disk = json.loads(SweepPaths(moved).manifest.read_text())  # written whole at the new place
    assert on_disk["sweep_dir"] == str(moved)
    jobs = list(iter_manifest(moved)[1])
    assert [j["state"] for j in jobs] == ["interrupted", "completed", "not started"]
    assert [j["job_dir"] for j in jobs] == [str(moved / f"{n}_x={n}") for n in range(3)]


def test_a_manifest_of_an_earlier_version_without_a_journal_reads_and_is_written_whole(tmp_path: Path) -> None:
    m = _sweep(tmp_path)
    data = json.loads(SweepPaths(Path(m.sweep_dir)).manifest.read_text())
    del data["generation"]
    data["version"] = 1
    SweepPaths(Path(m.sweep_dir)).manifest.write_text(json.dumps(data))
    SweepPaths(Path(m.sweep_dir)).journal.unlink()
    back = read_manifest(Path(m.sweep_dir))
    assert back.jobs == m.jobs
    back.jobs[0].state = "running"
    write_manifest(back, [0])
    assert next(iter_manifest(Path(m.sweep_dir))[1])["state"] == "running"


def test_status_of_a_large_sweep_lists_the_jobs_that_did_not_finish_and_counts_every_job(tmp_path: Path) -> None:
    m = _sweep(tmp_path, n_jobs=60)
    for n in range(60):
        if n in (7, 59):
            continue  # queued when the driver went away
        status = "failed" if n == 30 else "completed"
        write_result(Path(m.jobs[n].job_dir), {"status": status, "objective": None if n == 30 else n / 100})
        m.jobs[n].state = status
    write_manifest(m)

    def listed(text: str) -> list[str]:
        table = text.split("\n\n", 1)[0]
        return [line.split()[0] for line in table.splitlines()[2:]]

    text, going = sweep_status(Path(m.sweep_dir), max_rows=50)
    assert listed(text) == ["7", "30", "59"] and not going
    assert "60 jobs: 57 completed, 1 failed, 2 not started (57 finished jobs not listed" in text
    assert listed(sweep_status(Path(m.sweep_dir), max_rows=0)[0]) == [str(n) for n in range(60)]
    text = sweep_status(Path(m.sweep_dir), max_rows=2)[0]  # more unfinished jobs than rows: the first ones
    assert listed(text) == ["7", "30"] and "(57 finished and 1 unfinished jobs not listed" in text


@contextlib.contextmanager
def _driver_holding(sweep_dir: Path) -> Iterator[None]:
    """Another process holding the sweep's lock, as a live driver does."""
    code = ("import sys, time\nfrom pathlib import Path\nfrom sweepit.results._lock import SweepLock\n"
            "SweepLock(Path(sys.argv[1])).acquire()\nprint('held', flush=True)\ntime.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(sweep_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield
    finally:
        proc.kill()
        proc.wait()


def _packed_sweep(tmp_path: Path, n_jobs: int, claimed_nums: list[int]) -> Manifest:
    """A packed Slurm sweep in its second submission (generation 2), every job queued in the manifest, the jobs
    `claimed_nums` claimed by a worker."""
    m = _sweep(tmp_path, n_jobs)
    m.launcher = "slurm"
    for e in m.jobs.values():
        e.state, e.extra = "queued", {"packed": 0, "generation": 2}
    write_manifest(m)
    for n in claimed_nums:
        claim(SweepPaths(Path(m.sweep_dir)).claims(2) / str(n), "7_0 2026-11-24T21:00:00")
    return m


def test_status_reads_nothing_of_a_packed_job_no_worker_has_claimed(tmp_path: Path) -> None:
    """One listing of the claims folder instead of a read per job (95,000 missing results at a time in a 100,000-job
    sweep); a result left by the earlier submission of a job that waits to run again is not taken for its outcome."""
    m = _packed_sweep(tmp_path, 6, claimed_nums=[0, 1])
    write_result(Path(m.jobs[1].job_dir), {"status": "completed", "objective": 0.5})
    write_result(Path(m.jobs[4].job_dir), {"status": "failed", "error": "RuntimeError: the first submission's run"})
    with _driver_holding(Path(m.sweep_dir)):  # a driver follows: nothing is written, no worker is taken for gone
        text, going = sweep_status(Path(m.sweep_dir), max_rows=0)
    states = {line.split()[0]: line.split()[2] for line in text.split("\n\n", 1)[0].splitlines()[2:]}
    assert states == {"0": "queued", "1": "completed", "2": "queued", "3": "queued", "4": "queued", "5": "queued"}
    assert going and "6 jobs: 1 completed, 5 queued" in text


def test_status_with_a_live_driver_looks_again_at_the_jobs_it_lists_and_counts_the_others_as_recorded(
        tmp_path: Path) -> None:
    """A driver records what ends (its journal is read with the manifest): a look at a 100,000-job sweep reads the
    rows it shows, not every unfinished job's files. Without a driver, every job not finished is looked at."""
    m = _packed_sweep(tmp_path, 60, claimed_nums=[5, 55])
    for n in (5, 55):
        write_result(Path(m.jobs[n].job_dir), {"status": "completed", "objective": n / 100})
    with _driver_holding(Path(m.sweep_dir)):
        text, _ = sweep_status(Path(m.sweep_dir), max_rows=50)  # jobs 0-49 listed; 55 not yet recorded by the driver
    assert "60 jobs: 1 completed, 59 queued (10 unfinished jobs not listed" in text
    text, _ = sweep_status(Path(m.sweep_dir), max_rows=50)  # no driver: every unfinished job is looked at
    assert "60 jobs: 2 completed" in text
