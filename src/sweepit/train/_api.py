"""What any training function calls to get sweepit's guarantees: five calls, whatever its model, data and loop.

    job = sweepit.context()                       # rank, world size, device, job directory sweepit assigned
    state = sweepit.load_checkpoint()             # None, or what the last save_checkpoint() got
    for epoch in range(first, epochs + 1):
        ...
        sweepit.report({"train_loss": ..., "val_acc": ...}, epoch=epoch)   # metrics.jsonl, result.json, Optuna
        if sweepit.should_stop():                 # the Optuna pruner says this trial is not worth finishing
            break
        sweepit.save_checkpoint({"model": ..., "optimizer": ..., "epoch": epoch})

A *session* holds one job's state in the job's process: its directory, config, rank, the metrics reported
so far and its Optuna trial. sweepit's launchers begin one around the task function and, when the task
wrote no `result.json` itself, finish it with one (status, objective, final metrics, best epoch). Under
any other launcher, or a single run, the first call begins a session in Hydra's output directory; outside
Hydra nothing is written and the calls only keep the metrics in memory. Only rank 0 writes files and
talks to Optuna; every rank may call everything (`should_stop` is a collective when ranks run).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweepit.errors import ConfigError, DivergedError
from sweepit.results._job_files import MetricsLog, read_metrics, read_result, write_result
from sweepit.results._status import objective_direction

if TYPE_CHECKING:
    import torch

    from sweepit.train._distributed import Rank

log = logging.getLogger(__name__)
ENV_JOB_DIR = "SWEEPIT_JOB_DIR"  # where a job writes, when no launcher or Hydra says (set it to try the API alone)
_NOTHING = object()


@dataclass(frozen=True)
class JobContext:
    """Where and as what this process trains: its rank in the job's world, its device, the job's directory."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    job_dir: Path | None             # None outside a sweep or a Hydra run: nothing is written
    master_addr: str = "127.0.0.1"
    master_port: int = 29500

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes the job's files."""
        return self.rank == 0

    def init_process_group(self, backend: str | None = None) -> None:
        """torch.distributed's process group for this job's ranks (NCCL on CUDA, else gloo), once; a job of
        one rank needs none. Ranks come from Slurm, torchrun, or the local ranks sweepit forked."""
        from sweepit.train._distributed import Rank, init_process_group

        init_process_group(Rank(self.rank, self.local_rank, self.world_size, self.master_addr, self.master_port),
                           self.device, backend)


