"""A packed sweep's worker on its own, without Slurm: the worker engine over a plan's claims, the wall-time rule,
records, jobs given back (`sweepit.slurm._pack_worker`, `sweepit.slurm._engine`). The jobs are forked as on a node;
the clock is the test's."""

from __future__ import annotations

import copy
import functools
import json
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import pytest
import submitit
import torch
from hydra import initialize_config_dir
from hydra._internal.callbacks import Callbacks
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import setup_globals
from hydra.types import HydraContext, RunMode
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.sweepit._compose import ComposedConfigs
from hydra_plugins.sweepit._launcher import numbered
from hydra_plugins.sweepit._worker_tasks import WorkerTask
from sweepit.local import FRESH_FOR_CUDA, Job
from sweepit.results import JobOutcome, SweepPaths, Work
from sweepit.slurm._pack import worker_request
from sweepit.slurm._pack_worker import (
    PackedWorker,
    PackSpec,
    PlannedEntry,
    release,
    scan_claims,
    write_plan,
)
from sweepit.slurm._request import Request
from sweepit.train import FORKED_AFTER_CUDA
from sweepit.train._devices import make_deterministic

pytestmark = pytest.mark.no_cluster


def plan(sweep: Path, n: int, shape: int = 0) -> list[PlannedEntry]:
    entries = [PlannedEntry(num, [f"x={num}"], str(sweep / f"{num}_x={num}"), shape, {}) for num in range(n)]
    write_plan(sweep, 1, entries, ["1 GPU(s), 5 min"])
    return entries


def compose(job: Job, entry: Work) -> None:
    job.config = OmegaConf.create({"x": entry.num})
    job.job_dir = Path(entry.job_dir)
    job.job_dir.mkdir(parents=True, exist_ok=True)


def body(job: Job) -> JobOutcome:
    if job.num == 1:
        raise ValueError("job 1 fails on purpose")
    return JobOutcome("completed", float(job.num), has_returned=True)


class Clock:
    """The worker's clock, 400 s later at every look after the first (when it reads its allocation's end)."""

    def __init__(self) -> None:
        self.looks = 0

    def __call__(self) -> float:
        self.looks += 1
        return 1_000_000.0 + 400.0 * (self.looks - 1)


def spec(sweep: Path, timeout_min: int, job_timeout_min: int = 5, slots: int = 1, gpus: int = 0) -> PackSpec:
    return PackSpec(str(sweep), 1, 0, slots, 1, timeout_min, job_timeout_min, term_grace_s=2.0, gpus=gpus)


def test_a_worker_runs_every_job_of_its_request_once_and_records_each(tmp_path: Path) -> None:
    plan(tmp_path, 4)
    worker = PackedWorker(spec(tmp_path, 60), "local-1", compose, body)
    assert worker.run() == 4
    results = {n: json.loads((tmp_path / f"{n}_x={n}" / "result.json").read_text()) for n in range(4)}
    assert [results[n]["status"] for n in range(4)] == ["completed", "failed", "completed", "completed"]
    assert "job 1 fails on purpose" in results[1]["error"] and results[3]["objective"] == 3.0
    assert results[0]["recorded_by"] == "sweepit packed worker"
    claimed, present = scan_claims(tmp_path, 1, {}, set())
    assert present == {0, 1, 2, 3} and {w for w, _, _ in claimed.values()} == {"local-1"}
    # a second worker of the same plan finds nothing left
    assert PackedWorker(spec(tmp_path, 60), "local-2", compose, body).run() == 0


@pytest.mark.parametrize("kills", ["once", "every time"])
def test_a_fork_server_killed_under_a_job_has_the_job_run_again_once_by_a_new_one(tmp_path: Path, kills: str) -> None:
    """Each job is forked by the worker's fork server; killed (SIGKILL), it takes its running job with it, and a new
    server runs that job again, once: nothing is run or recorded twice. A job whose server dies again is recorded
    `interrupted` after its one retry, and the worker goes on."""
    plan(tmp_path, 3)

    def kills_its_server(job: Job) -> JobOutcome:
        with open(job.job_dir / "attempts", "a") as f:
            f.write(f"{os.getpid()}\n")
        if job.num == 1 and (kills == "every time" or len((job.job_dir / "attempts").read_text().split()) == 1):
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(30)  # until the server's death reaches this job (SIGTERM)
        return JobOutcome("completed", float(job.num), has_returned=True)

    worker = multiprocessing.get_context("fork").Process(
        target=PackedWorker(spec(tmp_path, 60), "local-1", compose, kills_its_server).run)
    worker.start()
    worker.join(timeout=60)
    assert worker.exitcode == 0
    dirs = [tmp_path / f"{n}_x={n}" for n in range(3)]
    assert [len((d / "attempts").read_text().split()) for d in dirs] == [1, 2, 1]
    results = [json.loads((d / "result.json").read_text()) for d in dirs]
    if kills == "once":
        assert [r["status"] for r in results] == ["completed"] * 3
        assert [sorted(p.name for p in d.glob("result*.json")) for d in dirs] == [["result.json"]] * 3
    else:
        assert [r["status"] for r in results] == ["completed", "interrupted", "completed"], results
        assert results[1]["error"] == "KeyboardInterrupt: stopped by SIGTERM", results[1]


