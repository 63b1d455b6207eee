"""sweep.json's records hold each fact once (`_records`): a packed job's log paths and the sweep's settings are not
repeated per job, and every record reads back whole; a sweep.json written before (whole records) still reads and
takes appends. While a driver follows a large sweep it keeps `sweep.live.json` (counts, the jobs status lists), and
`sweepit status` reads that instead of every record, printing the same."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

from sweepit.reporting.sweep_status import sweep_status
from sweepit.results import LIVE_ROWS, SweepPaths
from sweepit.results._job_files import write_result
from sweepit.results._journal import append_records
from sweepit.results._live import Tally
from sweepit.results._lock import LOCK_FILE
from sweepit.results._manifest import JobEntry, Manifest, iter_manifest, read_manifest, write_manifest

SETTINGS = {"gpus": 0, "nodes": 1, "timeout_min": 10, "metric": None, "direction": None, "result_grace_s": 60.0}


def _packed(tmp_path: Path, n_jobs: int) -> Manifest:
    """A packed sweep's records as its driver plans them (`slurm/_pack.py`): queued, logs in the job directory."""
    sweep = tmp_path / "a-sweep-directory-with-a-long-name" / "2026-11-26_17-00-00"
    jobs = {}
    for n in range(n_jobs):
        job_dir = sweep / f"{n}_lr={n / 10},optimizer=adam"
        jobs[n] = JobEntry(num=n, overrides=[f"lr={n / 10}", "optimizer=adam"], job_dir=str(job_dir),
                           state="queued", extra={"packed": 0, "generation": 1, "stdout": str(job_dir / "stdout.log"),
                                                  "stderr": str(job_dir / "stderr.log"), **SETTINGS})
    sweep.mkdir(parents=True)
    return Manifest(sweep_dir=str(sweep), argv=[sys.executable, "app.py", "-m"], cwd=str(tmp_path),
                    launcher="slurm", jobs=jobs)


def _job_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith('  {"num"')]


def test_a_record_holds_each_fact_once_and_reads_back_whole(tmp_path: Path) -> None:
    m = _packed(tmp_path, 40)
    # What some jobs have and most do not, in every shape a record's values take.
    m.jobs[3].extra.update(slurm_job_id="77_1", slurm_array_job_id="77", retries=1)
    m.jobs[4].extra = {"held": "$HOME quota", "not_started": {"why": "budget"}, "packed": False}
    m.jobs[5].state, m.jobs[5].pid, m.jobs[5].started_at = "running", 4321, "2026-11-26T17:00:00.000+00:00"
    m.jobs[6].job_dir, m.jobs[6].extra = "", {}          # a local launcher's job not started yet
    m.jobs[7].job_dir = "/elsewhere/7_x"                  # a folder outside the sweep (hydra.sweep.subdir)
    m.jobs[7].extra.update(stdout="/elsewhere/7_x/stdout.log", stderr="/elsewhere/7_x/stderr.log")
    m.jobs[8].extra["generation"] = 1.0                   # a float equal to the shared int stays a float
    write_manifest(m)
    path = SweepPaths(Path(m.sweep_dir)).manifest
    lines = _job_lines(path)
    assert len(lines) == 40
    # A queued job's record: its number, overrides and folder name; the sweep directory, its log paths and the
    # sweep's settings are written once, in the sweep fields.
    assert lines[0] == '  {"num": 0, "overrides": ["lr=0.0", "optimizer=adam"], "job_dir": "0_lr=0.0,optimizer=adam"},'
    assert not any(m.sweep_dir in line for line in lines)
    assert [n for n, line in enumerate(lines) if "timeout_min" in line] == [4, 6]  # the jobs without the settings
    assert json.loads(path.read_text())["job_defaults"]["extra"]["stdout"] == "$/stdout.log"
    assert read_manifest(Path(m.sweep_dir)).jobs == m.jobs
    assert list(iter_manifest(Path(m.sweep_dir))[1])[4]["extra"] == m.jobs[4].extra
    # A journal line continues the same layout.
    m.jobs[9].state, m.jobs[9].extra["slurm_job_id"] = "running", "77_2"
    write_manifest(m, [9])
    journal = SweepPaths(Path(m.sweep_dir)).journal.read_text().splitlines()
    assert m.sweep_dir not in journal[-1] and "timeout_min" not in journal[-1]
    assert read_manifest(Path(m.sweep_dir)).jobs == m.jobs


def _hold(sweep: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["sleep", "600"])
    (sweep / LOCK_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": proc.pid,
                                               "since": "2026-11-26T17:00:00.000+00:00", "argv": ["python"]}))
    return proc


