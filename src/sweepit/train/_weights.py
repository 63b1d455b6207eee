"""Trained weights are a result: `model_best.pt` and/or `model_last.pt` in the job's directory, as
`trainer.save_model` says (best, the default | last | both | none), written atomically by rank 0 (docs/results.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

import sweepit
from sweepit._files import atomic_file
from sweepit.results import WEIGHT_FILES


def save(path: Path, model: nn.Module, epoch: int, metric: str, value: Any) -> None:
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    with atomic_file(path, binary=True) as f:
        torch.save({"model": state, "epoch": epoch, "metric": metric, "value": value,
                    "sweepit": sweepit.__version__}, f)


def sizes(job_dir: Path) -> dict[str, int]:
    """The job's weight files and their sizes in bytes."""
    return {name: (job_dir / name).stat().st_size for name in WEIGHT_FILES if (job_dir / name).is_file()}