def test_a_job_whose_config_does_not_compose_fails_alone_and_the_worker_goes_on(tmp_path: Path) -> None:
    """The driver's validation composes a sample of the jobs: a value that only this job refuses is found by the worker
    that composes it, recorded as the job's failure with the error and its cause, and the worker runs the rest."""
    plan(tmp_path, 3)

    def refusing(job: Job, entry: Work) -> None:
        if entry.num == 1:
            try:
                raise ValueError("Invalid value '7', expected one of [fast, slow]")
            except ValueError as e:
                raise RuntimeError("Error merging override mode=7") from e
        compose(job, entry)

    assert PackedWorker(spec(tmp_path, 60), "local-1", refusing, body).run() == 2
    results = {n: json.loads((tmp_path / f"{n}_x={n}" / "result.json").read_text()) for n in range(3)}
    assert [results[n]["status"] for n in range(3)] == ["completed", "failed", "completed"]
    assert results[1]["error"] == ("its config does not compose: RuntimeError: Error merging override mode=7: Invalid "
                                   "value '7', expected one of [fast, slow]")
    assert results[1]["recorded_by"] == "sweepit packed worker"


def test_a_job_whose_expected_time_does_not_fit_is_left_unclaimed(tmp_path: Path) -> None:
    """Worker time 10 min, jobs expected at their 5 min limit: the first job always starts; 400 s later the next
    would need 600 s (its own 300 after the 300 of the one before it); 800 s in, not even the measured mean fits."""
    plan(tmp_path, 3)
    clock = Clock()
    worker = PackedWorker(spec(tmp_path, 10), "local-1", compose, body, clock=clock)
    assert worker.run() == 1
    _, present = scan_claims(tmp_path, 1, {}, set())
    assert present == {0}, "jobs 1 and 2 are left for a fresh worker"
    assert not (tmp_path / "1_x=1" / "result.json").exists()


def test_a_job_given_back_is_claimed_again_and_its_claim_is_new(tmp_path: Path) -> None:
    plan(tmp_path, 2)
    assert PackedWorker(spec(tmp_path, 60), "local-1", compose, body).run() == 2
    markers: set[str] = set()
    before, _ = scan_claims(tmp_path, 1, {}, markers)
    known = {num: text for num, (_, _, text) in before.items()}
    release(tmp_path, 1, 0)
    assert scan_claims(tmp_path, 1, known, set())[1] == {1}, "job 0 is unclaimed"
    assert PackedWorker(spec(tmp_path, 60), "local-2", compose, body).run() == 1
    again, present = scan_claims(tmp_path, 1, known, markers)
    assert present == {0, 1} and list(again) == [0] and again[0][0] == "local-2", "a new claim, by the new worker"


def test_a_requeued_worker_gives_back_the_jobs_it_did_not_finish(tmp_path: Path) -> None:
    entries = plan(tmp_path, 2)
    claims = SweepPaths(tmp_path).claims(1)
    claims.mkdir(parents=True)
    (claims / "0").write_text("local-1 2026-11-24T00:00:00")  # its earlier life claimed job 0, then was requeued
    (claims / "local-1.claimed").write_text("0\n")
    Path(entries[0].job_dir).mkdir()
    (Path(entries[0].job_dir) / "result.json").write_text(json.dumps({"status": "interrupted"}))
    assert PackedWorker(spec(tmp_path, 60), "local-1", compose, body).run() == 2
    assert json.loads((Path(entries[0].job_dir) / "result.json").read_text())["status"] == "completed"


