"""The training loop: one model, one optimizer, one metrics row per epoch, reported through sweepit's own API (the
calls a user's own loop makes). With N ranks each global batch of N x batch_size samples is split into N shards,
DistributedDataParallel averages the gradients and the metrics are summed over ranks."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import sweepit
from sweepit._files import atomic_file
from sweepit.errors import ConfigError, DivergedError
from sweepit.results import JobPaths
from sweepit.train import _checkpoint, _session
from sweepit.train._batches import Batches, epoch_seed
from sweepit.train._build import Loss, build_loss, build_model, build_optimizer, check_output, load_data, target_node
from sweepit.train._checks import check_metric
from sweepit.train._devices import device_for, fast_kernels, make_deterministic, resolve_precision, use_device
from sweepit.train._distributed import (
    COLLECTIVE_TIMEOUT_MIN,
    abandon_process_group,
    destroy_process_group,
    init_process_group,
)
from sweepit.train._rank import SINGLE, Rank

# Called after each epoch with (epoch, metrics row) on rank 0; returning True stops training (benchmarks).
EpochCallback = Callable[[int, dict[str, Any]], bool]
LR_SCALING = {"none": lambda w: 1.0, "linear": float, "sqrt": math.sqrt}


@dataclass
class TrainRun:
    """What one run of the training loop leaves: a metrics row per epoch, the derived values, and whether it stopped
    early (should_stop(), or an epoch callback)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # derived values printed at start, kept in result.json
    stopped_early: bool = False
    paused: bool = False  # at the halving sweeper's rung, its checkpoint saved


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _all_reduce(values: torch.Tensor, world: int, maximum: bool = False) -> torch.Tensor:
    if world > 1:
        dist.all_reduce(values, op=dist.ReduceOp.MAX if maximum else dist.ReduceOp.SUM)
    return values


def train(cfg: Any, on_epoch: EpochCallback | None = None, log: Callable[[str], None] = print,
          rank: Rank = SINGLE, session: _session.Session | None = None) -> TrainRun:
    """Train as `cfg` says, as `rank` of its world. Raises DivergedError when the loss stops being finite. Metrics,
    pruning and checkpoints go through `session`, the job's (without one, a session of no job: nothing is written)."""
    session = session or _session.Session(job_dir=None, config=cfg, rank=rank)
    log = log if rank.is_main else (lambda _: None)
    device = device_for(rank, str(cfg.device))
    use_device(device)  # a job of one rank on cuda:1 too: the DataLoader's pinning thread works on the current GPU
    timeout_min = float(cfg.trainer.get("collective_timeout_min", COLLECTIVE_TIMEOUT_MIN))
    init_process_group(rank, device, timeout_min=timeout_min)
    try:
        run = _train(cfg, on_epoch if rank.is_main else None, log, session, rank, device)
    except BaseException:
        abandon_process_group()  # its peers are stopped by the local supervisor or srun's --kill-on-bad-exit
        raise
    destroy_process_group()
    return run


