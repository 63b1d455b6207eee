"""Epoch-boundary checkpoints: model, optimizer, epoch, metrics so far and every RNG state.

Restoring all of them makes a resumed run end with the same metrics as an uninterrupted one (same seed,
same device). The file is replaced atomically, so a job killed while saving keeps the previous one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sweepit._files import atomic_file

CHECKPOINT_FILE = "checkpoint.pt"
# Keys that may change between the interrupted run and its resumption without invalidating the checkpoint.
RESUMABLE_CHANGES = ("epochs", "timeout_min", "trainer")


def fingerprint(cfg_container: dict[str, Any]) -> str:
    """A hash of the config that determines the training trajectory."""
    kept = {k: v for k, v in cfg_container.items() if k not in RESUMABLE_CHANGES}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def save(path: Path, *, epoch: int, rows: list[dict[str, Any]], model: nn.Module, optimizer: torch.optim.Optimizer,
         generators: dict[str, torch.Generator], config_hash: str) -> None:
    state = {
        "epoch": epoch,
        "rows": rows,
        "config_hash": config_hash,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng_torch": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "rng_generators": {name: g.get_state() for name, g in generators.items()},
    }
    with atomic_file(path, binary=True) as f:
        torch.save(state, f)


def load(path: Path, *, model: nn.Module, optimizer: torch.optim.Optimizer,
         generators: dict[str, torch.Generator], config_hash: str) -> tuple[int, list[dict[str, Any]]] | None:
    """Restore from `path` and return (last finished epoch, metrics rows), or None when there is nothing
    to resume (no file, or a checkpoint of a different configuration)."""
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("config_hash") != config_hash:
        return None
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng_torch"])
    if state["rng_cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng_cuda"])
    for name, g in generators.items():
        g.set_state(state["rng_generators"][name])
    return int(state["epoch"]), list(state["rows"])
