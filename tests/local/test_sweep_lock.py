"""One driver per sweep directory (`sweep.lock`): a second driver, or `sweepit resume` while the first runs, is
refused with who holds the lock and what to do; `sweepit status` then only looks; a lock left by a dead driver
is taken over with a message. Real drivers in subprocesses, and a lock from another host for the heartbeat."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweepit.errors import SweepLockedError
from sweepit.results._lock import LOCK_FILE, STALE_S, SweepLock
from sweepit.results._manifest import iter_manifest
from sweepit_testing import SWEEPIT, wait_until

ROOT = Path(__file__).parents[2]
APP = Path(__file__).parent / "app" / "launcher_test_app.py"


def _driver(sweep: Path, *overrides: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(APP), "-m", f"hydra.sweep.dir={sweep}", *overrides], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.slow
def test_a_second_driver_and_a_resume_are_refused_while_the_first_runs(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    release = tmp_path / "release"  # the first driver's jobs run until the test has tried everything below
    first = _driver(sweep, "x=0,1", f"release_file={release}", "hydra.launcher.n_workers=2")
    try:
        wait_until(lambda: (sweep / LOCK_FILE).exists() and (sweep / "sweep.json").exists(), "the first driver", 30)
        holder = json.loads((sweep / LOCK_FILE).read_text())
        assert holder["pid"] == first.pid and holder["host"] == socket.gethostname()

        second = subprocess.run([sys.executable, str(APP), "-m", f"hydra.sweep.dir={sweep}", "x=5,6"], cwd=ROOT,
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        said = " ".join(second.stderr.split())
        assert f"another one does: pid {first.pid}" in said and f"sweepit status {sweep}" in said, second.stderr
        assert "Traceback" not in second.stderr

        resumed = subprocess.run([SWEEPIT, "resume", str(sweep)], capture_output=True, text=True, timeout=60)
        assert resumed.returncode == 1 and f"pid {first.pid}" in resumed.stderr

        manifest_before = (sweep / "sweep.json").read_bytes()
        looked = subprocess.run([SWEEPIT, "status", str(sweep)], capture_output=True, text=True, timeout=60)
        assert looked.returncode == 0 and f"a driver follows this sweep (pid {first.pid}" in looked.stdout
        assert (sweep / "sweep.json").read_bytes() == manifest_before  # status only looked

        release.touch()
        _, err = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 0, err
    assert sorted(p.name.split("_")[0] for p in sweep.iterdir() if p.name[0].isdigit()) == ["0", "1"]  # no job twice
    assert not (sweep / LOCK_FILE).exists()  # released at the end
    assert [j["state"] for j in iter_manifest(sweep)[1]] == ["completed", "completed"]


@pytest.mark.slow
def test_the_lock_of_a_dead_driver_is_taken_over_with_a_message(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    dead = _dead_pid()
    (sweep / LOCK_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": dead, "since": "earlier",
                                               "argv": ["killed", "driver"]}))
    proc = subprocess.run([sys.executable, str(APP), "-m", f"hydra.sweep.dir={sweep}", "x=0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"the driver that held it (pid {dead} on {socket.gethostname()}" in proc.stdout + proc.stderr
    assert not (sweep / LOCK_FILE).exists()


def test_a_lock_from_another_host_is_live_while_refreshed_and_stale_after(tmp_path: Path) -> None:
    """Across hosts (a shared file system) the process cannot be asked: the lock's age says whether its driver
    still refreshes it."""
    path = tmp_path / LOCK_FILE
    path.write_text(json.dumps({"host": "login2.cluster", "pid": 4242, "since": "now", "argv": ["python", "x.py"]}))
    with pytest.raises(SweepLockedError, match=r"pid 4242 on login2.cluster"):
        SweepLock(tmp_path).acquire()
    old = time.time() - STALE_S - 5
    os.utime(path, (old, old))
    lock = SweepLock(tmp_path)
    lock.acquire()  # taken over
    assert json.loads(path.read_text())["pid"] == os.getpid()
    lock.release()
    assert not path.exists()


@pytest.mark.slow
def test_a_sweep_whose_clock_named_folder_is_taken_runs_in_a_folder_of_its_own(tmp_path: Path) -> None:
    """Two sweeps started in the same second share the folder a `${now:...}` pattern names (here the year, so that
    they surely do): the second runs in `<folder>-2` and says so; a folder named on the command line stays one
    sweep's (the test above)."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "clock.yaml").write_text("defaults:\n  - config\n  - _self_\n\n"
                                     "hydra:\n  sweep:\n    dir: ${oc.env:APP_SWEEP_DIR}/${now:%Y}\n")
    env = {**os.environ, "APP_SWEEP_DIR": str(tmp_path / "s"), "HYDRA_FULL_ERROR": "0"}
    named = tmp_path / "s" / time.strftime("%Y")
    release = tmp_path / "release"
    command = [sys.executable, str(APP), "--config-dir", str(conf), "--config-name", "clock", "-m"]
    first = subprocess.Popen([*command, "x=0", f"release_file={release}"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (named / LOCK_FILE).exists() and (named / "sweep.json").exists(), "the first driver", 30)
        second = subprocess.run([*command, "x=5"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        release.touch()
        _, err = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 0, err
    assert second.returncode == 0, second.stderr[-3000:]
    own = named.with_name(f"{named.name}-2")
    assert f"this sweep runs in {own}" in second.stdout + second.stderr
    assert [j["overrides"][0] for j in iter_manifest(named)[1]] == ["x=0"]
    assert [(j["overrides"], j["state"]) for j in iter_manifest(own)[1]] == [(["x=5"], "completed")]
    [job] = [p for p in own.iterdir() if p.name.startswith("0_")]
    assert (job / "result.json").exists() and json.loads((job / "times.json").read_text())["end"] is not None