def _train(cfg: Any, on_epoch: EpochCallback | None, log: Callable[[str], None], session: _session.Session,
           rank: Rank, device: torch.device) -> TrainRun:
    world = rank.world_size
    if int(cfg.trainer.threads) > 0:
        torch.set_num_threads(int(cfg.trainer.threads))
    if bool(cfg.trainer.get("deterministic", False)):
        make_deterministic()
    else:
        fast_kernels(bool(cfg.trainer.get("cudnn_benchmark", False)), bool(cfg.trainer.get("tf32_matmul", False)))
    torch.manual_seed(int(cfg.seed))  # same initial weights on every rank
    data = load_data(cfg, device)
    regression = data.n_classes == 0
    check_metric(cfg, regression, "a job on data with " + ("regression targets" if regression else "class labels"))
    n_outputs = 1 if regression else data.n_classes
    model: nn.Module = build_model(cfg, data.input_shape, n_outputs).to(device)
    requested = str(cfg.trainer.get("precision", "fp32"))
    precision = resolve_precision(requested, device)
    channels_last = bool(cfg.trainer.get("channels_last", False)) and len(data.input_shape) == 3
    if channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    batches = Batches(cfg, data, rank, device, channels_last)
    check_output(model, *batches.sample(), n_outputs, regression, cfg)

    def autocast() -> Any:
        dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        return torch.autocast(device.type, dtype=dtype, enabled=precision != "fp32")

    # float16's narrow range: the loss is scaled up so that small gradients survive, and a step whose gradients
    # overflow is skipped and the scale lowered (PyTorch's AMP). Each rank has its own, fed the same all-reduced
    # gradients, so all skip alike. Disabled, it calls backward() and step() unchanged. torch.amp's came with torch
    # 2.3; torch 2.2 has CUDA's, which fp16 on a GPU needs there.
    grad_scaler = getattr(torch.amp, "GradScaler", None)
    fp16 = precision == "fp16"
    scaler = grad_scaler(device.type, enabled=fp16) if grad_scaler else torch.cuda.amp.GradScaler(enabled=fp16)

    lr = float(cfg.lr)
    scaling = str(cfg.trainer.get("lr_scaling", "linear"))
    effective_lr = lr * LR_SCALING[scaling](world)
    warmup_epochs = int(cfg.trainer.get("warmup_epochs", 0))
    schedule = str(cfg.trainer.get("lr_schedule", "constant"))
    optimizer = build_optimizer(model.parameters(), cfg.optimizer, effective_lr)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    loss_fn = build_loss(cfg, regression)
    batch_size = int(cfg.batch_size)

    out = TrainRun(info={
        "device": str(device), "world_size": world, "n_params": sum(p.numel() for p in model.parameters()),
        "batch_size": batch_size, "global_batch_size": batch_size * world, "lr": lr,
        "lr_scaling": scaling, "effective_lr": effective_lr, "warmup_epochs": warmup_epochs,
        "n_train": data.n_train, "n_val": data.n_val, "data": data.source, "precision": precision,
        "channels_last": channels_last, "model": _model_label(cfg),
    })
    i = out.info
    log(f"sweepit: task={cfg.task.name} model={i['model']} params={i['n_params']:,} device={device} "
        f"world_size={world} batch={batch_size} (global {i['global_batch_size']}) lr={lr:g} "
        f"(effective {effective_lr:g}, {scaling} scaling"
        + (f", {warmup_epochs} warm-up epochs" if warmup_epochs else "") + f") optimizer={cfg.optimizer.name}"
        + {"fp32": "", "auto": f" precision={precision} (auto)"}.get(requested, f" precision={precision}")
        + (" channels_last" if channels_last else ""))
    log(f"sweepit: data={data.source}: {i['n_train']:,} train / {i['n_val']:,} val" + batches.describe())

    checkpointing = bool(cfg.trainer.get("checkpoint", False))
    first_epoch = 1
    initial_loss: float | None = None  # the untrained model's loss (first batch): the divergence yardstick
    diverge_ratio = float(cfg.trainer.get("diverge_ratio", 0) or 0)
    if checkpointing:
        state = _checkpoint.load(session)
        if state is not None:
            _unwrap(model).load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            if state.get("scaler"):  # empty where the run had none (`auto` on a GPU of another kind)
                scaler.load_state_dict(state["scaler"])
            first_epoch = int(state["epoch"]) + 1
            initial_loss = state.get("initial_loss")
            log(f"sweepit: resumed from {session.checkpoint_path} after epoch {state['epoch']}")
    every = max(1, int(cfg.trainer.get("checkpoint_every", 1)))
    save_model = str(cfg.trainer.get("save_model", "best"))  # checked by check_config
    weights_dir = session.job_dir if rank.is_main else None  # rank 0 keeps the weights
    metric, direction = str(cfg.metric), str(cfg.direction)
    steps_per_epoch = batches.steps_per_epoch()

    epochs = int(cfg.epochs)
    for epoch in range(first_epoch, epochs + 1):
        model.train()
        _sync(device)
        t0 = time.perf_counter()
        # loss x samples, correct, samples, and in the first epoch the first batch's loss (the untrained model's)
        sums = torch.zeros(4, device=device, dtype=torch.float64)
        torch.manual_seed(epoch_seed(int(cfg.seed), f"torch/{rank.rank}", epoch))  # dropout: this rank's, this epoch's
        if epoch > warmup_epochs:
            _set_lr(optimizer, effective_lr * schedule_factor(schedule, epoch, epochs, warmup_epochs))
        for step, (xb, yb) in enumerate(batches.train(epoch)):
            if epoch <= warmup_epochs:
                ramp = ((epoch - 1) * steps_per_epoch + step + 1) / (warmup_epochs * steps_per_epoch)
                _set_lr(optimizer, lr + (effective_lr - lr) * min(1.0, ramp))
            with autocast():
                logits = model(xb)
                loss = loss_fn(logits, _fit(yb, logits, regression))
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            sums[0] += loss.detach() * len(yb)
            sums[2] += len(yb)
            if step == 0 and initial_loss is None:
                sums[3] += loss.detach()
            if not regression:
                sums[1] += (logits.argmax(1) == yb).sum()
        _sync(device)
        epoch_time = torch.tensor([time.perf_counter() - t0], device=device, dtype=torch.float64)
        epoch_time_s = float(_all_reduce(epoch_time, world, maximum=True))
        loss_sum, correct, seen, first_losses = (float(v) for v in _all_reduce(sums, world))
        if initial_loss is None:
            initial_loss = first_losses / world
        if seen == 0:
            raise ConfigError(f"an epoch must train on at least one batch, but batch_size={batch_size} x "
                              f"{world} rank(s) left none of the {data.n_train} training samples.")
        train_loss = loss_sum / seen
        if not math.isfinite(train_loss):
            raise DivergedError(f"training loss became {train_loss} in epoch {epoch} (lr={effective_lr:g})")
        if diverge_ratio > 0 and train_loss > diverge_ratio * max(initial_loss, 1.0):
            raise DivergedError(
                f"training loss {train_loss:.4g} in epoch {epoch} is more than trainer.diverge_ratio={diverge_ratio:g} "
                f"times the untrained model's {initial_loss:.4g} (lr={effective_lr:g}); set trainer.diverge_ratio=0 "
                "to treat only NaN and inf as divergence")
        row: dict[str, Any] = {"epoch": epoch, "train_loss": train_loss}
        if not regression:
            row["train_acc"] = correct / seen
        with autocast():
            row.update(evaluate(model, batches, loss_fn, regression, world))
        row["epoch_time_s"] = epoch_time_s
        row["samples_per_s"] = seen / epoch_time_s if epoch_time_s > 0 else float("nan")
        row["step_time_s"] = epoch_time_s / max(1, math.ceil(seen / (batch_size * world)))
        row["lr"] = optimizer.param_groups[0]["lr"]
        lin = _unwrap(model)
        if regression and isinstance(lin, nn.Linear) and lin.weight.numel() == 1:
            row["w"], row["b"] = float(lin.weight.detach().flatten()[0]), float(lin.bias.detach().flatten()[0])
        session.report(row, epoch=epoch)  # the job's rows, those of a resumed run's checkpoint with them
        best_epoch = _session.epoch_facts(session.rows, metric, direction).get("best_epoch")
        if save_model in ("best", "both") and weights_dir is not None and best_epoch == epoch:
            _save_weights(JobPaths(weights_dir).best_weights, model, epoch, metric, row[metric])
        if cfg.trainer.log_every_epoch:
            log(epoch_line(row, epochs))
        at_rung = checkpointing and session.at_rung()  # the halving sweeper pauses the job here
        if checkpointing and (epoch % every == 0 or epoch == epochs or at_rung):
            _checkpoint.save(session, {"epoch": epoch, "model": _unwrap(model).state_dict(),
                                       "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
                                       "initial_loss": initial_loss})
        if at_rung:
            out.paused = True
            break
        if session.should_stop(also=on_epoch is not None and on_epoch(epoch, row)):
            out.stopped_early = True
            break
    out.rows = list(session.rows)
    if save_model in ("last", "both") and weights_dir is not None and out.rows:
        last = out.rows[-1]
        _save_weights(JobPaths(weights_dir).last_weights, model, int(last["epoch"]), metric, last.get(metric))
    return out


