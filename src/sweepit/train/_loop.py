"""The training loop: one model, one optimizer, in-memory batches, one metrics row per epoch.

With a world of N ranks (sweepit.train._distributed), each global batch of N x batch_size samples is split into
N shards, gradients are averaged by DistributedDataParallel, and the metrics are summed over ranks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch import nn

from sweepit.errors import DivergedError
from sweepit.train import _checkpoint as ckpt
from sweepit.train._distributed import SINGLE, Rank, destroy_process_group, device_for, init_process_group
from sweepit.train._optim import build_optimizer
from sweepit.train.data import Splits, iterate_batches, load_splits
from sweepit.train.models import build_model

# Called after each epoch with (epoch, metrics row); returning True stops training (Optuna pruning).
EpochCallback = Callable[[int, dict[str, Any]], bool]
EVAL_BATCH = 1024  # validation batch: no gradients, so larger than training batches
LR_SCALING = {"none": lambda w: 1.0, "linear": float, "sqrt": math.sqrt}


@dataclass
class Outcome:
    rows: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # derived values printed at start, kept in result.json
    stopped_early: bool = False


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _all_sum(values: torch.Tensor, world: int, op: Any = None) -> torch.Tensor:
    if world > 1:
        dist.all_reduce(values, op=op or dist.ReduceOp.SUM)
    return values


def train(cfg: Any, on_epoch: EpochCallback | None = None, log: Callable[[str], None] = print,
          checkpoint: Path | None = None, on_resume: Callable[[list[dict[str, Any]]], None] | None = None,
          rank: Rank = SINGLE) -> Outcome:
    """Train as `cfg` says, as `rank` of its world. Raises DivergedError when the loss stops being finite.

    With `checkpoint`, rank 0 saves the state there every `trainer.checkpoint_every` epochs, and training
    resumes from it when it holds a checkpoint of the same configuration (`on_resume` gets the rows so far).
    """
    world = rank.world_size
    log = log if rank.is_main else (lambda _: None)
    device = device_for(rank, str(cfg.device))
    init_process_group(rank, device)
    try:
        return _train(cfg, on_epoch if rank.is_main else None, log, checkpoint, on_resume, rank, device, world)
    finally:
        destroy_process_group()


def _train(cfg: Any, on_epoch: EpochCallback | None, log: Callable[[str], None], checkpoint: Path | None,
           on_resume: Callable[[list[dict[str, Any]]], None] | None, rank: Rank, device: torch.device,
           world: int) -> Outcome:
    if int(cfg.trainer.threads) > 0:
        torch.set_num_threads(int(cfg.trainer.threads))
    torch.manual_seed(int(cfg.seed))  # same initial weights on every rank
    data = load_splits(cfg, device)
    task = cfg.task
    regression = data.n_classes == 0
    model: nn.Module = build_model(
        task.model, data.input_shape, 1 if regression else data.n_classes,
        hidden=int(task.get("hidden", 128)), dropout=float(task.get("dropout", 0.0)),
        image_size=int(task.get("image_size", 32)),
    ).to(device)
    precision = str(cfg.trainer.get("precision", "fp32"))
    channels_last = bool(cfg.trainer.get("channels_last", False)) and len(data.input_shape) == 3
    if channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]

    def autocast() -> Any:
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")

    lr = float(cfg.lr)
    scaling = str(cfg.trainer.get("lr_scaling", "linear"))
    effective_lr = lr * LR_SCALING[scaling](world)
    warmup_epochs = int(cfg.trainer.get("warmup_epochs", 0))
    schedule = str(cfg.trainer.get("lr_schedule", "constant"))
    optimizer = build_optimizer(model.parameters(), cfg.optimizer, effective_lr)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    loss_fn: nn.Module = nn.MSELoss() if regression else nn.CrossEntropyLoss()
    image_size = int(task.get("image_size", 0))
    resize = image_size > 0 and data.x_train.shape[-1] != image_size
    aug = cfg.data.augment
    augment = bool(aug.enabled)
    batch_g = torch.Generator().manual_seed(int(cfg.seed) + 1)  # same global order on every rank
    aug_g = torch.Generator().manual_seed(int(cfg.seed) + 2 + 7919 * rank.rank)
    batch_size = int(cfg.batch_size)

    out = Outcome()
    out.info = {
        "device": str(device), "world_size": world, "n_params": sum(p.numel() for p in model.parameters()),
        "batch_size": batch_size, "global_batch_size": batch_size * world, "lr": lr,
        "lr_scaling": scaling, "effective_lr": effective_lr, "warmup_epochs": warmup_epochs,
        "n_train": len(data.x_train), "n_val": len(data.x_val), "data": data.source, "precision": precision,
        "channels_last": channels_last,
    }
    i = out.info
    log(f"sweepit: task={task.name} model={task.model} params={i['n_params']:,} device={device} "
        f"world_size={world} batch={batch_size} (global {i['global_batch_size']}) lr={lr:g} "
        f"(effective {effective_lr:g}, {scaling} scaling"
        + (f", {warmup_epochs} warm-up epochs" if warmup_epochs else "") + f") optimizer={cfg.optimizer.name}"
        + (f" precision={precision}" if precision != "fp32" else "") + (" channels_last" if channels_last else ""))
    log(f"sweepit: data={data.source}: {i['n_train']:,} train / {i['n_val']:,} val"
        + (" (augmented)" if augment else "") + (" (stratified batches)" if cfg.data.stratified else ""))

    def prepare(xb: torch.Tensor, training: bool) -> torch.Tensor:
        if training and augment:
            from sweepit.train.data.augment import augment_images

            xb = augment_images(xb, float(aug.rotation_deg), float(aug.shift_frac), float(aug.zoom_frac), aug_g)
        if resize:
            xb = F.interpolate(xb, size=(image_size, image_size), mode="bilinear", align_corners=False)
        return xb.contiguous(memory_format=torch.channels_last) if channels_last else xb

    generators = {"batch": batch_g, "augment": aug_g}
    config_hash = ckpt.fingerprint(_container(cfg))
    first_epoch = 1
    if checkpoint is not None:
        restored = ckpt.load(checkpoint, model=_unwrap(model), optimizer=optimizer, generators=generators,
                             config_hash=config_hash)
        if restored is not None:
            last_epoch, out.rows = restored
            first_epoch = last_epoch + 1
            log(f"sweepit: resumed from {checkpoint} after epoch {last_epoch}")
            if on_resume is not None and rank.is_main:
                on_resume(out.rows)
    every = max(1, int(cfg.trainer.get("checkpoint_every", 1)))
    n = len(data.x_train)
    steps_per_epoch = max(1, n // (batch_size * world))

    epochs = int(cfg.epochs)
    for epoch in range(first_epoch, epochs + 1):
        model.train()
        _sync(device)
        t0 = time.perf_counter()
        sums = torch.zeros(3, device=device, dtype=torch.float64)  # loss x samples, correct, samples
        labels = data.y_train if (cfg.data.stratified and not regression) else None
        if epoch > warmup_epochs:
            _set_lr(optimizer, effective_lr * schedule_factor(schedule, epoch, epochs, warmup_epochs))
        for step, idx in enumerate(iterate_batches(n, batch_size * world, batch_g, labels=labels, device=device)):
            if len(idx) < world:
                break  # too few samples left to give every rank one
            idx = torch.tensor_split(idx, world)[rank.rank]
            if epoch <= warmup_epochs:
                ramp = ((epoch - 1) * steps_per_epoch + step + 1) / (warmup_epochs * steps_per_epoch)
                _set_lr(optimizer, lr + (effective_lr - lr) * min(1.0, ramp))
            xb, yb = prepare(data.x_train[idx], True), data.y_train[idx]
            with autocast():
                logits = model(xb)
                loss = loss_fn(logits, yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            sums[0] += loss.detach() * len(idx)
            sums[2] += len(idx)
            if not regression:
                sums[1] += (logits.argmax(1) == yb).sum()
        _sync(device)
        epoch_time = torch.tensor([time.perf_counter() - t0], device=device, dtype=torch.float64)
        epoch_time_s = float(_all_sum(epoch_time, world, dist.ReduceOp.MAX if world > 1 else None))
        loss_sum, correct, seen = (float(v) for v in _all_sum(sums, world))
        train_loss = loss_sum / seen
        if not math.isfinite(train_loss):
            raise DivergedError(f"training loss became {train_loss} in epoch {epoch} (lr={effective_lr:g})")
        row: dict[str, Any] = {"epoch": epoch, "train_loss": train_loss}
        if not regression:
            row["train_acc"] = correct / seen
        with autocast():
            row.update(evaluate(model, data, loss_fn, regression, lambda xb: prepare(xb, False), rank))
        row["epoch_time_s"] = epoch_time_s
        row["samples_per_s"] = seen / epoch_time_s if epoch_time_s > 0 else float("nan")
        row["step_time_s"] = epoch_time_s / max(1, math.ceil(seen / (batch_size * world)))
        row["lr"] = optimizer.param_groups[0]["lr"]
        lin = _unwrap(model)
        if regression and isinstance(lin, nn.Linear):
            row["w"], row["b"] = float(lin.weight.detach().flatten()[0]), float(lin.bias.detach().flatten()[0])
        out.rows.append(row)
        if cfg.trainer.log_every_epoch:
            log(epoch_line(row, epochs))
        if checkpoint is not None and rank.is_main and (epoch % every == 0 or epoch == epochs):
            ckpt.save(checkpoint, epoch=epoch, rows=out.rows, model=_unwrap(model), optimizer=optimizer,
                      generators=generators, config_hash=config_hash)
        stop = torch.tensor([float(on_epoch(epoch, row)) if on_epoch is not None else 0.0], device=device)
        if float(_all_sum(stop, world, dist.ReduceOp.MAX if world > 1 else None)) > 0:
            out.stopped_early = True
            break
    return out


def schedule_factor(schedule: str, epoch: int, epochs: int, warmup_epochs: int) -> float:
    """The lr multiplier of an epoch after the warm-up: constant, or cosine decay to 0 over the rest."""
    if schedule == "constant":
        return 1.0
    done = (epoch - 1 - warmup_epochs) / max(1, epochs - warmup_epochs)
    return 0.5 * (1.0 + math.cos(math.pi * done))


def _set_lr(optimizer: torch.optim.Optimizer, value: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = value


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _container(cfg: Any) -> dict[str, Any]:
    if isinstance(cfg, DictConfig):
        container = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(container, dict)
        return {str(k): v for k, v in container.items()}
    return dict(vars(cfg)) if not isinstance(cfg, dict) else cfg


@torch.no_grad()
def evaluate(model: nn.Module, data: Splits, loss_fn: nn.Module, regression: bool,
             prepare: Callable[[torch.Tensor], torch.Tensor], rank: Rank = SINGLE) -> dict[str, float]:
    """Loss and accuracy on the validation split; each rank evaluates every world_size-th sample."""
    model.eval()
    x_val, y_val = data.x_val[rank.rank :: rank.world_size], data.y_val[rank.rank :: rank.world_size]
    sums = torch.zeros(3, device=data.x_val.device, dtype=torch.float64)
    for start in range(0, len(x_val), EVAL_BATCH):
        xb, yb = prepare(x_val[start : start + EVAL_BATCH]), y_val[start : start + EVAL_BATCH]
        out = _unwrap(model)(xb)
        sums[0] += loss_fn(out, yb) * len(yb)
        sums[2] += len(yb)
        if not regression:
            sums[1] += (out.argmax(1) == yb).sum()
    loss_sum, correct, seen = (float(v) for v in _all_sum(sums, rank.world_size))
    row = {"val_loss": loss_sum / seen}
    if not regression:
        row["val_acc"] = correct / seen
    return row


def epoch_line(row: dict[str, Any], epochs: int) -> str:
    """Keras-style: `Epoch 3/5 - 2.1s - loss: 0.1234 - acc: 0.9612 - val_loss: ... - 5,120 samples/s`."""
    parts = [f"Epoch {row['epoch']}/{epochs}", f"{row['epoch_time_s']:.2f}s", f"loss: {row['train_loss']:.4f}"]
    if "train_acc" in row:
        parts.append(f"acc: {row['train_acc']:.4f}")
    parts.append(f"val_loss: {row['val_loss']:.4f}")
    if "val_acc" in row:
        parts.append(f"val_acc: {row['val_acc']:.4f}")
    if "w" in row:
        parts.append(f"W: {row['w']:.4f} b: {row['b']:.4f}")
    parts.append(f"{row['samples_per_s']:,.0f} samples/s")
    return " - ".join(parts)
