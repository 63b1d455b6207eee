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
from typing import Any

from sweepit._files import atomic_file
from sweepit.results import RANK_STATES

log = logging.getLogger(__name__)

FORMAT = 3  # 3: each rank's random states (rank 0's in the checkpoint, others' beside it), a save count
# Keys that may change between the interrupted run and its resumption without changing the training
# trajectory: the time limit and the loop's bookkeeping. Anything else (epochs too: a cosine schedule
# depends on it) makes a checkpoint one of another configuration, which a run never resumes from.
NEUTRAL_KEYS = ("timeout_min", "trainer.threads", "trainer.log_every_epoch", "trainer.checkpoint",
                "trainer.checkpoint_every", "trainer.keep_checkpoint", "trainer.save_model", "logger")


def fingerprint(config: Mapping[str, Any] | None) -> str:
    """A hash of the job config that determines the training trajectory (`NEUTRAL_KEYS` and `hydra` left out)."""
    kept: dict[str, Any] = {str(k): v for k, v in (config or {}).items() if k != "hydra"}
    for dotted in NEUTRAL_KEYS:
        node: Any = kept
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


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


def save(path: Path, config_hash: str, count: int, rank: int = 0, state: Any = None,
         rows: list[dict[str, Any]] | None = None) -> None:
    """Rank 0: `state` (anything torch.save takes) with the metrics rows so far and its random states; another rank:
    its own random states, beside the checkpoint. `count` numbers the saves of the job, so that each rank's states
    are matched with the checkpoint they belong to."""
    import torch

    meta = {"format": FORMAT, "config_hash": config_hash, "rng": rng_states(), "count": count}
    record = {"sweepit": {**meta, "rows": rows}, "state": state} if rank == 0 else {"sweepit": meta}
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


def load(path: Path, config_hash: str, rank: int = 0) -> tuple[Any, list[dict[str, Any]], int] | None:
    """(state, metrics rows at save time, the save's count), with this rank's random states restored (rank 0's from
    the checkpoint, another rank's from its own file of the same save); None when there is nothing to resume from:
    no file, a checkpoint of another configuration, or one written by an older sweepit."""
    record = _read(path)
    if record is None or record["sweepit"].get("config_hash") != config_hash:
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
    return record["state"], list(meta["rows"]), count


def remove(path: Path) -> None:
    """The checkpoint and every rank's random states beside it."""
    for file in [path, *path.parent.glob(RANK_STATES)]:
        file.unlink(missing_ok=True)
