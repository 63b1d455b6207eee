"""One job from start to `result.json`: check the config, train, record the outcome whatever it is."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

import sweepit
from sweepit.errors import DivergedError
from sweepit.results._job_files import MetricsLog, write_result
from sweepit.results._status import worst
from sweepit.train._checkpoint import CHECKPOINT_FILE
from sweepit.train._checks import check_config
from sweepit.train._distributed import SINGLE, Rank, from_environment, spawn_local
from sweepit.train._loop import EpochCallback, Outcome, train


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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _train_as(cfg: Any, rank: Rank, on_epoch: EpochCallback | None, checkpoint: Path | None,
              on_resume: Callable[[list[dict[str, Any]]], None] | None) -> Outcome:
    return train(cfg, on_epoch=on_epoch, checkpoint=checkpoint, on_resume=on_resume, rank=rank)


def run_job(cfg: Any, job_dir: Path, on_epoch: EpochCallback | None = None) -> float:
    """Train one configuration, leave `metrics.jsonl` and `result.json` in `job_dir`, return the objective.

    A diverged job returns the worst objective (a high learning rate is a result, not an error);
    any other exception is recorded as `failed` in `result.json`, then raised again.
    With `trainer.gpus=N` > 1 the job trains on N ranks: one per task under Slurm or torchrun, else N
    local processes; only rank 0 writes the job's files.
    """
    rank = from_environment()
    if rank is not None and not rank.is_main:
        check_config(cfg)
        rows = _train_as(cfg, rank, None, None, None).rows
        return float(rows[-1][cfg.metric]) if rows else math.nan
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    result: dict[str, Any] = {
        "status": "failed", "objective": None, "metric": str(cfg.metric), "direction": str(cfg.direction),
        "started_at": _now(), "hostname": socket.gethostname(), "pid": os.getpid(),
        "code_version": code_version(), "world_size": int(cfg.trainer.gpus),
    }
    metrics = MetricsLog(job_dir)

    def record_epoch(epoch: int, row: dict[str, Any]) -> bool:
        metrics.append(row)
        return on_epoch(epoch, row) if on_epoch is not None else False

    try:
        check_config(cfg)
        checkpoint = job_dir / CHECKPOINT_FILE if cfg.trainer.get("checkpoint", False) else None
        gpus = int(cfg.trainer.gpus)
        if rank is None and gpus > 1:
            outcome = spawn_local(gpus, lambda r: _train_as(cfg, r, record_epoch, checkpoint, metrics.resume_from))
        else:
            outcome = _train_as(cfg, rank or SINGLE, record_epoch, checkpoint, metrics.resume_from)
        if checkpoint is not None and not cfg.trainer.get("keep_checkpoint", False):
            checkpoint.unlink(missing_ok=True)
        result.update(outcome.info)
        result.update(timing_summary(outcome.rows))
        rows = outcome.rows
        final = rows[-1]
        objective = float(final[cfg.metric])
        better = max if cfg.direction == "maximize" else min
        best = better(rows, key=lambda r: r[cfg.metric])
        result.update(
            status="pruned" if outcome.stopped_early else "completed", objective=objective, final=final,
            epochs_completed=len(rows), best_epoch=best["epoch"], best_value=best[cfg.metric],
        )
        return objective
    except DivergedError as e:
        result.update(status="diverged", error=str(e), epochs_completed=len(metrics.rows))
        if metrics.rows:
            result["final"] = metrics.rows[-1]
        print(f"sweepit: job diverged: {e}; recorded with the worst objective", flush=True)
        return worst(str(cfg.direction))
    except BaseException as e:
        result.update(
            status="interrupted" if isinstance(e, KeyboardInterrupt) else "failed",
            error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=20),
            epochs_completed=len(metrics.rows),
        )
        raise
    finally:
        result["wall_time_s"] = time.perf_counter() - t0
        result["ended_at"] = _now()
        write_result(job_dir, result)


def timing_summary(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Epoch time and throughput as the courses time them: the first (warm-up) epoch is left out."""
    timed = rows[1:] if len(rows) > 1 else rows
    if not timed:
        return {}
    mean = sum(r["epoch_time_s"] for r in timed) / len(timed)
    return {
        "epoch_time_s_mean": mean,
        "samples_per_s_mean": sum(r["samples_per_s"] for r in timed) / len(timed),
        "step_time_s_mean": sum(r.get("step_time_s", 0.0) for r in timed) / len(timed),
        "timed_epochs": len(timed),
    }
