"""Epoch-boundary checkpoints: the training function's own state, the metrics so far and every RNG state.

Restoring all of them makes a resumed run end with the same metrics as an uninterrupted one (same seed,
same device). The file is replaced atomically, so a job killed while saving keeps the previous one.
torch is imported inside the functions: `import sweepit` stays light.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweepit._files import atomic_file

CHECKPOINT_FILE = "checkpoint.pt"
FORMAT = 2
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
    """Python's, NumPy's (when imported) and torch's CPU and CUDA random states."""
    import torch

    states: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state(),
                              "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
    if "numpy" in sys.modules:
        states["numpy"] = sys.modules["numpy"].random.get_state()
    return states


def set_rng_states(states: Mapping[str, Any]) -> None:
    import torch

    random.setstate(states["python"])
    torch.set_rng_state(states["torch"])
    if states.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if "numpy" in states:
        import numpy as np

        np.random.set_state(states["numpy"])


def save(path: Path, state: Any, rows: list[dict[str, Any]], config_hash: str) -> None:
    """`state` (anything torch.save takes) with the metrics rows so far and the RNG states."""
    import torch

    record = {"sweepit": {"format": FORMAT, "config_hash": config_hash, "rows": rows, "rng": rng_states()},
              "state": state}
    with atomic_file(path, binary=True) as f:
        torch.save(record, f)


def load(path: Path, config_hash: str) -> tuple[Any, list[dict[str, Any]]] | None:
    """(state, metrics rows at save time) with the RNG states restored; None when there is nothing to resume
    from: no file, a checkpoint of another configuration, or one written by an older sweepit."""
    import torch

    if not path.is_file():
        return None
    # The job's own file in its own directory, written by save() above: not an untrusted download, and a
    # training function's state may hold more than tensors (NumPy arrays, its own objects).
    record = torch.load(path, map_location="cpu", weights_only=False)
    meta = record.get("sweepit") if isinstance(record, dict) else None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("config_hash") != config_hash:
        return None
    set_rng_states(meta["rng"])
    return record["state"], list(meta["rows"])
