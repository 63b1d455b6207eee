"""A running job's progress from its files (epoch/epochs, metric, ETA), and the progress line's ETA before the
first job ends, seen on a real terminal (a pseudo-terminal) during a real sweep."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweepit.results import LiveReader, sweep_eta_s
from sweepit_testing import REPO, Hold, wait_until


def start_job(job_dir: Path, epochs: int | None, metric: str = "val_acc") -> None:
    (job_dir / ".hydra").mkdir(parents=True)
    body = (f"epochs: {epochs}\n" if epochs else "") + f"metric: {metric}\n"
    (job_dir / ".hydra" / "config.yaml").write_text(body)


def append(job_dir: Path, *rows: dict[str, float], partial: str = "") -> None:
    with (job_dir / "metrics.jsonl").open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows) + partial)


def test_progress_of_a_running_job_is_read_incrementally(tmp_path: Path) -> None:
    job = tmp_path / "0_lr=0.1"
    start_job(job, epochs=10)
    reader = LiveReader()
    assert reader.look(job) is None  # nothing written yet
    append(job, {"epoch": 1, "val_acc": 0.5, "epoch_time_s": 9.0}, {"epoch": 2, "val_acc": 0.6, "epoch_time_s": 2.0},
           partial='{"epoch": 3, "val_a')  # a line being written is left for the next look
    first = reader.look(job)
    assert first is not None
    assert (first.epoch, first.epochs, first.value, first.epoch_time_s) == (2, 10, 0.6, 2.0)  # warm-up left out
    assert first.eta_s == pytest.approx(16.0)
    assert first.text() == "2/10 val_acc=0.6 ETA 0:16"
    with (job / "metrics.jsonl").open("a") as f:
        f.write('cc": 0.7, "epoch_time_s": 4.0}\n')
    second = reader.look(job)
    assert second is not None and (second.epoch, second.value, second.epoch_time_s) == (3, 0.7, 3.0)
    assert second.eta_s == pytest.approx(21.0)
    # A resumed job rewrites its file (a new one, atomically): read again from its start.
    tmp = job / "metrics.jsonl.tmp"
    tmp.write_text(json.dumps({"epoch": 1, "val_acc": 0.55, "epoch_time_s": 1.0}) + "\n")
    os.replace(tmp, job / "metrics.jsonl")
    third = reader.look(job)
    assert third is not None and (third.epoch, third.value) == (1, 0.55)


def test_a_loop_that_reports_no_epoch_time_is_timed_by_its_file(tmp_path: Path) -> None:
    job = tmp_path / "0_x=1"
    start_job(job, epochs=4, metric="loss")
    started = time.time() - 30
    os.utime(job / ".hydra" / "config.yaml", (started, started))
    append(job, {"epoch": 1, "loss": 2.0}, {"epoch": 2, "loss": 1.0})
    progress = LiveReader().look(job)
    assert progress is not None and progress.epoch_time_s == pytest.approx(15.0, abs=1.0)
    assert progress.eta_s == pytest.approx(30.0, abs=2.0)
    unknown = tmp_path / "1_x=2"
    start_job(unknown, epochs=None)
    append(unknown, {"epoch": 1, "val_acc": 0.3})
    seen = LiveReader().look(unknown)
    assert seen is not None and seen.eta_s is None and seen.text().startswith("epoch 1 val_acc=0.3")


def test_sweep_eta_adds_the_queued_jobs_in_waves(tmp_path: Path) -> None:
    jobs = []
    for i, done in enumerate((2, 6)):
        job = tmp_path / f"{i}_j"
        start_job(job, epochs=10)
        append(job, *({"epoch": e, "val_acc": 0.1, "epoch_time_s": 1.0} for e in range(1, done + 1)))
        jobs.append(LiveReader().look(job))
    # 8 s left for the slower job, then 3 queued jobs on 2 slots: 2 waves of a 10 s job.
    assert sweep_eta_s(jobs, n_queued=3, n_slots=2) == pytest.approx(28.0)
    assert sweep_eta_s([None], n_queued=3, n_slots=2) is None


@pytest.mark.slow
def test_the_progress_line_has_an_eta_before_the_first_job_ends(tmp_path: Path) -> None:
    """Two jobs of a few seconds, one worker: while job 0 trains, the line on the terminal gives an ETA."""
    leader, follower = pty.openpty()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, str(REPO / "train.py"), "-m", "task=digits", "epochs=400",
                             "trainer.threads=1", "lr=0.01,0.02", "hydra.launcher.n_workers=1",
                             f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                            cwd=tmp_path, env=env, stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    out = b""
    try:
        while not re.search(rb"0/2 done[^\r\n]*?ETA [0-9]", out):  # an estimate while job 0 still trains
            ready, _, _ = select.select([leader], [], [], 120)
            if not ready:
                break
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the sweep ended and closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        proc.send_signal(signal.SIGINT)  # seen: the rest of the sweep is not needed (Ctrl-C ends it cleanly)
        proc.wait(timeout=120)
        os.close(leader)
    text = out.decode(errors="replace")
    early = re.findall(r"0/2 done[^\r\n]*?ETA (\S+)", text)
    assert early, text[-3000:]
    assert any(eta != "?" for eta in early), early  # the line drawn before job 0 ended had an estimate
    assert "1/2 done" not in text  # it came before the first job ended


@pytest.mark.slow
def test_status_shows_each_running_jobs_epoch_and_eta_and_watch_follows_to_the_end(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    hold = Hold(tmp_path / "hold")  # two jobs held mid-training and one queued for the first look, then released
    epochs = 4
    driver = subprocess.Popen([sys.executable, str(REPO / "train.py"), "-m", "task=digits", f"epochs={epochs}",
                               "model._target_=held_jobs.mlp", "trainer.threads=1", "lr=0.01,0.02,0.03",
                               "hydra.launcher.n_workers=2", "hydra.callbacks.summary.report=false",
                               f"hydra.sweep.dir={sweep}"],
                              cwd=tmp_path, env=hold.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    try:
        wait_until(lambda: hold.held(0) and hold.held(1), "jobs 0 and 1 held mid-training", 120)
        text = subprocess.run([sys.executable, "-m", "sweepit.cli", "status", str(sweep)],
                              capture_output=True, text=True, timeout=60).stdout
        assert re.search(rf"running .* \d+/{epochs} val_acc=\S+ ETA \d+:\d\d", text), text
        assert re.search(r"^ETA \d+:\d\d at the running jobs' pace \(2 running, 1 queued\)", text, re.M), text
        assert "a driver follows this sweep" in text  # a look while the driver runs writes nothing
        # Not a terminal: plain looks.
        watch = subprocess.Popen([sys.executable, "-m", "sweepit.cli", "status", str(sweep), "--watch", "0.5"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert watch.stdout is not None
        first = watch.stdout.readline()  # its first look, the jobs still held
        hold.release()
        rest, watch_err = watch.communicate(timeout=180)
    finally:
        hold.release()
        _, driver_err = driver.communicate(timeout=180)
    assert driver.returncode == 0, driver_err[-2000:]
    assert watch.returncode == 0, watch_err
    said = first + rest
    looks = re.findall(r"^\[\d\d:\d\d:\d\d\]$", said, re.M)
    assert len(looks) >= 2, said[-2000:]  # it looked more than once, and stopped when the sweep ended
    last = said.rsplit("]\n", 1)[-1]
    assert "3 jobs: 3 completed" in last and "a driver follows" not in last, last  # the last look: ended
    bad = subprocess.run([sys.executable, "-m", "sweepit.cli", "status", str(sweep), "--watch", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--watch takes the seconds between looks, a number > 0" in bad.stderr
