"""Faults injected for real into local sweeps of `task=linreg`, and what survives each: every job's result exactly
once, no metrics row lost or doubled, sweep.json in step with the results, and a resume that runs only what did not
finish (continuing from its epoch checkpoint). The README's "What survives what" table is written from these.
Each sweep's jobs wait after their second epoch until the test releases them (sweepit_testing.Hold): a fault lands
mid-training on any machine, and no job burns CPU to be slow enough to be hit there.

Covered elsewhere, not repeated here: a second driver on the same directory, and `sweepit resume` while the driver
runs, are refused with who holds the lock (tests/local/test_sweep_lock.py); a job that segfaults, raises or exits
fails alone and a resume reruns only it (tests/local/test_local_launcher.py); a full disk under one atomic write
(tests/test_files.py); `sweepit status` with a late or truncated result.json (tests/results/test_status_command.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sweepit.results._job_files import read_result
from sweepit.results._lock import LOCK_FILE
from sweepit.results._manifest import read_manifest
from sweepit_testing import REPO, SWEEPIT, Hold, processes_mentioning, run_command, tmpfs, wait_until

pytestmark = pytest.mark.slow

FORK_WINDOW_DRIVER = Path(__file__).parent / "app" / "fork_window_driver.py"
EPOCHS, N_JOBS = 4, 4
# Four jobs on two workers, each held after its second epoch until the test releases them (held_jobs: the model of
# task=linreg with a hold), so that the test finds them mid-training however loaded the machine is.
SWEEP = ["task=linreg", "model._target_=held_jobs.linear", f"epochs={EPOCHS}", "lr=0.01,0.02,0.03,0.04",
         "hydra.launcher.n_workers=2", "hydra.callbacks.summary.report=false"]


@pytest.fixture
def hold(tmp_path: Path) -> Hold:
    return Hold(tmp_path / "hold")


def _driver(sweep: Path, hold: Hold, *more: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "train.py", "-m", *SWEEP, f"hydra.sweep.dir={sweep}", *more], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=hold.env())


def _held(sweep: Path, hold: Hold, num: int | None = None) -> None:
    """Wait until job `num` (any job: None) waits for the release, its first epochs kept."""
    wait_until(lambda: hold.held(num), f"job {'any' if num is None else num} held mid-training", 120,
               interval_s=0.05)
    assert _mid_training(sweep, num)


def _stop_mid_training(sweep: Path, hold: Hold, stop: signal.Signals, *more: str,
                       jobs: tuple[int | None, ...] = (None,)) -> tuple[subprocess.Popen[str], str, str]:
    """A sweep's driver, sent `stop` once `jobs` are held mid-training (None: any job); the driver, its stdout and
    stderr once it ended."""
    driver = _driver(sweep, hold, *more)
    try:
        for num in jobs:
            _held(sweep, hold, num)
        driver.send_signal(stop)
        out, err = driver.communicate(timeout=60)
    finally:
        driver.kill()
    return driver, out, err


def _sweepit(hold: Hold, *args: str) -> subprocess.CompletedProcess[str]:
    return run_command([SWEEPIT, *args], REPO, hold.env(), timeout_s=120)


def _ended(pid: int) -> bool:
    """The process is gone, or a zombie: it runs no more code."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _job_dirs(sweep: Path) -> dict[int, Path]:
    dirs: dict[int, Path] = {}
    for p in sweep.iterdir() if sweep.is_dir() else []:
        if p.is_dir() and p.name[0].isdigit():
            num = int(p.name.split("_")[0])
            assert num not in dirs, f"job {num} has two directories: {dirs.get(num)} and {p}"
            dirs[num] = p
    return dirs


def _epochs(job_dir: Path) -> list[int]:
    path = job_dir / "metrics.jsonl"
    return [json.loads(line)["epoch"] for line in path.read_text().splitlines()] if path.exists() else []


def _mid_training(sweep: Path, num: int | None = None) -> bool:
    dirs = _job_dirs(sweep)
    return any(len(_epochs(d)) >= 2 for n, d in dirs.items() if num is None or n == num)


def _intact(sweep: Path) -> dict[int, Path]:
    """What a fault leaves must be readable: sweep.json, every result.json, each metrics row once and in order,
    and no temporary file of a write that did not finish."""
    assert [str(p) for p in sweep.rglob(".*.tmp")] == []
    manifest = read_manifest(sweep)
    dirs = _job_dirs(sweep)
    for num, d in dirs.items():
        read_result(d)  # raises on a half-written file
        epochs = _epochs(d)
        assert epochs == list(range(1, len(epochs) + 1)), (num, epochs)
        assert num in manifest.jobs
    return dirs


