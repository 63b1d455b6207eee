"""Checks a job's config before any training starts. Messages state the rule, the value and the fix."""

from __future__ import annotations

import math
from typing import Any

from sweepit.errors import ConfigError

TASKS = ("linreg", "digits", "mnist", "cifar10")
PRECISIONS = ("fp32", "bf16")
MODELS = {
    "linreg": ("linear",),
    "digits": ("softmax", "mlp", "cnn"),
    "mnist": ("softmax", "mlp", "cnn"),
    "cifar10": ("resnet18", "resnet50", "cnn"),
}
REGRESSION_METRICS = ("train_loss", "val_loss")
CLASSIFICATION_METRICS = ("train_loss", "train_acc", "val_loss", "val_acc")
TIMING_METRICS = ("epoch_time_s", "samples_per_s")


def objective_metrics(task: str) -> tuple[str, ...]:
    """Metric names that `metric` may name for this task."""
    base = REGRESSION_METRICS if task == "linreg" else CLASSIFICATION_METRICS
    return base + TIMING_METRICS


def _number(cfg: Any, key: str) -> float:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key} must be a number, but got {key}={value!r}. Set it like `{key}=0.01`.")
    return float(value)


def check_config(cfg: Any) -> None:
    """Raise ConfigError for the first rule the config breaks."""
    task = cfg.task.name
    if task not in TASKS:
        raise ConfigError(f"task.name must be one of {', '.join(TASKS)}, but got task.name={task!r}.")
    model = cfg.task.model
    if model not in MODELS[task]:
        raise ConfigError(
            f"task.model for task {task} must be one of {', '.join(MODELS[task])}, "
            f"but got task.model={model!r}. Set for example `task.model={MODELS[task][-1]}`."
        )
    lr = _number(cfg, "lr")
    if not (math.isfinite(lr) and lr > 0):
        raise ConfigError(f"lr must be a finite number > 0, but got lr={cfg.lr!r}. Set for example `lr=0.01`.")
    for key in ("batch_size", "epochs"):
        value = cfg[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{key} must be an integer >= 1, but got {key}={value!r}.")
    gpus = cfg.trainer.gpus
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ConfigError(f"trainer.gpus must be an integer >= 1, but got trainer.gpus={gpus!r}.")
    allowed = objective_metrics(task)
    if cfg.metric not in allowed:
        raise ConfigError(
            f"metric must name a metric that task {task} reports ({', '.join(allowed)}), "
            f"but got metric={cfg.metric!r}."
        )
    if cfg.direction not in ("maximize", "minimize"):
        raise ConfigError(f"direction must be maximize or minimize, but got direction={cfg.direction!r}.")
    device = str(cfg.device)
    if not (device in ("auto", "cpu", "cuda") or device.startswith("cuda:")):
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, but got device={device!r}.")
    schedule = cfg.trainer.get("lr_schedule", "constant")
    if schedule not in ("constant", "cosine"):
        raise ConfigError(f"trainer.lr_schedule must be constant or cosine, but got trainer.lr_schedule={schedule!r}.")
    precision = cfg.trainer.get("precision", "fp32")
    if precision not in PRECISIONS:
        raise ConfigError(f"trainer.precision must be one of {', '.join(PRECISIONS)}, but got "
                          f"trainer.precision={precision!r}; bf16 needs a CPU with AVX512-BF16/AMX or an A100/H100.")
    channels_last = cfg.trainer.get("channels_last", False)
    if not isinstance(channels_last, bool):
        raise ConfigError("trainer.channels_last must be true or false, but got "
                          f"trainer.channels_last={channels_last!r}.")
    scaling = cfg.trainer.get("lr_scaling", "linear")
    if scaling not in ("linear", "sqrt", "none"):
        raise ConfigError(f"trainer.lr_scaling must be linear, sqrt or none, but got trainer.lr_scaling={scaling!r}.")
    frac = _number(cfg.data, "val_fraction")
    if not 0.0 <= frac < 1.0:
        raise ConfigError(f"data.val_fraction must be in [0, 1), but got data.val_fraction={frac}.")
