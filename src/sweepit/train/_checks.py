"""Checks a job's config before any training starts. Messages state the rule, the value and the fix."""

from __future__ import annotations

import math
from typing import Any

from omegaconf import OmegaConf

from sweepit._targets import target_node
from sweepit.errors import ConfigError
from sweepit.results import DIRECTIONS
from sweepit.trackers import check_trackers
from sweepit.train._devices import PRECISIONS, cuda_available

MODELS = {  # the built-in tasks and their models
    "linreg": ("linear",),
    "digits": ("softmax", "mlp", "cnn"),
    "mnist": ("softmax", "mlp", "cnn"),
    "cifar10": ("resnet18", "resnet50", "cnn"),
    "custom": (),
}
TIMING_METRICS = ("epoch_time_s", "samples_per_s")


def check_metric(cfg: Any, regression: bool, reporter: str) -> None:
    """`metric` must be one the loop reports for regression targets or class labels: checked for a built-in task
    before its data loads, for a user's data once it has."""
    allowed = ("train_loss", "val_loss") if regression else ("train_loss", "train_acc", "val_loss", "val_acc")
    if cfg.metric not in allowed + TIMING_METRICS:
        raise ConfigError(f"metric must name a metric that {reporter} reports ({', '.join(allowed + TIMING_METRICS)}), "
                          f"but got metric={cfg.metric!r}. Set for example metric={allowed[1]}"
                          + (" direction=minimize." if regression else " direction=maximize."))


def _number(cfg: Any, key: str) -> float:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key} must be a number, but got {key}={value!r}. Set it like `{key}=0.01`.")
    return float(value)


def check_config(cfg: Any, here: bool = True) -> None:
    """Raise ConfigError for the first rule the config breaks; `here=False` leaves out what depends on the machine
    (a GPU for device=cuda, a tracker's package): a sweep's driver checks its jobs' values before it launches them."""
    _check_choices(cfg)
    task = cfg.task.name
    model = cfg.task.get("model")
    if not target_node(cfg, "model") and model not in MODELS[task]:
        if task == "custom":
            raise ConfigError("task=custom trains your own model, so model._target_ must name it (any nn.Module "
                              "class or function), but model._target_ is not set. Set for example "
                              "model._target_=mypkg.nets.MyNet (its arguments: +model.width=64).")
        raise ConfigError(
            f"task.model for task {task} must be one of {', '.join(MODELS[task])} (or set model._target_ to your "
            f"own nn.Module), but got task.model={model!r}. Set for example `task.model={MODELS[task][-1]}`, or "
            f"model._target_={model if model and '.' in str(model) else 'mypkg.nets.MyNet'}."
        )
    if task == "custom" and not target_node(cfg, "data"):
        raise ConfigError("task=custom trains on your own data, so data._target_ must name the function that returns "
                          "it, but data._target_ is not set. Set for example data._target_=mypkg.data.make; it returns "
                          "(train, val), each an (x, y) pair of tensors or a torch Dataset.")
    lr = _number(cfg, "lr")
    if not (math.isfinite(lr) and lr > 0):
        raise ConfigError(f"lr must be a finite number > 0, but got lr={cfg.lr!r}. Set for example `lr=0.01`.")
    _check_counts(cfg)
    if not target_node(cfg, "data") and task != "custom":
        check_metric(cfg, task == "linreg", f"task {task}")
    if cfg.direction not in DIRECTIONS:
        raise ConfigError(f"direction must be maximize or minimize, but got direction={cfg.direction!r}.")
    if here:
        check_trackers(cfg)  # a missing tracker package fails the job now, not after its first epoch
    device = str(cfg.device)
    if not (device in ("auto", "cpu", "cuda") or device.startswith("cuda:")):
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, but got device={device!r}.")
    for flag in ("channels_last", "deterministic", "cudnn_benchmark", "tf32_matmul"):
        value = cfg.trainer.get(flag, False)
        if not isinstance(value, bool):
            raise ConfigError(f"trainer.{flag} must be true or false, but got trainer.{flag}={value!r}.")
    fast = [f"trainer.{flag}=true" for flag in ("cudnn_benchmark", "tf32_matmul") if cfg.trainer.get(flag, False)]
    if fast and cfg.trainer.get("deterministic", False):
        raise ConfigError(f"trainer.deterministic=true turns cuDNN's benchmarking and TF32 off, but got "
                          f"{' and '.join(fast)}. Drop {' and '.join(fast)} for reproducible runs, or set "
                          "trainer.deterministic=false for speed.")
    frac = _number(cfg.data, "val_fraction")
    if not 0.0 <= frac < 1.0:
        raise ConfigError(f"data.val_fraction must be in [0, 1), but got data.val_fraction={frac}.")
    if here and (device == "cuda" or device.startswith("cuda:")) and not cuda_available():
        raise ConfigError(f"device={device} needs a CUDA GPU, but torch sees none here (torch.cuda.is_available() is "
                          "False: no GPU, no driver, or a CPU build of torch). Set device=auto (a GPU when there is "
                          "one, else the CPU) or device=cpu.")


# Keys that name one of a few choices, and what to know to choose (a key the config lacks takes its default).
_CHOICES: dict[str, tuple[tuple[str, ...], str]] = {
    "task.name": (tuple(MODELS), ""),
    "trainer.lr_schedule": (("constant", "cosine"), ""),
    "trainer.lr_scaling": (("linear", "sqrt", "none"), ""),
    "trainer.precision": (PRECISIONS, " Set auto for mixed precision where the GPU runs it on tensor cores (bf16 on "
                                      "A100/H100, fp16 with a gradient scaler on V100), fp32 elsewhere."),
    "trainer.save_model": (("best", "last", "both", "none"), " best keeps <job dir>/model_best.pt, none keeps no "
                                                              "weights."),
}
# Integer knobs and their least value: a wrong type or a negative size is refused by name, before training.
_COUNTS = {
    "batch_size": 1, "epochs": 1, "trainer.gpus": 1,
    "seed": 0, "timeout_min": 1, "trainer.threads": 0, "trainer.warmup_epochs": 0, "trainer.checkpoint_every": 1,
    "task.hidden": 1, "task.image_size": 0, "data.n_synthetic": 1,
}


def _check_choices(cfg: Any) -> None:
    for key, (choices, hint) in _CHOICES.items():
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and value not in choices:
            raise ConfigError(f"{key} must be one of {', '.join(choices)}, but got {key}={value!r}.{hint}")


def _check_counts(cfg: Any) -> None:
    for key, least in _COUNTS.items():
        value = OmegaConf.select(cfg, key, default=None)
        if value is None:
            continue  # the key is not in this config (a task without it)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{key} must be an integer >= {least}, but got {key}={value!r}. "
                              f"Set for example {key}={max(least, 1)}.")
    for key, low, high in (("task.dropout", 0.0, 1.0), ("trainer.diverge_ratio", 0.0, math.inf),
                           ("trainer.collective_timeout_min", 1.0, math.inf)):
        value = OmegaConf.select(cfg, key, default=None)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value < high:
            raise ConfigError(f"{key} must be a number in [{low:g}, {high:g}), but got {key}={value!r}.")