@pytest.mark.parametrize(("request_", "slots", "worker"), [
    (Request(1, 2, 5, gpus_per_node=2, gpus_per_task=1), 1, Request(1, 1, 30, gpus_per_node=2)),
    (Request(1, 1, 5), 1, Request(1, 1, 30)),
    (Request(1, 1, 5, gres="gpu:a100:4"), 1, Request(1, 1, 30, gres="gpu:a100:4")),
    (Request(1, 4, 5, gpus_per_task=1), 1, Request(1, 1, 30, gpus_per_node=4)),
    # slots jobs at once, each on GPUs of its own: it asked for one job's GPUs, which the jobs then shared
    (Request(1, 2, 5, gpus_per_node=2), 2, Request(1, 1, 30, gpus_per_node=4)),
    (Request(1, 1, 5, gres="gpu:a100:1,nvme:1"), 3, Request(1, 1, 30, gres="gpu:a100:3,nvme:1")),
    (Request(1, 1, 5, gres="gpu"), 2, Request(1, 1, 30, gres="gpu:2")),
    (Request(1, 1, 5), 4, Request(1, 1, 30)),
])
def test_a_worker_is_one_task_holding_the_gpus_of_its_slots_jobs(request_: Request, slots: int,
                                                                  worker: Request) -> None:
    assert worker_request(request_, 30, slots) == worker