@dataclass
class Session:
    job_dir: Path | None
    config: Any = None                               # the job's config (an OmegaConf object or a mapping)
    rank: Rank | None = None                         # None: from the environment (Slurm, torchrun) at first use
    rows: list[dict[str, Any]] = field(default_factory=list)
    started_at: str = field(default_factory=lambda: _now())
    t0: float = field(default_factory=time.perf_counter)
    _log: MetricsLog | None = None
    _trial: Any = None                               # the pruning callback, once opened (None: no study)
    _trial_checked: bool = False
    _stop: bool = False                              # the pruner's verdict after the latest report
    told_to_stop: bool = False                       # should_stop() said True: a task that returns was pruned

    # -- what the session knows from the job's config --------------------------------------------------
    def value(self, key: str, default: Any = None) -> Any:
        from omegaconf import OmegaConf

        if self.config is None:
            return default
        if OmegaConf.is_config(self.config):
            return OmegaConf.select(self.config, key, default=default)
        node: Any = self.config
        for part in key.split("."):
            node = node.get(part, default) if isinstance(node, Mapping) else getattr(node, part, default)
        return node

    @property
    def metric(self) -> str | None:
        """The objective's name (the config's `metric`): what pruning and `result.json` read from each report."""
        metric = self.value("metric")
        return None if metric is None else str(metric)

    @property
    def direction(self) -> str:
        return objective_direction(self.value("direction"))

    @property
    def the_rank(self) -> Rank:
        if self.rank is None:
            from sweepit.train._distributed import SINGLE, from_environment

            self.rank = from_environment() or SINGLE
        return self.rank

    @property
    def is_main(self) -> bool:
        return self.the_rank.is_main

    # -- reporting ---------------------------------------------------------------------------------------
    def report(self, metrics: Mapping[str, Any], epoch: int | None = None) -> None:
        epoch = len(self.rows) + 1 if epoch is None else int(epoch)
        if epoch < 1:
            raise ConfigError(f"sweepit.report's epoch must be >= 1 (epochs count from 1), but got epoch={epoch}.")
        row = {"epoch": epoch, **{str(k): _plain(v) for k, v in metrics.items() if k != "epoch"}}
        # An epoch reported again (a run resumed from an earlier checkpoint) replaces that epoch and later ones.
        self.rows = [r for r in self.rows if int(r.get("epoch", 0)) < epoch] + [row]
        self._stop = False
        if not self.is_main:
            return
        if self.job_dir is not None:
            if self._log is None:
                self._log = MetricsLog(self.job_dir)
            self._log.resume_from(self.rows)
        trial = self._open_trial()
        if trial is not None:
            self._stop = bool(trial(epoch, row))

    def _open_trial(self) -> Any:
        if not self._trial_checked:
            self._trial_checked = True
            metric = self.metric
            if metric is not None:
                from sweepit.search._pruning import pruning_callback

                self._trial = pruning_callback(_MetricConfig(metric, self.value("epochs")))
        return self._trial

    def pruner_says_stop(self) -> bool:
        """The pruner's verdict after the latest report, on rank 0 (other ranks: False); no collective."""
        return self._stop if self.is_main else False

    def should_stop(self) -> bool:
        stop = self.pruner_says_stop()
        if self.the_rank.world_size > 1:
            import torch
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():  # every rank stops, or none
                flag = torch.tensor([float(stop)], device=_collective_device())
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                stop = bool(flag.item() > 0)
        self.told_to_stop = self.told_to_stop or stop
        return stop

    # -- checkpoints ---------------------------------------------------------------------------------------
    @property
    def checkpoint_path(self) -> Path | None:
        from sweepit.train._checkpoint import CHECKPOINT_FILE

        return None if self.job_dir is None else self.job_dir / CHECKPOINT_FILE

    def _config_hash(self) -> str:
        from omegaconf import OmegaConf

        from sweepit.train._checkpoint import fingerprint

        config = self.config
        if OmegaConf.is_config(config):
            if "hydra" in config:  # the launcher's copy of the job config: the task's part only
                config = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])
            config = OmegaConf.to_container(config, resolve=True)
        return fingerprint(config if isinstance(config, Mapping) else None)

    def save_checkpoint(self, state: Any) -> None:
        path = self.checkpoint_path
        if path is None or not self.is_main:
            return
        from sweepit.train import _checkpoint

        _checkpoint.save(path, state, self.rows, self._config_hash())

    def load_checkpoint(self) -> Any:
        path = self.checkpoint_path
        if path is None:
            return None
        from sweepit.train import _checkpoint

        restored = _checkpoint.load(path, self._config_hash())
        if restored is None:
            if path.is_file() and self.is_main:
                log.warning(f"sweepit: {path} holds a checkpoint of another configuration (or of an older sweepit); "
                            "this job starts from the beginning and will replace it")
            return None
        state, self.rows = restored
        if self.is_main and self.job_dir is not None:
            self._log = self._log or MetricsLog(self.job_dir)
            self._log.resume_from(self.rows)  # the metrics as they were when the checkpoint was saved
        return state

    # -- the end -------------------------------------------------------------------------------------------
    def outcome(self, status: str, returned: Any = _NOTHING, error: BaseException | None = None) -> dict[str, Any]:
        """The `result.json` of a task that wrote none: status, objective, final metrics, best epoch, times."""
        metric, direction = self.metric, self.direction
        rows = self.rows or (read_metrics(self.job_dir)[0] if self.job_dir is not None else [])
        result: dict[str, Any] = {
            "status": status, "objective": None,
            "epochs_completed": len(rows), "started_at": self.started_at, "ended_at": _now(),
            "wall_time_s": time.perf_counter() - self.t0, "hostname": socket.gethostname(), "pid": os.getpid(),
            "world_size": self.the_rank.world_size, "recorded_by": "sweepit",
        }
        # What the config says about the objective, and nothing it does not: readers apply one default.
        result.update({k: str(v) for k, v in (("metric", metric), ("direction", self.value("direction"))) if v})
        if rows:
            result["final"] = rows[-1]
        key = metric or ""
        scored = [r for r in rows if _number(r.get(key)) is not None] if metric else []
        if scored:
            pick = max if direction == "maximize" else min
            best = pick(scored, key=lambda r: float(r[key]))
            result.update(best_epoch=best.get("epoch"), best_value=best[key])
        if status in ("completed", "pruned"):
            value = _number(returned) if returned is not _NOTHING else None
            if value is None and scored:
                value = float(scored[-1][key])
            result["objective"] = value
            if returned is not _NOTHING and returned is not None and _number(returned) is None:
                result["returned"] = repr(returned)[:200]  # a dict or a string: the sweeper has it, this says what
        elif status == "diverged":
            result["objective"] = None
            result["error"] = str(error) if error is not None else "the loss stopped being finite"
        if error is not None and status in ("failed", "interrupted"):
            result["error"] = f"{type(error).__name__}: {error}"
            result["traceback"] = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return result

    def finish(self, status: str, returned: Any = _NOTHING, error: BaseException | None = None) -> None:
        """Rank 0 writes `result.json` unless the task wrote its own (sweepit's train.py does)."""
        if self.job_dir is None or not self.is_main:
            return
        if status == "completed" and self.told_to_stop:
            status = "pruned"  # the task returned because should_stop() said so
        try:
            if read_result(self.job_dir) is not None:
                return
        except ValueError:
            pass  # a half-written one of the task's: replaced by the launcher's record
        write_result(self.job_dir, self.outcome(status, returned, error))


