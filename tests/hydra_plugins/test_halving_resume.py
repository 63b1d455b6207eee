"""A halving sweep whose driver is killed (SIGKILL) or stopped (Ctrl-C) between rungs, then resumed: the rung decided
before the stop is not decided again, and every job runs each of its rungs exactly once. The jobs of the last rung are
held at their first training step (sweepit_testing.Hold): the stop lands after the first rung's decision, on any
machine."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sweepit.results import JobPaths, job_folders, read_manifest, read_record, read_rungs
from sweepit_testing import REPO, SWEEPIT, Hold, processes_mentioning, run_command, wait_until

pytestmark = pytest.mark.slow

# 4 jobs of 4 epochs, cut at epoch 2 (eta 2): the best 2 go on to epoch 4, where held_jobs holds them once their
# second epoch is reported, at the first step of the last rung.
SWEEP = ["task=linreg", "model._target_=held_jobs.linear", "epochs=4", "lr=0.01,0.02,0.03,0.04",
         "hydra/sweeper=halving", "hydra.sweeper.eta=2", "hydra.sweeper.rungs=[2]", "hydra.launcher.n_workers=2",
         "hydra.callbacks.summary.report=false"]
EPOCH_LINE = re.compile(r"^Epoch (\d+)/4\b", re.MULTILINE)


def _epochs_run(job_dir: Path) -> list[int]:
    """The ledger of a job's epochs: each `Epoch N/4` line its attempts printed (stdout.log, stdout.1.log, ...)."""
    logs = [*sorted(job_dir.glob("stdout.*.log"), key=lambda p: int(p.name.split(".")[1])), JobPaths(job_dir).stdout]
    return [int(e) for log in logs for e in EPOCH_LINE.findall(log.read_text())]


def _attempts(job_dir: Path) -> list[tuple[str, int]]:
    """Each attempt's status and epochs, the first first (result.1.json, ..., then result.json)."""
    names = sorted((p.name for p in job_dir.glob("result.*.json")), key=lambda n: int(n.split(".")[1]))
    records = [read_record(job_dir, name) for name in [*names, "result.json"]]
    return [(str(r.status), int(r.result["epochs_completed"])) for r in records]


@pytest.mark.parametrize("fault", [signal.SIGKILL, signal.SIGINT], ids=["driver-SIGKILL", "driver-Ctrl-C"])
def test_a_driver_stopped_between_rungs_resumes_with_each_rung_run_once_and_no_decision_taken_twice(
        tmp_path: Path, fault: signal.Signals) -> None:
    sweep, hold = tmp_path / "sweep", Hold(tmp_path / "hold")
    driver = subprocess.Popen([sys.executable, "train.py", "-m", *SWEEP, f"hydra.sweep.dir={sweep}"], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=hold.env())
    try:
        wait_until(lambda: (p := read_rungs(sweep)) is not None and len(p.promoted) == 1, "the first rung's decision",
                   180)
        plan = read_rungs(sweep)
        assert plan is not None
        (promoted,) = plan.promoted
        assert len(promoted) == 2
        for num in promoted:
            wait_until(lambda n=num: hold.held(n), f"job {num} held in the last rung", 120, interval_s=0.05)
        driver.send_signal(fault)
        _, err = driver.communicate(timeout=60)
    finally:
        driver.kill()
    if fault == signal.SIGKILL:
        assert driver.returncode == -signal.SIGKILL
    else:  # the driver stops its jobs and says how to go on
        assert driver.returncode == 1, err[-3000:]
        assert (f"so the halving sweep stops; its jobs' folders, records, checkpoints and rung decisions stay.\n"
                f"`sweepit resume {sweep}` goes on from there: no job runs a rung twice.") in err, err[-3000:]
    wait_until(lambda: not processes_mentioning(str(sweep)), "every job of the sweep to end", 30)
    cut = sorted(set(range(4)) - set(promoted))
    assert {n: read_record(f).status for n, f in job_folders(sweep).items()} == {
        **dict.fromkeys(cut, "paused"), **dict.fromkeys(promoted, "interrupted")}

    looked = run_command([SWEEPIT, "status", sweep], REPO, hold.env())
    assert looked.returncode == 0, looked.stderr
    assert (f"the halving sweep stopped before its last rung ended: `sweepit resume {sweep}` goes on from there, and "
            "no job runs a rung twice.") in looked.stdout, looked.stdout
    assert "did not complete" not in looked.stdout, looked.stdout

    hold.release()
    resumed = run_command([SWEEPIT, "resume", sweep], REPO, hold.env(), timeout_s=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "halving: 2 job(s) to epoch 4\n" in resumed.stdout + resumed.stderr, resumed.stdout
    after = read_rungs(sweep)
    assert after is not None and after.promoted == [promoted]  # the rung decided before the kill, not decided again
    folders = job_folders(sweep)
    for num, folder in folders.items():
        assert folder is not None
        if num in promoted:
            # Rung 1 paused at epoch 2; the last rung, killed before its first step, then resumed from epoch 2.
            assert _attempts(folder) == [("paused", 2), ("interrupted", 2), ("completed", 4)], num
            assert _epochs_run(folder) == [1, 2, 3, 4], num
            assert "sweepit: resumed from" in JobPaths(folder).stdout.read_text(), num
        else:
            assert _attempts(folder) == [("paused", 2)], num  # not started again
            assert _epochs_run(folder) == [1, 2], num
    states = {e.num: str(e.state) for e in read_manifest(sweep).jobs.values()}
    assert states == {**dict.fromkeys(cut, "paused"), **dict.fromkeys(promoted, "completed")}
    looked = run_command([SWEEPIT, "status", sweep], REPO, hold.env())
    assert "sweepit resume" not in looked.stdout, looked.stdout
