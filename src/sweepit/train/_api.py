"""The five calls any training function makes to get sweepit's guarantees, whatever its model, data and loop
(docs/own-code.md). They act on the job's session (sweepit.train._session); only rank 0 writes files and talks to
Optuna, every rank may call everything."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweepit.errors import ConfigError, PausedAtRung
from sweepit.train import _checkpoint
from sweepit.train._rank import Rank
from sweepit.train._session import active

if TYPE_CHECKING:
    import torch

__all__ = ["JobContext", "context", "load_checkpoint", "report", "save_checkpoint", "should_stop"]


@dataclass(frozen=True, kw_only=True)
class JobContext(Rank):
    """Where and as what this process trains: its rank in the job's world (rank 0, `is_main`, writes the job's
    files), its device, the job's directory."""

    device: torch.device
    job_dir: Path | None             # None outside a sweep or a Hydra run: nothing is written

    def init_process_group(self, backend: str | None = None) -> None:
        """torch.distributed's process group for this job's ranks (NCCL on CUDA, else gloo), once; a job of
        one rank needs none. Ranks come from Slurm, torchrun, or the local ranks sweepit forked."""
        from sweepit.train._distributed import init_process_group

        init_process_group(self, self.device, backend)


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
    metrics reported so far and every RNG state, atomically. Rank 0 writes the checkpoint; with several ranks, every
    rank calls it (no collective: each other rank keeps only its own RNG states, in `checkpoint.rank<r>.pt`).
    Under the halving sweeper, the save at the epoch of the job's rung ends the job `paused` (it raises
    `sweepit.PausedAtRung`): call it after `report`, and let the error pass."""
    session = active()
    _checkpoint.save(session, state)
    if session.at_rung():
        raise PausedAtRung(f"paused after epoch {session.rows[-1]['epoch']}, the halving sweeper's rung, its "
                           "checkpoint saved: the sweeper resumes it from there if it is promoted.")


def load_checkpoint() -> Any:
    """What the last `save_checkpoint` of this job got (on every rank, on the CPU), with each rank's own RNG states
    and the reported metrics as they were then; None for a fresh start, or when the checkpoint is of another
    configuration (a warning says so). A job requeued by Slurm, or run again by `sweepit resume`, thus goes
    on from its last checkpoint and ends with the same metrics as an uninterrupted run."""
    return _checkpoint.load(active())


def context() -> JobContext:
    """This process's rank, local rank and world size (from Slurm, torchrun or sweepit's local ranks), the
    device it should train on (its own GPU by local rank, else the CPU; the config's `device` wins), made the
    process's current CUDA device, and the job's directory."""
    from sweepit.train._devices import device_for, use_device

    session = active()
    rank = session.the_rank
    device = device_for(rank, str(session.value("device", "auto")))
    use_device(device)  # the current GPU of this process (pinned memory, collectives), one rank or many
    return JobContext(**asdict(rank), device=device, job_dir=session.job_dir)