def _all_completed_once(sweep: Path) -> None:
    dirs = _intact(sweep)
    assert sorted(dirs) == list(range(N_JOBS))
    for num, d in dirs.items():
        result = read_result(d) or {}
        assert result["status"] == "completed" and result["epochs_completed"] == EPOCHS, (num, result)
        assert _epochs(d) == list(range(1, EPOCHS + 1)), num  # no epoch lost or doubled by the rerun
    assert [e.state for e in read_manifest(sweep).jobs.values()] == ["completed"] * N_JOBS
    assert not (sweep / LOCK_FILE).exists()


def _started(dirs: dict[int, Path]) -> dict[int, str]:
    """When each finished job started: a job a resume skips keeps it."""
    return {n: str((read_result(d) or {}).get("started_at")) for n, d in dirs.items()
            if (read_result(d) or {}).get("status") == "completed"}


@pytest.mark.parametrize("fault", [signal.SIGKILL, signal.SIGINT], ids=["driver-SIGKILL", "driver-Ctrl-C"])
def test_a_stopped_driver_keeps_every_epoch_and_a_resume_finishes_the_rest(tmp_path: Path, hold: Hold,
                                                                          fault: signal.Signals) -> None:
    """The Ctrl-C stop's sweep also serves its short message (_stopped_sweep_said) and a Ctrl-C to the `sweepit
    resume` that follows it (_resume_stopped_by): one stopped sweep, not three."""
    sweep = tmp_path / "sweep"
    # Both running jobs held: each has the checkpoint of its last reported epoch, which its resume must go on from
    # (a job stopped between an epoch's metrics row and its checkpoint would rightly start again).
    driver, out, err = _stop_mid_training(sweep, hold, fault, jobs=(0, 1))
    wait_until(lambda: not processes_mentioning(str(sweep)), "every job of the sweep to end", 15)
    dirs = _intact(sweep)
    stopped = {n: read_result(d) or {} for n, d in dirs.items() if (read_result(d) or {}).get("status") != "completed"}
    assert stopped and all(r["status"] == "interrupted" for r in stopped.values()), stopped  # each job said so itself
    if fault == signal.SIGINT:
        assert driver.returncode == 1 and "sweep stopped by SIGINT" in err and f"sweepit resume {sweep}" in err
        # The table counts what the stop message counts: jobs that never started (no directory) too.
        tally = err.split("sweep stopped by SIGINT: ")[1].split(" (of ")[0]
        assert f"\n{N_JOBS} jobs: {tally}\n" in out, (out, err)
        assert not (sweep / LOCK_FILE).exists()
        _stopped_sweep_said(sweep, driver, out, err, fault, "basic")
    else:
        assert driver.returncode == -signal.SIGKILL and (sweep / LOCK_FILE).exists()  # the dead driver's lock

    looked = _sweepit(hold, "status", str(sweep))  # nothing is queued or running once the driver is gone
    assert looked.returncode == 0, looked.stderr
    states = [line.split()[2] for line in looked.stdout.splitlines()[2:2 + N_JOBS]]
    assert set(states) <= {"completed", "interrupted", "not"}, looked.stdout  # "not started"
    assert f"{N_JOBS - states.count('completed')} job(s) did not complete" in looked.stdout
    if fault == signal.SIGINT:
        _resume_stopped_by(sweep, hold, signal.SIGINT)
        dirs = _intact(sweep)

    before = _started(dirs)
    hold.release()
    resumed = _sweepit(hold, "resume", str(sweep))
    assert resumed.returncode == 0, resumed.stderr
    said = resumed.stdout + resumed.stderr
    assert ("taking over" in said) == (fault == signal.SIGKILL)  # the dead driver's lock, with a message
    assert "holds no record of a sweep" not in said
    _all_completed_once(sweep)
    assert _started(_job_dirs(sweep)).items() >= before.items()  # finished jobs were not run again
    for num, result in stopped.items():
        if result.get("epochs_completed"):
            assert "sweepit: resumed from" in (dirs[num] / "stdout.log").read_text(), num


