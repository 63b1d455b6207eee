"""Real multiruns through `hydra/launcher=local`, each in a subprocess: the cap, isolation, Ctrl-C, resume."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sweepit.results._job_files import read_result
from sweepit.results._manifest import read_manifest, rerun_argv
from sweepit_testing import processes_mentioning, run_command, wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
APP = Path(__file__).parent / "app" / "launcher_test_app.py"


def run_app(sweep_dir: Path, *overrides: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return run_command([sys.executable, APP, "-m", f"hydra.sweep.dir={sweep_dir}", *overrides], ROOT,
                       timeout_s=timeout_s)


def job_dirs(sweep_dir: Path) -> dict[int, Path]:
    return {int(p.name.split("_")[0]): p for p in sweep_dir.iterdir() if p.is_dir() and p.name[0].isdigit()}


def times(job_dir: Path) -> dict[str, Any]:
    return dict(json.loads((job_dir / "times.json").read_text()))


def status(job_dir: Path) -> str | None:
    result = read_result(job_dir)
    return None if result is None else str(result["status"])


def test_eight_jobs_two_workers_never_more_than_two_at_once(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_app(sweep, "x=range(8)", "sleep_s=0.4", "hydra.launcher.n_workers=2")
    assert proc.returncode == 0, proc.stderr
    dirs = job_dirs(sweep)
    assert sorted(dirs) == list(range(8))
    spans = [(times(d)["start"], times(d)["end"]) for d in dirs.values()]
    most = max(sum(s <= t < e for s, e in spans) for t, _ in spans)
    assert most == 2  # the cap holds, and it is used
    assert len({times(d)["pid"] for d in dirs.values()}) == 8  # one process per job
    for num, d in dirs.items():
        assert (d / "stdout.log").read_text() == f"job x={num} starting\n"
        assert (d / "stderr.log").exists()
        assert read_result(d) == {**(read_result(d) or {}), "status": "completed", "written_by": "app"}
    assert "8 jobs: 8 completed" in proc.stdout and f"sweep directory: {sweep}" in proc.stdout
    assert proc.stderr.count(" completed in ") == 8  # one progress line per job when stderr is no terminal
    manifest = read_manifest(sweep)
    assert [j.state for j in manifest.jobs.values()] == ["completed"] * 8
    assert manifest.argv[1] == str(APP)


def test_a_job_with_two_ranks_takes_two_cpu_workers(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_app(sweep, "x=range(3)", "trainer.gpus=2", "sleep_s=0.3", "hydra.launcher.n_workers=2")
    assert proc.returncode == 0, proc.stderr
    spans = sorted((times(d)["start"], times(d)["end"]) for d in job_dirs(sweep).values())
    assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(spans))


def test_the_jobs_own_threads_are_the_launchers(tmp_path: Path) -> None:
    """The CPU scaling study set trainer.threads=1 for every job, but the launch line said "2 torch thread(s) each"
    (the launcher's own share of the cores) and the jobs' OMP_NUM_THREADS said 2."""
    proc = run_app(tmp_path / "sweep", "x=0,1", "+trainer.threads=3", "hydra.launcher.n_workers=1")
    assert proc.returncode == 0, proc.stderr
    assert "Launching 2 jobs on 1 local worker(s), 3 torch thread(s) each" in proc.stdout, proc.stdout
    assert [times(d)["threads"] for d in job_dirs(tmp_path / "sweep").values()] == ["3", "3"]


def test_one_worker_echoes_job_output_live(tmp_path: Path) -> None:
    proc = run_app(tmp_path / "sweep", "x=0,1", "hydra.launcher.n_workers=1")
    assert proc.returncode == 0, proc.stderr
    assert "job x=0 starting\njob x=1 starting\n" in proc.stdout


def test_crashes_are_recorded_per_job_and_resume_reruns_only_them(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    crashes = ("segfault_on=[1]", "raise_on=[2]", "exit_on=[3]")
    proc = run_app(sweep, "x=range(5)", *crashes)
    assert proc.returncode == 1
    dirs = job_dirs(sweep)
    assert [status(dirs[n]) for n in range(5)] == ["completed", "failed", "failed", "failed", "completed"]
    segv = read_result(dirs[1]) or {}
    assert segv["exit_signal"] == "SIGSEGV" and segv["error"] == "died from signal SIGSEGV"
    assert "job x=1 about to segfault" in segv["stderr_tail"]
    assert "Fatal Python error: Segmentation fault" in segv["stderr_tail"]  # faulthandler in the job
    raised = read_result(dirs[2]) or {}
    assert raised["error"] == "ValueError: job x=2 raises on purpose" and "Traceback" in raised["stderr_tail"]
    assert (read_result(dirs[3]) or {})["exit_code"] == 3
    assert "5 jobs: 2 completed, 3 failed" in proc.stdout  # the summary table ran
    assert "3 of 5 jobs failed or were interrupted" in proc.stderr
    assert f"logs: {dirs[1] / 'stderr.log'}" in proc.stderr
    assert f"sweepit resume {sweep}" in proc.stderr and "hydra.launcher.resume=true" in proc.stderr
    assert "Traceback" not in proc.stderr.split("3 of 5 jobs")[1]  # Hydra prints the message alone

    before = {n: times(dirs[n])["start"] for n in (0, 4)}
    resume = rerun_argv(read_manifest(sweep).argv, sweep)  # as `sweepit resume` builds it
    assert resume[-2:] == [f"hydra.sweep.dir={sweep}", "hydra.launcher.resume=true"]
    proc = run_app(sweep, "x=range(5)", "hydra.launcher.resume=true")  # crashes fixed
    assert proc.returncode == 0, proc.stderr
    assert [status(dirs[n]) for n in range(5)] == ["completed"] * 5
    assert {n: times(dirs[n])["start"] for n in (0, 4)} == before  # not run again
    assert "2 skipped (finished before)" in proc.stderr
    assert sorted(job_dirs(sweep)) == list(range(5))  # same directories


def test_fail_on_error_false_exits_zero_with_the_failure_in_the_table(tmp_path: Path) -> None:
    proc = run_app(tmp_path / "sweep", "x=0,1", "raise_on=[1]", "hydra.launcher.fail_on_error=false")
    assert proc.returncode == 0, proc.stderr
    assert "2 jobs: 1 completed, 1 failed" in proc.stdout


def test_a_job_whose_folder_is_gone_at_the_end_fails_the_sweep_and_a_resume_runs_it_again(tmp_path: Path) -> None:
    """Job 1 deletes job 0's folder after job 0 completed. Before: the end-of-sweep table counted job 0 completed
    (sweep.json's word) though its result was nowhere, and the sweep exited 0."""
    sweep = tmp_path / "sweep"
    proc = run_app(sweep, "x=0,1", "remove_others_on=[1]", "hydra.launcher.n_workers=1")
    assert proc.returncode == 1, proc.stderr
    assert "2 jobs: 2 completed" in proc.stdout and "no result.json" in proc.stdout  # the table says what it found
    assert "1 of 2 jobs ended without their result.json in the folder recorded for them (2 completed):" in proc.stderr
    gone = Path(read_manifest(sweep).jobs[0].job_dir) / "result.json"
    assert f"job 0 [x=0 remove_others_on=[1]]: completed, but {gone} is gone" in proc.stderr, proc.stderr
    assert f"sweepit resume {sweep}" in proc.stderr
    proc = run_app(sweep, "x=0,1", "hydra.launcher.n_workers=1", "hydra.launcher.resume=true")
    assert proc.returncode == 0 and gone.is_file(), proc.stderr
    assert "1 skipped (finished before)" in proc.stderr


def test_each_job_owns_its_gpus_and_an_impossible_request_fails_alone(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "3,5"}  # no CUDA is touched: the app does not import torch
    proc = subprocess.run([sys.executable, str(APP), "-m", f"hydra.sweep.dir={sweep}", "x=0,1,2,3,4",
                           "trainer.gpus=1", "sleep_s=0.3", "hydra.launcher.n_workers=0"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "on 2 local worker(s)" in proc.stdout  # one per GPU
    spans = [times(d) for d in job_dirs(sweep).values()]
    for a in spans:
        assert a["gpus"] in ("3", "5")
        overlapping = [b for b in spans if b is not a and b["start"] < a["end"] and a["start"] < b["end"]]
        assert all(b["gpus"] != a["gpus"] for b in overlapping)

    sweep = tmp_path / "sweep2"
    proc = subprocess.run([sys.executable, str(APP), "-m", f"hydra.sweep.dir={sweep}", "x=0", "trainer.gpus=2,3",
                           "hydra.launcher.fail_on_error=false"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr
    dirs = job_dirs(sweep)
    assert times(dirs[0])["gpus"] == "3,5"
    refused = read_result(dirs[1]) or {}
    assert refused["status"] == "failed" and refused["error"].startswith(
        "trainer.gpus must be at most the 2 GPU(s) this machine offers to the local launcher, but job 1 sets "
        "trainer.gpus=3.")


def _descendants_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def test_ctrl_c_stops_every_job_and_keeps_finished_results(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    # Job 0 finishes; job 1 starts a grandchild; job 2 ignores SIGTERM (needs the SIGKILL after 1 s).
    driver = subprocess.Popen(
        [sys.executable, str(APP), "-m", f"hydra.sweep.dir={sweep}", "x=range(6)", "spawn_on=[1]",
         "ignore_term_on=[2]", "hang_on=[3,4,5]"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        def jobs_1_and_2_run() -> bool:
            dirs = job_dirs(sweep) if sweep.exists() else {}
            return (0 in dirs and status(dirs[0]) == "completed"
                    and all(n in dirs and (dirs[n] / "times.json").exists() for n in (1, 2)))

        wait_until(jobs_1_and_2_run, "job 0 completed and jobs 1, 2 started", 30, interval_s=0.1)
        dirs = job_dirs(sweep)
        pids = [times(dirs[1])["pid"], times(dirs[1])["grandchild_pid"], times(dirs[2])["pid"]]
        assert _descendants_alive(pids) == pids
        driver.send_signal(signal.SIGINT)
        out, err = driver.communicate(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 1
    assert _descendants_alive(pids) == []
    assert processes_mentioning(str(sweep)) == []
    assert [status(dirs[n]) for n in range(3)] == ["completed", "interrupted", "interrupted"]
    assert sorted(job_dirs(sweep)) == [0, 1, 2]  # the queued jobs never started
    assert "sweep stopped by SIGINT: 1 completed, 2 interrupted, 3 not started" in err
    assert "6 jobs: 1 completed, 2 interrupted, 3 not started" in out  # the table counts what the stop message does
    assert [j.state for j in read_manifest(sweep).jobs.values()] == [
        "completed", "interrupted", "interrupted", "not started", "not started", "not started"]


def test_real_training_sweep_runs_through_the_local_launcher(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = subprocess.run(
        [sys.executable, "train.py", "-m", "task=linreg", "epochs=2", "lr=0.01,0.1", f"hydra.sweep.dir={sweep}"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "HYDRA_FULL_ERROR": "1"})
    assert proc.returncode == 0, proc.stderr
    dirs = job_dirs(sweep)
    assert [status(dirs[n]) for n in (0, 1)] == ["completed", "completed"]
    assert "Epoch 2/2" in (dirs[0] / "stdout.log").read_text()
    assert (sweep / "sweep.json").exists()  # written by sweepit's launcher, the -m default
    assert "2 jobs: 2 completed" in proc.stdout and "best (minimize val_loss): job 1" in proc.stdout


def test_a_value_the_config_check_refuses_is_refused_before_any_job_starts(tmp_path: Path) -> None:
    """`lr=abc` failed inside each job, and the resume the sweep printed would have run them to fail again: the
    driver runs the jobs' config check once per new value, before it launches any."""
    proc = run_command([sys.executable, ROOT / "train.py", "-m", "task=linreg", "epochs=1", "lr=0.1,abc"], tmp_path)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert proc.stderr.splitlines() == [
        "lr must be a number, but got lr='abc'. Set it like `lr=0.01`.",
        "No job was started: job 1 (task=linreg epochs=1 lr=abc) and every job with its value would fail this check "
        "as it started. Fix the value and run the sweep again."], proc.stderr
    assert not list(tmp_path.rglob("multirun.yaml"))  # no folder of a sweep of 0 jobs is left


def test_a_job_killed_mid_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    """The out-of-memory killer can stop a job inside an atomic write: the driver, which knows the job is gone,
    removes its unfinished temporary file; the job's old files (here: none) stay as they were."""
    sweep = tmp_path / "sweep"
    proc = run_app(sweep, "x=0,1", "killed_mid_write_on=[1]")
    assert proc.returncode == 1
    dirs = job_dirs(sweep)
    assert (read_result(dirs[1]) or {})["exit_signal"] == "SIGKILL"
    assert list(sweep.rglob(".*.tmp")) == [] and not (dirs[1] / "checkpoint.pt").exists()
    assert status(dirs[0]) == "completed"
