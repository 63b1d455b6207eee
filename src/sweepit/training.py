"""The training loop: one model, one optimizer, in-memory batches, one metrics row per epoch."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch import nn

from sweepit import checkpoint as ckpt
from sweepit.data import Splits, iterate_batches, load_splits
from sweepit.errors import DivergedError
from sweepit.models import build_model
from sweepit.optim import build_optimizer

# Called after each epoch with (epoch, metrics row); returning True stops training (Optuna pruning).
EpochCallback = Callable[[int, dict[str, Any]], bool]
EVAL_BATCH = 1024  # validation batch: no gradients, so larger than training batches


@dataclass
class Outcome:
    rows: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # derived values printed at start, kept in result.json
    stopped_early: bool = False


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(cfg: Any, on_epoch: EpochCallback | None = None, log: Callable[[str], None] = print,
          checkpoint: Path | None = None,
          on_resume: Callable[[list[dict[str, Any]]], None] | None = None) -> Outcome:
    """Train as `cfg` says. Raises DivergedError when the loss stops being finite.

    With `checkpoint`, the state is saved there every `trainer.checkpoint_every` epochs, and training
    resumes from it when it holds a checkpoint of the same configuration (`on_resume` gets the rows so far).
    """
    device = resolve_device(str(cfg.device))
    if int(cfg.trainer.threads) > 0:
        torch.set_num_threads(int(cfg.trainer.threads))
    torch.manual_seed(int(cfg.seed))
    data = load_splits(cfg, device)
    task = cfg.task
    regression = data.n_classes == 0
    model = build_model(
        task.model, data.input_shape, 1 if regression else data.n_classes,
        hidden=int(task.get("hidden", 128)), dropout=float(task.get("dropout", 0.0)),
        image_size=int(task.get("image_size", 32)),
    ).to(device)
    optimizer = build_optimizer(model.parameters(), cfg.optimizer, float(cfg.lr))
    loss_fn: nn.Module = nn.MSELoss() if regression else nn.CrossEntropyLoss()
    image_size = int(task.get("image_size", 0))
    resize = image_size > 0 and data.x_train.shape[-1] != image_size
    aug = cfg.data.augment
    augment = bool(aug.enabled)
    batch_g = torch.Generator().manual_seed(int(cfg.seed) + 1)
    aug_g = torch.Generator().manual_seed(int(cfg.seed) + 2)

    out = Outcome()
    out.info = {
        "device": str(device),
        "world_size": 1,
        "n_params": sum(p.numel() for p in model.parameters()),
        "batch_size": int(cfg.batch_size),
        "global_batch_size": int(cfg.batch_size),
        "lr": float(cfg.lr),
        "effective_lr": float(cfg.lr),
        "n_train": len(data.x_train),
        "n_val": len(data.x_val),
        "data": data.source,
    }
    i = out.info
    log(f"sweepit: task={task.name} model={task.model} params={i['n_params']:,} device={device} "
        f"world_size=1 batch={i['batch_size']} (global {i['global_batch_size']}) lr={i['lr']:g} "
        f"(effective {i['effective_lr']:g}) optimizer={cfg.optimizer.name}")
    log(f"sweepit: data={data.source}: {i['n_train']:,} train / {i['n_val']:,} val"
        + (" (augmented)" if augment else "") + (" (stratified batches)" if cfg.data.stratified else ""))

    def prepare(xb: torch.Tensor, training: bool) -> torch.Tensor:
        if training and augment:
            from sweepit.data.augment import augment_images

            xb = augment_images(xb, float(aug.rotation_deg), float(aug.shift_frac), float(aug.zoom_frac), aug_g)
        if resize:
            xb = F.interpolate(xb, size=(image_size, image_size), mode="bilinear", align_corners=False)
        return xb

    generators = {"batch": batch_g, "augment": aug_g}
    config_hash = ckpt.fingerprint(_container(cfg))
    first_epoch = 1
    if checkpoint is not None:
        restored = ckpt.load(checkpoint, model=model, optimizer=optimizer, generators=generators,
                             config_hash=config_hash)
        if restored is not None:
            last_epoch, out.rows = restored
            first_epoch = last_epoch + 1
            log(f"sweepit: resumed from {checkpoint} after epoch {last_epoch}")
            if on_resume is not None:
                on_resume(out.rows)
    every = max(1, int(cfg.trainer.get("checkpoint_every", 1)))

    epochs = int(cfg.epochs)
    for epoch in range(first_epoch, epochs + 1):
        model.train()
        _sync(device)
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        correct = torch.zeros((), device=device, dtype=torch.long)
        n = len(data.x_train)
        labels = data.y_train if (cfg.data.stratified and not regression) else None
        for idx in iterate_batches(n, int(cfg.batch_size), batch_g, labels=labels, device=device):
            xb, yb = prepare(data.x_train[idx], True), data.y_train[idx]
            logits = model(xb)
            loss = loss_fn(logits, yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach() * len(idx)
            if not regression:
                correct += (logits.argmax(1) == yb).sum()
        _sync(device)
        epoch_time_s = time.perf_counter() - t0
        train_loss = float(loss_sum) / n
        if not math.isfinite(train_loss):
            raise DivergedError(f"training loss became {train_loss} in epoch {epoch} (lr={float(cfg.lr):g})")
        row: dict[str, Any] = {"epoch": epoch, "train_loss": train_loss}
        if not regression:
            row["train_acc"] = float(correct) / n
        row.update(evaluate(model, data, loss_fn, regression, lambda xb: prepare(xb, False)))
        row["epoch_time_s"] = epoch_time_s
        row["samples_per_s"] = n / epoch_time_s if epoch_time_s > 0 else float("nan")
        if regression:
            lin = model if isinstance(model, nn.Linear) else None
            if lin is not None:
                row["w"], row["b"] = float(lin.weight.detach().flatten()[0]), float(lin.bias.detach().flatten()[0])
        out.rows.append(row)
        if cfg.trainer.log_every_epoch:
            log(epoch_line(row, epochs))
        if checkpoint is not None and (epoch % every == 0 or epoch == epochs):
            ckpt.save(checkpoint, epoch=epoch, rows=out.rows, model=model, optimizer=optimizer,
                      generators=generators, config_hash=config_hash)
        if on_epoch is not None and on_epoch(epoch, row):
            out.stopped_early = True
            break
    return out


def _container(cfg: Any) -> dict[str, Any]:
    if isinstance(cfg, DictConfig):
        container = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(container, dict)
        return {str(k): v for k, v in container.items()}
    return dict(vars(cfg)) if not isinstance(cfg, dict) else cfg


@torch.no_grad()
def evaluate(model: nn.Module, data: Splits, loss_fn: nn.Module, regression: bool,
             prepare: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, float]:
    model.eval()
    loss_sum = torch.zeros((), device=data.x_val.device)
    correct = torch.zeros((), device=data.x_val.device, dtype=torch.long)
    n = len(data.x_val)
    for start in range(0, n, EVAL_BATCH):
        xb, yb = prepare(data.x_val[start : start + EVAL_BATCH]), data.y_val[start : start + EVAL_BATCH]
        out = model(xb)
        loss_sum += loss_fn(out, yb) * len(yb)
        if not regression:
            correct += (out.argmax(1) == yb).sum()
    row = {"val_loss": float(loss_sum) / n}
    if not regression:
        row["val_acc"] = float(correct) / n
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
