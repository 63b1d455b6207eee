"""The worker engine over a study (sweepit.search.StudySource) without Slurm or Hydra: several workers (threads here)
share one journal file and run exactly n_trials between them; a trial whose worker went silent is taken over; a
stopped worker's trial is retried. Each trial's job is forked as on a node."""

from __future__ import annotations

import copy
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from omegaconf import OmegaConf
from optuna.trial import TrialState

from sweepit.local import Job
from sweepit.results import JobOutcome, Ledger, Work
from sweepit.results._job_files import write_result
from sweepit.search import JobDefaults, Param, Search, SearchOptions, SearchSpace, StudySource, load_study_of
from sweepit.slurm import Engine, adopt_trials

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _search(sweep_dir: Path, **options: Any) -> Search:
    space = SearchSpace([Param.interval("x", "", "interval(-1, 1)", -1.0, 1.0)], fixed=[])
    random = {"_target_": "optuna.samplers.RandomSampler", "seed": 0}
    search = Search(SearchOptions(sampler=random, **options), space, sweep_dir, JobDefaults())
    search.open()
    return search


def _compose(sweep_dir: Path) -> Callable[[Job, Work], None]:
    def compose(job: Job, work: Work) -> None:
        job.config = OmegaConf.create({"x": work.overrides[0]})
        job.job_dir = sweep_dir / f"{work.num}_{work.overrides[0]}"
        job.job_dir.mkdir()

    return compose


def _run(job: Job) -> JobOutcome:
    time.sleep(0.01)
    x = float(job.job_dir.name.split("=", 1)[1])
    write_result(job.job_dir, {"status": "completed", "objective": (x - 0.3) ** 2})
    return JobOutcome("completed", has_returned=True)


def _worker_pid() -> int:
    """The worker's pid, as a job sees it: the parent of the fork server that forked the job."""
    return int(Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _worker(search: Search, index: int, run: Callable[[Job], JobOutcome] = _run, **kwargs: Any) -> Engine:
    source = StudySource(copy.copy(search), index, job_base=0, **kwargs)
    engine = Engine(source, f"w{index}", search.sweep_dir, _compose(search.sweep_dir), run, recorded_by="test",
                    wait_s=0.05)
    # Its fork server forked here, before the tests' threads run the engines: a fork from a process with other
    # threads running may copy a lock one of them holds (a Slurm worker is one thread when it forks its server).
    engine.pool.server.start()
    return engine


def test_workers_run_exactly_n_trials_between_them(tmp_path: Path) -> None:
    search = _search(tmp_path, n_trials=12)
    workers = [_worker(search, i) for i in range(3)]
    threads = [threading.Thread(target=w.run) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    trials = load_study_of(tmp_path).trials
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == 12 and sum(w.n_run for w in workers) == 12
    assert all(t.user_attrs.get("sweepit_status") == "surplus" for t in trials if t.state != TrialState.COMPLETE)
    nums = sorted(t.user_attrs["job_num"] for t in done)
    assert nums == sorted({int(p.name.split("_")[0]) for p in tmp_path.iterdir() if p.name[0].isdigit()})
    assert len(set(nums)) == 12
    assert len({t.params["x"] for t in done}) == 12  # each worker its own seed: no point drawn twice


def test_a_silent_workers_trial_is_recovered_by_another(tmp_path: Path) -> None:
    """A trial left RUNNING by a worker whose heartbeat is stale: interrupted and retried (no result), or recorded
    from its result (a worker that died after the job wrote it)."""
    search = _search(tmp_path, n_trials=3)
    study = load_study_of(tmp_path)
    lost = study.ask({"x": optuna.distributions.FloatDistribution(-1, 1)})
    lost.set_user_attr("job_num", 100)
    lost.set_user_attr("worker", "gone")
    finished = study.ask({"x": optuna.distributions.FloatDistribution(-1, 1)})
    finished.set_user_attr("job_num", 101)
    finished.set_user_attr("worker", "gone")
    write_result(tmp_path / "101_x=0.5", {"status": "completed", "objective": 0.04})
    worker = _worker(search, 0, stale_s=0.0)
    worker.run()
    trials = {t.number: t for t in load_study_of(tmp_path).trials}
    assert trials[lost.number].user_attrs["sweepit_status"] == "interrupted"
    assert trials[finished.number].state == TrialState.COMPLETE and trials[finished.number].value == 0.04
    retry = next(t for t in trials.values() if t.user_attrs.get("retry_of") == lost.number)
    assert retry.state == TrialState.COMPLETE and retry.params == trials[lost.number].params
    assert sum(t.state == TrialState.COMPLETE for t in trials.values()) == 3


def test_a_killed_workers_trial_is_found_by_its_claim_wherever_its_job_ran(tmp_path: Path) -> None:
    """A worker killed (SIGKILL) after its trial's job wrote its result, in a directory not named by the job's number
    (the user's hydra.sweep.subdir): the driver adopts the job from its claim, and another worker records the trial
    from that result instead of running its parameters again."""
    search = _search(tmp_path, n_trials=1)

    def compose(job: Job, work: Work) -> None:
        job.config = OmegaConf.create({"x": work.overrides[0]})
        job.job_dir = tmp_path / f"trial-{work.num}"
        job.job_dir.mkdir()

    def killed(job: Job) -> JobOutcome:
        write_result(job.job_dir, {"status": "completed", "objective": 0.25})
        os.kill(_worker_pid(), signal.SIGKILL)  # the worker dies before it tells the study
        return JobOutcome("completed", has_returned=True)

    engine = Engine(StudySource(copy.copy(search), 0, job_base=0), "w0", tmp_path, compose, killed, recorded_by="test")
    worker = multiprocessing.get_context("fork").Process(target=engine.run)
    worker.start()
    worker.join(timeout=60)
    assert worker.exitcode == -signal.SIGKILL
    m = Ledger(sweep_dir=str(tmp_path), argv=[], cwd=str(tmp_path), launcher="slurm", workers={"ids": ["w0"]})
    assert adopt_trials(m) == [0] and m.jobs[0].job_dir == str(tmp_path / "trial-0")
    assert _worker(search, 1, stale_s=0.0).run() == 0
    trials = load_study_of(tmp_path).trials
    assert len(trials) == 1 and trials[0].state == TrialState.COMPLETE and trials[0].value == 0.25


def test_a_stopped_worker_interrupts_its_trial(tmp_path: Path) -> None:
    search = _search(tmp_path, n_trials=4)

    def stopped(job: Job) -> JobOutcome:
        os.kill(_worker_pid(), signal.SIGTERM)  # scancel reaches the worker, which stops its trial's job
        time.sleep(60)
        return JobOutcome("completed", has_returned=True)

    assert _worker(search, 0, run=stopped).run() == 1
    trials = load_study_of(tmp_path).trials
    assert trials[0].user_attrs["sweepit_status"] == "interrupted" and trials[1].state == TrialState.WAITING


def test_worker_mode_needs_the_slurm_launcher(tmp_path: Path) -> None:
    app = Path(__file__).parent / "app" / "plain_app.py"
    proc = subprocess.run([sys.executable, str(app), "-m", f"hydra.sweep.dir={tmp_path}", "hydra/sweeper=optuna",
                           "hydra/launcher=local", "hydra.sweeper.workers=2", "x=interval(0, 1)"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "hydra.sweeper.workers runs the study in long-lived Slurm jobs, so it needs hydra/launcher=slurm" in \
        proc.stderr.replace("\n", " "), proc.stderr
