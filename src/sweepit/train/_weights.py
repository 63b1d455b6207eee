"""Trained weights are a result: `model_best.pt` and/or `model_last.pt` in the job's directory, as
`trainer.save_model` says (best, the default | last | both | none), written atomically by rank 0 (docs/results.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

import sweepit
from sweepit._files import atomic_file
from sweepit.errors import ConfigError
from sweepit.results import WEIGHT_FILES

MODES = ("best", "last", "both", "none")


def mode(cfg: Any) -> str:
    value = str(cfg.trainer.get("save_model", "best"))
    if value not in MODES:
        raise ConfigError(f"trainer.save_model must be one of {', '.join(MODES)}, but got "
                          f"trainer.save_model={value!r}. best keeps <job dir>/model_best.pt, none keeps no weights.")
    return value


def save(path: Path, model: nn.Module, epoch: int, metric: str, value: Any) -> None:
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    with atomic_file(path, binary=True) as f:
        torch.save({"model": state, "epoch": epoch, "metric": metric, "value": value,
                    "sweepit": sweepit.__version__}, f)


def is_better(value: Any, previous: list[Any], direction: str) -> bool:
    """True when `value` beats every earlier value of the metric (the first finite one does)."""
    if not isinstance(value, int | float) or value != value:
        return False
    earlier = [v for v in previous if isinstance(v, int | float) and v == v]
    if not earlier:
        return True
    return value > max(earlier) if direction == "maximize" else value < min(earlier)


def sizes(job_dir: Path) -> dict[str, int]:
    """The job's weight files and their sizes in bytes."""
    return {name: (job_dir / name).stat().st_size for name in WEIGHT_FILES if (job_dir / name).is_file()}


def load_model(cfg: Any, path: Path, data: Any) -> nn.Module:
    """The model of a job's config with the weights `save` wrote to `path`, on the CPU in eval mode: built as the
    loop builds it, from its `data` (`load_data`'s: the input shape and classes)."""
    from sweepit.train._build import build_model

    model = build_model(cfg, data.input_shape, data.n_classes or 1)  # no classes: a regression's one output
    # The job's own file, written by save() above: tensors and plain values only.
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True)["model"])
    return model.eval()