@dataclass(frozen=True)
class _MetricConfig:
    metric: str
    epochs: Any


_active: Session | None = None


def begin(job_dir: Path | str | None, config: Any = None, rank: Rank | None = None) -> Session:
    """Start the session of one job in this process (a launcher, or sweepit's own loop, calls this)."""
    global _active
    _active = Session(job_dir=None if job_dir is None else Path(job_dir), config=config, rank=rank)
    return _active


def end(session: Session | None = None) -> None:
    """Close `session` (or whichever is active): later calls begin a new one."""
    global _active
    if session is None or _active is session:
        _active = None


def active() -> Session:
    """The session of the job running in this process; the first call outside sweepit's launchers begins one
    in `$SWEEPIT_JOB_DIR`, else Hydra's output directory, else none (metrics kept in memory only)."""
    global _active
    if _active is None:
        _active = Session(job_dir=job_dir_from_environment())
    return _active


def job_dir_from_environment() -> Path | None:
    if os.environ.get(ENV_JOB_DIR):
        return Path(os.environ[ENV_JOB_DIR])
    hydra_config = sys.modules.get("hydra.core.hydra_config")  # Hydra runs this job: ask it, never import it
    if hydra_config is not None and hydra_config.HydraConfig.initialized():
        return Path(hydra_config.HydraConfig.get().runtime.output_dir)
    return None


def status_of(error: BaseException) -> str:
    """The status a job that raised `error` ends with: optuna.TrialPruned is `pruned` (Optuna's own way to
    prune from inside a trial), DivergedError `diverged`, KeyboardInterrupt `interrupted`, anything else `failed`."""
    if isinstance(error, DivergedError):
        return "diverged"
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    optuna_exceptions = sys.modules.get("optuna.exceptions")
    if optuna_exceptions is not None and isinstance(error, optuna_exceptions.TrialPruned):
        return "pruned"
    return "failed"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _plain(value: Any) -> Any:
    """A reported value as JSON takes it: tensors and NumPy scalars become Python numbers."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", 0) == 0:
        value = item()
    return value


def _collective_device() -> Any:
    import torch
    import torch.distributed as dist

    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


# -- the public calls --------------------------------------------------------------------------------------------
def report(metrics: Mapping[str, Any], epoch: int | None = None) -> None:
    """Record one epoch's metrics: a line of `metrics.jsonl` (the learning curves, the summary table, the
    report), and, under the Optuna sweeper, the objective (the config's `metric`) as the trial's value at
    step `epoch`. `epoch` counts from 1 and defaults to the one after the last reported; reporting an epoch
    again (after resuming from a checkpoint) replaces it and those after it. Only rank 0 writes."""
    if not isinstance(metrics, Mapping):
        raise ConfigError(f"sweepit.report takes a mapping of metric names to numbers, but got {type(metrics).__name__}"
                          "; call it like sweepit.report({'val_loss': 0.12, 'val_acc': 0.97}, epoch=3).")
    active().report(metrics, epoch)


def should_stop() -> bool:
    """True when the Optuna pruner says to stop this trial after the last report: return (or raise
    optuna.TrialPruned) and the job ends as `pruned`. Always False outside an Optuna search, or when the config
    names no `metric`. With several ranks every rank must call it: they all get rank 0's answer."""
    return active().should_stop()


def save_checkpoint(state: Any) -> None:
    """Save `state` (what torch.save takes: state dicts, the epoch, ...) as the job's `checkpoint.pt`, with the
    metrics reported so far and every RNG state, atomically. Rank 0 writes; other ranks return at once."""
    active().save_checkpoint(state)


def load_checkpoint() -> Any:
    """What the last `save_checkpoint` of this job got (on every rank, on the CPU), with the RNG states and
    reported metrics as they were then; None for a fresh start, or when the checkpoint is of another
    configuration (a warning says so). A job requeued by Slurm, or run again by `sweepit resume`, thus goes
    on from its last checkpoint and ends with the same metrics as an uninterrupted run."""
    return active().load_checkpoint()


def context() -> JobContext:
    """This process's rank, local rank and world size (from Slurm, torchrun or sweepit's local ranks), the
    device it should train on (its own GPU by local rank, else the CPU; the config's `device` wins), and the
    job's directory."""
    from sweepit.train._distributed import device_for

    session = active()
    rank = session.the_rank
    device = device_for(rank, str(session.value("device", "auto")))
    return JobContext(rank=rank.rank, local_rank=rank.local_rank, world_size=rank.world_size, device=device,
                      job_dir=session.job_dir, master_addr=rank.master_addr, master_port=rank.master_port)
