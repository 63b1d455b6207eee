"""Epoch-boundary checkpoints: the training function's own state, the metrics so far and every RNG state, so that a
resumed run ends with the same metrics as an uninterrupted one; replaced atomically (a job killed while saving keeps
the previous one). torch is imported inside the functions: `import sweepit` stays light."""

from __future__ import annotations

import hashlib
import json
import logging
import random
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweepit._files import atomic_file
from sweepit.results import JobPaths

if TYPE_CHECKING:
    from sweepit.train._session import Session

log = logging.getLogger(__name__)

FORMAT = 3  # 3: each rank's random states (rank 0's in the checkpoint, others' beside it), a save count
# Keys that may change between the interrupted run and its resumption without changing the training
# trajectory: the time limit and the loop's bookkeeping. Anything else (epochs too: a cosine schedule
# depends on it) makes a checkpoint one of another configuration, which a run never resumes from.
NEUTRAL_KEYS = ("timeout_min", "trainer.threads", "trainer.log_every_epoch", "trainer.checkpoint",
                "trainer.checkpoint_every", "trainer.keep_checkpoint", "trainer.save_model", "logger")


def fingerprint(session: Session) -> str:
    """A hash of the job config that determines the training trajectory (`NEUTRAL_KEYS` and `hydra` left out),
    computed once a job: the config as the job started, which is also what a restarted job computes, even if the
    task changed it since."""
    if session.config_hash is not None:
        return session.config_hash
    from omegaconf import OmegaConf

    config = session.config
    if OmegaConf.is_config(config):
        if "hydra" in config:  # the launcher's copy of the job config: the task's part only
            config = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])
        config = OmegaConf.to_container(config, resolve=True)
    kept: dict[str, Any] = {str(k): v for k, v in (config if isinstance(config, Mapping) else {}).items()
                            if k != "hydra"}
    for dotted in NEUTRAL_KEYS:
        node: Any = kept
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    session.config_hash = hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return session.config_hash


def rng_states() -> dict[str, Any]:
    """This process's random states: Python's, NumPy's (when imported), torch's CPU one, and that of its current CUDA
    device when CUDA is in use (one device: a resumed rank may see fewer GPUs than the one that saved)."""
    import torch

    states: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state(),
                              "cuda": torch.cuda.get_rng_state() if torch.cuda.is_initialized() else None}
    if "numpy" in sys.modules:
        states["numpy"] = sys.modules["numpy"].random.get_state()
    return states


def set_rng_states(states: Mapping[str, Any]) -> None:
    import torch

    from sweepit.train._devices import cuda_available

    random.setstate(states["python"])
    torch.set_rng_state(states["torch"])
    if states.get("cuda") is not None and cuda_available():
        torch.cuda.set_rng_state(states["cuda"])  # of this rank's current device
    if "numpy" in states:
        import numpy as np

        np.random.set_state(states["numpy"])


def rank_path(path: Path, rank: int) -> Path:
    """Where rank `rank` (> 0) keeps its random states beside the job's checkpoint: `checkpoint.rank<r>.pt`."""
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def save(session: Session, state: Any) -> None:
    """Rank 0: `state` (anything torch.save takes) with the metrics rows so far and its random states; another rank:
    only its own random states, beside the checkpoint (a rank's dropout and data draws are its own: restored from rank
    0's, they would differ from an uninterrupted run's). The saves are counted, so that each rank's states are
    matched with the checkpoint they belong to."""
    path, rank = session.checkpoint_path, session.the_rank.rank
    if path is None:
        return
    import torch

    session.saves += 1
    meta = {"format": FORMAT, "config_hash": fingerprint(session), "rng": rng_states(), "count": session.saves}
    record = {"sweepit": {**meta, "rows": session.rows}, "state": state} if rank == 0 else {"sweepit": meta}
    with atomic_file(path if rank == 0 else rank_path(path, rank), binary=True) as f:
        torch.save(record, f)


def _read(path: Path) -> dict[str, Any] | None:
    import torch

    if not path.is_file():
        return None
    # The job's own file in its own directory, written by save() above: not an untrusted download, and a
    # training function's state may hold more than tensors (NumPy arrays, its own objects).
    record = torch.load(path, map_location="cpu", weights_only=False)
    meta = record.get("sweepit") if isinstance(record, dict) else None
    return record if isinstance(meta, dict) and meta.get("format") == FORMAT else None


def read_state(path: Path) -> Any:
    """The state a job saved with its checkpoint at `path` (what a resumed run would get back), None when there is
    no checkpoint of this format: for reading a job's checkpoint from outside it (`sweepit.load`)."""
    record = _read(path)
    return None if record is None else record["state"]


def load(session: Session) -> Any:
    """The state of the job's last save, with the session's metrics rows and this rank's random states as they were
    then (rank 0's from the checkpoint, another rank's from its own file of the same save); None when there is
    nothing to resume from: no file, a checkpoint of another configuration, or one written by an older sweepit."""
    path, rank = session.checkpoint_path, session.the_rank.rank
    if path is None:
        return None
    config_hash, record = fingerprint(session), _read(path)  # the fingerprint of the config as the job starts
    if record is None or record["sweepit"].get("config_hash") != config_hash:
        if path.is_file() and session.is_main:
            log.warning(f"sweepit: {path} holds a checkpoint of another configuration (or of an older sweepit); "
                        "this job starts from the beginning and will replace it")
        return None
    meta = record["sweepit"]
    count = int(meta.get("count", 0))
    if rank == 0:
        set_rng_states(meta["rng"])
    else:
        own = _read(rank_path(path, rank))
        mine = own["sweepit"] if own is not None else {}
        if mine.get("config_hash") == config_hash and mine.get("count") == count:
            set_rng_states(mine["rng"])
        else:
            log.warning(f"sweepit: rank {rank} has no random states saved with {path} (it did not call "
                        "save_checkpoint then): it goes on with fresh ones, so its random draws differ from an "
                        "uninterrupted run's")
    session.saves = count
    session.restore(list(meta["rows"]))
    return record["state"]


def remove(path: Path) -> None:
    """The checkpoint and every rank's random states beside it."""
    for file in [path, *JobPaths(path.parent).rank_states()]:
        file.unlink(missing_ok=True)