def test_a_job_killed_mid_training_fails_alone_and_a_resume_reruns_only_it(tmp_path: Path, hold: Hold) -> None:
    """Jobs are forked by a small warm process (the fork server), itself forked by the driver before it held any
    job: a job killed there is recorded as one forked by the driver was."""
    sweep = tmp_path / "sweep"
    driver = _driver(sweep, hold)
    try:
        _held(sweep, hold, 0)
        pid = int(read_manifest(sweep).jobs[0].pid or 0)
        server = _parent(pid)
        assert server != driver.pid and _parent(server) == driver.pid, (pid, server, driver.pid)
        os.kill(pid, signal.SIGKILL)
        hold.release()  # the rest of the sweep goes on
        out, err = driver.communicate(timeout=120)
    finally:
        driver.kill()
    assert driver.returncode == 1, err
    dirs = _intact(sweep)
    killed = read_result(dirs[0]) or {}
    assert killed["status"] == "failed" and killed["exit_signal"] == "SIGKILL", killed
    assert "died from signal SIGKILL" in err and f"sweepit resume {sweep}" in err
    assert f"{N_JOBS} jobs: {N_JOBS - 1} completed, 1 failed" in out  # the rest of the sweep went on
    assert [e.state for e in read_manifest(sweep).jobs.values()] == ["failed"] + ["completed"] * (N_JOBS - 1)

    before = _started(dirs)
    resumed = _sweepit(hold, "resume", str(sweep))
    assert resumed.returncode == 0, resumed.stderr
    assert f"{N_JOBS - 1} skipped (finished before)" in resumed.stdout + resumed.stderr
    _all_completed_once(sweep)
    assert _started(_job_dirs(sweep)).items() >= before.items()
    assert "sweepit: resumed from" in (dirs[0] / "stdout.log").read_text()


@pytest.mark.parametrize(("stop", "sweeper"), [(signal.SIGTERM, "basic"), (signal.SIGINT, "optuna")],
                         ids=["SIGTERM", "Ctrl-C-optuna"])
def test_a_stopped_sweep_ends_with_its_own_short_message_and_its_jobs_name_the_signal(
        tmp_path: Path, hold: Hold, stop: signal.Signals, sweeper: str) -> None:
    """Ctrl-C of a basic sweep: test_a_stopped_driver_keeps_every_epoch_and_a_resume_finishes_the_rest[driver-Ctrl-C].
    The SIGTERM-stopped sweep then serves a SIGTERM to its `sweepit resume` (_resume_stopped_by)."""
    sweep = tmp_path / "sweep"
    driver, out, err = _stop_mid_training(sweep, hold, stop, f"hydra/sweeper={sweeper}")
    _stopped_sweep_said(sweep, driver, out, err, stop, sweeper)
    if sweeper == "basic":
        wait_until(lambda: not processes_mentioning(str(sweep)), "every job of the first run to end", 15)
        _resume_stopped_by(sweep, hold, stop)


def _stopped_sweep_said(sweep: Path, driver: subprocess.Popen[str], out: str, err: str, stop: signal.Signals,
                        sweeper: str) -> None:
    """Ctrl-C ended with Hydra's "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace." (a stop
    is no crash), a line per interrupted job, and each job's note said `stopped by SIGTERM` (the driver's signal to
    its jobs), not the SIGINT the user sent."""
    assert driver.returncode == 1, err
    assert "HYDRA_FULL_ERROR" not in err and "Traceback" not in err, err
    stopped = [r for r in (read_result(d) or {} for d in _intact(sweep).values()) if r.get("status") == "interrupted"]
    assert stopped and {r["error"] for r in stopped} == {f"KeyboardInterrupt: stopped by {stop.name}"}, stopped
    assert f"stopped by {stop.name}" in out and "SIGTERM" not in out.replace(stop.name, ""), out  # the table's notes
    said = err[err.index("sweep stopped by" if sweeper == "basic" else "was interrupted, so the search stops"):]
    assert f"stopped by {stop.name}" in said and not any(line.startswith("  job ") for line in said.splitlines()), said
    if sweeper == "basic":
        assert "what finished is kept" in said and f"sweepit resume {sweep}" in said, said
    assert not (sweep / "report").exists()  # hydra.callbacks.summary.report=false holds for a stopped sweep too


