"""One job of sweepit's own loop: check the config, train, and leave the job's own `result.json`: its session's
record with what the loop knows besides (device, parameters, timing, code version)."""

from __future__ import annotations

import os
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

import sweepit
from sweepit.errors import DivergedError
from sweepit.results import JobPaths, JobState, worst
from sweepit.train import _checkpoint, _session
from sweepit.train._checks import check_config
from sweepit.train._devices import cuda_available
from sweepit.train._distributed import spawn_local
from sweepit.train._loop import EpochCallback, TrainRun, train
from sweepit.train._rank import SINGLE, Rank, from_environment


@lru_cache(maxsize=1)
def code_version() -> str:
    """sweepit's version and, when run from a git checkout, the commit (with `+dirty` for local changes)."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "describe", "--always", "--dirty=+dirty"],
                                capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return f"{sweepit.__version__}" + (f" ({commit})" if commit else "")


def run_job(cfg: Any, job_dir: Path, on_epoch: EpochCallback | None = None) -> float:
    """Train one configuration, leave `metrics.jsonl` and `result.json` in `job_dir`, return the objective. A diverged
    job returns the worst objective (a high learning rate is a result, not an error); any other exception is recorded,
    then raised again. With `trainer.gpus=N` > 1 it trains on N ranks: one per task under Slurm or torchrun, else N
    local processes; only rank 0 writes the job's files."""
    job_dir = Path(job_dir)
    rank = from_environment()
    session, began = _session.join(job_dir, cfg, rank or SINGLE)  # the launcher's, under sweepit's launchers
    try:
        if rank is not None and not rank.is_main:
            check_config(cfg)
            rows = train(cfg, rank=rank, session=session).rows
            return float(rows[-1][cfg.metric]) if rows else float("nan")
        job_dir.mkdir(parents=True, exist_ok=True)
        return _run_main(cfg, job_dir, on_epoch, rank, session)
    finally:
        if began:
            _session.end(session)  # else the launcher ends it, after its own record of the job


def _run_main(cfg: Any, job_dir: Path, on_epoch: EpochCallback | None, rank: Rank | None,
              session: _session.Session) -> float:
    """Rank 0: train (forking the local ranks when no launcher started them) and record how the job ended."""
    gpus = int(cfg.trainer.gpus)
    status, objective, trained = JobState.FAILED, None, TrainRun()
    error: BaseException | None = None
    try:
        check_config(cfg)
        if rank is None and gpus > 1:
            _warn_oversubscribed(cfg, gpus)
            trained = spawn_local(gpus, lambda r: _train_rank(cfg, on_epoch, job_dir, r))
        else:
            trained = train(cfg, on_epoch, rank=rank or SINGLE, session=session)
        if not (trained.paused or cfg.trainer.get("keep_checkpoint", False)):  # a paused job goes on from it
            _checkpoint.remove(JobPaths(job_dir).checkpoint)
        objective = float(trained.rows[-1][cfg.metric])
        # A pruned job was stopped early: its last value (in `final`) is no objective to compare with the others'.
        status = ended_as(trained)
        return objective
    except DivergedError as e:
        status, error = JobState.DIVERGED, e
        print(f"sweepit: job diverged: {e}; recorded with the worst objective", flush=True)
        return worst(str(cfg.direction))
    except BaseException as e:
        status, error = _session.status_of(e), e
        raise
    finally:
        record = session.outcome(status, objective, error, recorded_by=None)
        record.result.update({"world_size": gpus, "code_version": code_version(), **trained.info})
        paths = JobPaths(job_dir)
        weights = {p.name: p.stat().st_size for p in (paths.best_weights, paths.last_weights) if p.is_file()}
        if weights:
            record.result["weights"] = weights  # file -> bytes: what `sweepit clean` can free
        session.write_own(record)


def ended_as(trained: TrainRun) -> JobState:
    """How a training that returned ended: paused at a rung, pruned, or trained to its last epoch."""
    if trained.paused:
        return JobState.PAUSED
    return JobState.PRUNED if trained.stopped_early else JobState.COMPLETED


def _warn_oversubscribed(cfg: Any, gpus: int) -> None:
    """More local CPU ranks than cores is allowed (it checks data-parallel code on a laptop) but its times mean
    nothing: say so once, rather than refuse."""
    if str(cfg.device).startswith("cuda") or (str(cfg.device) == "auto" and cuda_available()):
        return  # asked through NVML: the ranks are forked next
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if gpus > cores:
        print(f"sweepit: warning: trainer.gpus={gpus} runs {gpus} CPU ranks on {cores} core(s): the ranks share "
              "the cores, so the metrics are right but epoch times and throughput say nothing about scaling. "
              f"Use trainer.gpus<={cores} on this machine to time it.", flush=True)


def _train_rank(cfg: Any, on_epoch: EpochCallback | None, job_dir: Path, rank: Rank) -> TrainRun:
    """One local rank of a multi-rank job, in its own forked process and session (rank 0's trackers end
    here: the supervising process writes result.json only after the ranks are gone)."""
    session = _session.begin(job_dir, cfg, rank)
    status: str = JobState.INTERRUPTED
    try:
        trained = train(cfg, on_epoch, rank=rank, session=session)
        status = ended_as(trained)
        return trained
    except BaseException as e:
        status = _session.status_of(e)
        raise
    finally:
        _session.end(session, status)