def _save_weights(path: Path, model: nn.Module, epoch: int, metric: str, value: Any) -> None:
    """Trained weights are a result (`trainer.save_model`: best, last, both or none; docs/results.md)."""
    state = {k: v.detach().cpu() for k, v in _unwrap(model).state_dict().items()}
    with atomic_file(path, binary=True) as f:
        torch.save({"model": state, "epoch": epoch, "metric": metric, "value": value,
                    "sweepit": sweepit.__version__}, f)


def load_model(cfg: Any, path: Path, data: Any) -> nn.Module:
    """The model of a job's config with the weights `_save_weights` wrote to `path`, on the CPU in eval mode: built
    as the loop builds it, from its `data` (`load_data`'s: the input shape and classes), for `sweepit.load`."""
    model = build_model(cfg, data.input_shape, data.n_classes or 1)  # no classes: a regression's one output
    # The job's own file, written by _save_weights above: tensors and plain values only.
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True)["model"])
    return model.eval()


def _fit(y: torch.Tensor, output: torch.Tensor, regression: bool) -> torch.Tensor:
    """Regression targets shaped as the model's output ((N,) targets for an (N, 1) output)."""
    if regression and y.shape != output.shape and y.numel() == output.numel():
        return y.view_as(output)
    return y


@torch.no_grad()
def evaluate(model: nn.Module, batches: Batches, loss_fn: Loss, regression: bool, world: int) -> dict[str, float]:
    """Loss and accuracy on the validation split, summed over the ranks."""
    model.eval()
    inner = _unwrap(model)
    sums = torch.zeros(3, device=batches.device, dtype=torch.float64)
    for xb, yb in batches.val():
        out = inner(xb)
        sums[0] += loss_fn(out, _fit(yb, out, regression)) * len(yb)
        sums[2] += len(yb)
        if not regression:
            sums[1] += (out.argmax(1) == yb).sum()
    loss_sum, correct, seen = (float(v) for v in _all_reduce(sums, world))
    row = {"val_loss": loss_sum / seen if seen else float("nan")}
    if not regression:
        row["val_acc"] = correct / seen if seen else float("nan")
    return row


def _model_label(cfg: Any) -> str:
    node = target_node(cfg, "model")
    return str(node["_target_"]) if node else str(cfg.task.model)


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