def test_jobs_side_by_side_in_a_worker_each_get_gpus_of_their_own(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """slots=2 of 1-GPU jobs in a worker Slurm gave 2 GPUs: each job sees its own. Before, the worker handed out
    none, and every job's rank r used the worker's GPU r: both jobs on GPU 0. Each counts its one GPU although the
    worker counted two first and torch 2.2-2.3 keep that count (an lru_cache, pytorch#128819), as the app does in
    tests/local/test_fork_and_cuda.py."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")  # as Slurm sets it for the worker's allocation
    monkeypatch.setattr(torch.cuda, "device_count", functools.lru_cache(maxsize=1)(
        lambda: len(os.environ["CUDA_VISIBLE_DEVICES"].split(","))))
    assert torch.cuda.device_count() == 2  # counted in the worker, before its fork server
    plan(tmp_path, 4)

    def sees(job: Job) -> JobOutcome:
        (job.job_dir / "gpus").write_text(os.environ["CUDA_VISIBLE_DEVICES"])
        (job.job_dir / "count").write_text(str(torch.cuda.device_count()))
        partner = job.job_dir.parent / f"{job.num ^ 1}_x={job.num ^ 1}" / "gpus"  # 0 with 1, 2 with 3
        deadline = time.monotonic() + 30
        while not partner.exists() and time.monotonic() < deadline:  # both at once: an event, not a time
            time.sleep(0.01)
        return JobOutcome("completed", float(partner.exists()), has_returned=True)

    assert PackedWorker(spec(tmp_path, 60, slots=2, gpus=1), "local-1", compose, sees).run() == 4
    seen = {n: (tmp_path / f"{n}_x={n}" / "gpus").read_text() for n in range(4)}
    assert all(json.loads((tmp_path / f"{n}_x={n}" / "result.json").read_text())["objective"] == 1.0
               for n in range(4)), "each pair ran side by side"
    assert {seen[0], seen[1]} == {seen[2], seen[3]} == {"4", "6"}, seen
    assert [(tmp_path / f"{n}_x={n}" / "count").read_text() for n in range(4)] == ["1"] * 4
    task = json.loads((tmp_path / "0_x=0" / ".slurm" / "task-0.json").read_text())
    assert task["cuda_visible_devices"] == seen[0], "the job's task record names the GPU it was given"


@pytest.mark.parametrize("gpus", [1, 0], ids=["packed-jobs-given-gpus", "jobs-seeing-the-workers-gpus"])
def test_cuda_initialised_in_a_worker_is_said_once_and_every_gpu_job_records_why_it_did_not_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, gpus: int) -> None:
    """Where no fresh interpreter can be started (the engine's own fork server, which cannot pickle a job), the jobs
    of a worker whose CUDA was initialised, each given a GPU or seeing the worker's, are forked: each is recorded as
    failed with the cause and the fix, instead of dying of "Cannot re-initialize CUDA in forked subprocess"."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    # CUDA cannot start on a CPU-only machine: torch's own flag, read by torch.cuda.is_initialized(), stands in for it
    monkeypatch.setattr(torch.cuda, "_initialized", True)
    plan(tmp_path, 3)
    with caplog.at_level(logging.WARNING):
        assert PackedWorker(spec(tmp_path, 60, gpus=gpus), "local-1", compose, body).run() == 3
    for n in range(3):
        record = json.loads((tmp_path / f"{n}_x={n}" / "result.json").read_text())
        assert (record["status"], record["error"]) == ("failed", FORKED_AFTER_CUDA), record
    assert [r.getMessage() for r in caplog.records].count(f"sweepit: {FORKED_AFTER_CUDA}") == 1


@pytest.mark.parametrize("gpus", [1, 0], ids=["packed-jobs-given-gpus", "jobs-seeing-the-workers-gpus"])
def test_cuda_initialised_in_a_worker_is_said_once_and_every_gpu_job_runs_in_a_fresh_interpreter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, gpus: int) -> None:
    """A Slurm worker's task (a packed worker's jobs, each given a GPU, and jobs that see the worker's GPUs, as an
    Optuna worker's do) whose fork server finds CUDA initialised before its fork: each job starts in a fresh
    interpreter, a child of the worker, where CUDA is new, and completes; the worker says so once. Before, each was
    forked and recorded failed."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    # CUDA cannot start on a CPU-only machine: torch's own flag, read by torch.cuda.is_initialized(), stands in for it
    monkeypatch.setattr(torch.cuda, "_initialized", True)
    worker_pid = os.getpid()

    def task(cfg: DictConfig) -> float:  # nested: pickled by value, as an app's `__main__` function is
        seen = {"parent": os.getppid(), "gpus": os.environ["CUDA_VISIBLE_DEVICES"],
                "cuda": sys.modules["torch"].cuda.is_initialized() if "torch" in sys.modules else False,
                "usr2_ignored": signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN}  # the worker's signal alone
        (Path(HydraConfig.get().runtime.output_dir) / "seen.json").write_text(json.dumps(seen))
        return float(cfg.x)

    setup_globals()
    with initialize_config_dir(config_dir=str(Path(__file__).parent / "app" / "conf"), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        config = loader.load_configuration("config", [f"hydra.sweep.dir={tmp_path}"], run_mode=RunMode.MULTIRUN)
        composer = ComposedConfigs(copy.deepcopy(loader))
        entries = [PlannedEntry(n, [f"x={n}"], str(numbered(composer.compose(config, [f"x={n}"]), n, {}, tmp_path)[1]),
                                0, {}) for n in range(2)]
        write_plan(tmp_path, 1, entries, ["1 GPU(s), 5 min"])
        worker = WorkerTask(HydraContext(config_loader=loader, callbacks=Callbacks()), task, Singleton.get_state(),
                            config, spec=spec(tmp_path, 60, gpus=gpus))
        with caplog.at_level(logging.WARNING):
            assert worker() == 2
    for entry in entries:
        record = json.loads((Path(entry.job_dir) / "result.json").read_text())
        assert (record["status"], record["objective"]) == ("completed", float(entry.num)), record
        seen = json.loads((Path(entry.job_dir) / "seen.json").read_text())
        assert seen == {"parent": worker_pid, "gpus": "0" if gpus else "0,1", "cuda": False, "usr2_ignored": True}, seen
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count(f"sweepit: {FRESH_FOR_CUDA}") == 1 and f"sweepit: {FORKED_AFTER_CUDA}" not in messages


# A fresh interpreter that notes the NVML check as torch is first imported, then unpickles a worker's task as submitit
# does on the node: the task's function is torch's own is_available, a stand-in for the app's code.
UNPICKLE = """
import os, pickle, sys
seen = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append(os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK"))
sys.meta_path.insert(0, Watch())
pickle.loads(sys.stdin.buffer.read())
print(seen)
"""


def test_a_slurm_worker_asks_cuda_through_nvml_before_it_imports_the_apps_code(tmp_path: Path) -> None:
    """A worker unpickles its task, and with it the app's function and what it imports: an is_available() there
    initialised CUDA in the worker, and every job forked from it died at its first CUDA call."""
    task = WorkerTask(None, torch.cuda.is_available, {}, None, spec=spec(tmp_path, 60))  # type: ignore[arg-type]
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
    proc = subprocess.run([sys.executable, "-c", UNPICKLE], input=cloudpickle.dumps(submitit.helpers.DelayedSubmission(
        task)), capture_output=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    assert proc.stdout.decode().split() == ["['1']"]


def cuda_flags() -> list[bool]:
    return [torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
            torch.are_deterministic_algorithms_enabled()]


def test_process_wide_cuda_flags_a_job_sets_end_with_it(tmp_path: Path) -> None:
    """Each job of a worker (a packed grid's, or an Optuna worker's trials: the same engine) runs in a process forked
    from the worker, so that trainer.deterministic's cuDNN and TF32 flags in one trial leave the next one's as the
    worker has them."""
    plan(tmp_path, 2)
    defaults = cuda_flags()

    def flags(job: Job) -> JobOutcome:
        if job.num == 0:
            make_deterministic()
        (job.job_dir / "flags").write_text(json.dumps(cuda_flags()))
        return JobOutcome("completed", 0.0, has_returned=True)

    assert PackedWorker(spec(tmp_path, 60), "local-1", compose, flags).run() == 2
    first, second = (json.loads((tmp_path / f"{n}_x={n}" / "flags").read_text()) for n in range(2))
    assert first != defaults and second == defaults == cuda_flags(), (first, second, defaults)