def _resume_stopped_by(sweep: Path, hold: Hold, stop: signal.Signals) -> None:
    """A signal to `sweepit resume` of the stopped `sweep` reaches the driver: `sweepit resume` is the driver (it ran
    the driver as a child: SIGINT to its pid was ignored and the sweep ran on; SIGTERM, as `timeout`, a batch script
    or a session's end sends it, orphaned the driver and its jobs)."""
    resumed = subprocess.Popen([SWEEPIT, "resume", str(sweep)], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=hold.env())  # its jobs held, never released
    try:
        wait_until(lambda: any(e.state == "running" for e in read_manifest(sweep).jobs.values()),
                   "a job of the resumed sweep running", 60, interval_s=0.05)
        resumed.send_signal(stop)
        _, err = resumed.communicate(timeout=60)
    finally:
        resumed.kill()
    assert resumed.returncode == 1, err
    assert f"sweep stopped by {stop.name}" in err and f"sweepit resume {sweep}" in err
    wait_until(lambda: not processes_mentioning(str(sweep)), "every process of the resumed sweep to end", 15)
    dirs = _intact(sweep)
    assert any((read_result(d) or {}).get("status") != "completed" for d in dirs.values())  # it did stop
    assert not (sweep / LOCK_FILE).exists()


@pytest.fixture
def sweep_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB file system: room for the sweep's first epochs, not for a filler file too."""
    with tmpfs(tmp_path / "disk", "512k") as mount:
        yield mount


def test_a_full_disk_stops_the_sweep_with_the_path_and_damages_nothing(sweep_tmpfs: Path, hold: Hold) -> None:
    sweep = sweep_tmpfs / "sweep"
    filler = sweep_tmpfs / "filler"
    driver = _driver(sweep, hold)
    try:
        _held(sweep, hold)
        with open(filler, "wb", buffering=0) as f:  # every free block, while the jobs train
            try:
                while True:
                    f.write(b"x" * 4096)
            except OSError:
                pass
        hold.release()  # their next writes find the disk full
        _, err = driver.communicate(timeout=120)
    finally:
        driver.kill()
    assert driver.returncode == 1
    said = " ".join(err.split())
    assert f"sweepit could not write {sweep}/" in said and "the file system is full" in said, err
    assert f"sweepit resume {sweep}" in said and "Traceback" not in err
    wait_until(lambda: not processes_mentioning(str(sweep)), "every job of the sweep to end", 15)
    _intact(sweep)
    assert not (sweep / LOCK_FILE).exists()

    filler.unlink()  # space again: the resume finishes the sweep from what was kept
    resumed = _sweepit(hold, "resume", str(sweep))
    assert resumed.returncode == 0, resumed.stderr
    _all_completed_once(sweep)


def test_a_sigterm_in_the_fork_window_stops_the_job_at_once(tmp_path: Path) -> None:
    """The signal lands after the fork, before the job has its own handler. Before: the driver's inherited handler
    noted it and the job ran on (to its end, 15 s here, or until the SIGKILL after term_grace_s)."""
    done = subprocess.run([sys.executable, str(FORK_WINDOW_DRIVER), str(tmp_path / "sweep")], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["status"] == "interrupted", outcome
    assert outcome["error"] == "KeyboardInterrupt: stopped by SIGTERM"
    assert outcome["elapsed_s"] < 3.0, outcome  # not the job's 15 s, nor the 30 s grace before a SIGKILL


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_the_fork_server_killed_mid_sweep_runs_its_jobs_again_once_and_the_sweep_completes(tmp_path: Path,
                                                                                          hold: Hold) -> None:
    """The server's running jobs die with it (each records itself interrupted), and a new server runs each again,
    once: every job ends completed with one result.json and each epoch's metrics once."""
    sweep = tmp_path / "sweep"
    driver = _driver(sweep, hold)
    try:
        _held(sweep, hold, 0)
        running = {n: int(e.pid or 0) for n, e in read_manifest(sweep).jobs.items() if e.state == "running"}
        server = _parent(running[0])
        assert server != driver.pid
        os.kill(server, signal.SIGKILL)
        # Released once the server's jobs have ended (each at the signal its dying parent sends it), not before:
        # a job released first could train on to its end.
        wait_until(lambda: all(_ended(pid) for pid in running.values()), "the server's jobs to end", 60)
        hold.release()
        out, err = driver.communicate(timeout=180)
    finally:
        driver.kill()
    assert driver.returncode == 0, err
    assert "the fork server died" in out + err, (out, err)
    _all_completed_once(sweep)
    dirs = _job_dirs(sweep)
    for num, d in dirs.items():
        attempts = sorted(p.name for p in d.glob("result*.json"))
        # A job that was running has its interrupted attempt kept beside its result, as a resumed job has.
        assert attempts == (["result.1.json", "result.json"] if num in running else ["result.json"]), (num, attempts)
        if num in running:
            assert json.loads((d / "result.1.json").read_text())["status"] == "interrupted", num