def _local_sweep(tmp_path: Path, n_jobs: int) -> Manifest:
    sweep = tmp_path / "sweep"
    jobs = {}
    for n in range(n_jobs):
        job_dir = sweep / f"{n}_x={n}"
        job_dir.mkdir(parents=True)
        jobs[n] = JobEntry(num=n, overrides=[f"x={n}"], job_dir=str(job_dir))
    m = Manifest(sweep_dir=str(sweep), argv=[sys.executable, "app.py", "-m"], cwd=str(tmp_path), launcher="local",
                 jobs=jobs)
    write_manifest(m)
    return m


def _end(m: Manifest, nums: list[int], status: str) -> None:
    for n in nums:
        write_result(Path(m.jobs[n].job_dir), {"status": status, "objective": float(n)})
        m.jobs[n].state = status
    write_manifest(m, nums)


def test_status_of_a_followed_sweep_reads_the_driver_counts_not_every_record(tmp_path: Path) -> None:
    n_jobs = 3 * LIVE_ROWS
    m = _local_sweep(tmp_path, n_jobs)
    sweep = Path(m.sweep_dir)
    for n in range(0, n_jobs, 3):  # started, then some end, as a driver records them
        m.jobs[n].state, m.jobs[n].pid = "running", 4321
    write_manifest(m, range(0, n_jobs, 3))
    _end(m, list(range(0, 2 * LIVE_ROWS)), "completed")
    _end(m, [2 * LIVE_ROWS + 1, 2 * LIVE_ROWS + 5], "failed")
    live = json.loads(SweepPaths(sweep).live.read_text())
    assert live["counts"] == dict(Counter(e.state for e in read_manifest(sweep).jobs.values()))
    proc = _hold(sweep)
    try:
        looked = sweep_status(sweep)
        SweepPaths(sweep).live.unlink()  # every record read instead: the same text
        assert sweep_status(sweep) == looked
        _end(m, [2 * LIVE_ROWS + 2], "completed")  # the driver writes it again at its next change
        looked = sweep_status(sweep)
        text, going = looked
        assert going and f"{n_jobs} jobs: 101 completed, 2 failed, 33 queued, 14 running (101 finished jobs not " \
            "listed" in text
        # With the driver's counts, status reads sweep.json's sweep fields alone: its job records cut off here
        # change nothing it prints.
        path = SweepPaths(sweep).manifest
        whole = path.read_text()
        path.write_text(whole[:whole.index('\n "jobs": [') + len('\n "jobs": [')])
        assert sweep_status(sweep) == looked
        # A journal line the count does not name yet (written by another hand, or the driver between the two): every
        # record is read, and the line counts.
        path.write_text(whole)
        m.jobs[2 * LIVE_ROWS + 3].state = "completed"
        append_records(sweep, [json.dumps(m._disk.codec.encode(m.jobs[2 * LIVE_ROWS + 3]))], "2026-11-26T17:00:00Z")
        assert "102 completed" in sweep_status(sweep)[0]
    finally:
        proc.kill()
        proc.wait()


def test_the_driver_count_follows_every_change_as_a_recount_would() -> None:
    """`Tally`, kept at each write from the jobs written alone, against counting every job again: the counts, the
    running jobs and the first unfinished ones, through states going back and forth, jobs added and removed."""
    rng = random.Random(39)
    states = ["queued", "running", "completed", "failed", "diverged", "not started", "interrupted"]
    for _ in range(40):
        n_jobs = rng.randrange(1, 300)
        jobs = {n: JobEntry(num=n, overrides=[], job_dir="", state=rng.choice(states)) for n in range(n_jobs)}
        tally = Tally(jobs)
        for step in range(rng.randrange(1, 2000)):
            num = rng.randrange(0, n_jobs + 5)
            if num not in jobs:
                jobs[num] = JobEntry(num=num, overrides=[], job_dir="", state=rng.choice(states))
            elif rng.random() < 0.02:
                del jobs[num]
            else:
                jobs[num].state = rng.choice(states)
            tally.update(jobs, {num: "{}"})
            if step % 29 == 0:
                unfinished = sorted(n for n, e in jobs.items() if e.state not in ("completed", "diverged"))
                assert tally.first_unfinished(LIVE_ROWS) == unfinished[:LIVE_ROWS]
                assert +tally.counts == Counter(e.state for e in jobs.values())
                assert tally.running == {n for n, e in jobs.items() if e.state == "running"}
