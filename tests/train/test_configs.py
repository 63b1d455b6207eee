"""Every option of every config group composes, builds its model and optimizer, and trains a few steps."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch
from omegaconf import DictConfig

from sweepit.train._batches import Batches
from sweepit.train._build import build_optimizer, load_data
from sweepit.train._checks import MODELS
from sweepit.train._loop import train
from sweepit.train._rank import Rank
from sweepit.train.data import Splits
from sweepit.train.models import build_model
from sweepit_testing import CONF, PACKAGE_CONF, TINY

OPTIMIZERS = sorted(p.stem for p in (CONF / "optimizer").glob("*.yaml"))
TASKS = sorted(p.stem for p in (CONF / "task").glob("*.yaml"))
SWEEPS = sorted(p.stem for p in (CONF.parent / "sweeps").glob("*.yaml"))


def test_groups_hold_what_the_brief_lists() -> None:
    assert sorted(
        ["sgd", "momentum", "nesterov", "adagrad", "rmsprop", "adam", "adamw", "adamax", "adadelta", "nadam"]
    ) == OPTIMIZERS
    assert TASKS == ["cifar10", "custom", "digits", "linreg", "mnist"]


def test_every_yaml_opens_with_its_purpose() -> None:
    for path in [*CONF.rglob("*.yaml"), *PACKAGE_CONF.rglob("*.yaml"), *(CONF.parent / "sweeps").glob("*.yaml")]:
        lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("# @package")]
        assert lines[0].startswith("# ") and len(lines[0]) > 20, f"{path} must open with a one-line purpose"


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_every_optimizer_instantiates_and_steps(compose_cfg: Callable[..., DictConfig], name: str) -> None:
    cfg = compose_cfg(f"optimizer={name}", "lr=0.05")
    assert cfg.optimizer.name == name
    model = torch.nn.Linear(3, 1)
    opt = build_optimizer(model.parameters(), cfg.optimizer, cfg.lr)
    before = model.weight.detach().clone()
    model(torch.ones(4, 3)).sum().backward()
    opt.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
    assert not torch.equal(before, model.weight.detach()), f"{name} did not move the weights"


def test_lr_and_optimizer_sweep_as_typed(compose_cfg: Callable[..., DictConfig]) -> None:
    cfg = compose_cfg("optimizer=sgd", "lr=0.1")
    assert (cfg.optimizer.algorithm, cfg.lr) == ("SGD", 0.1)


def _tiny_task(task: str, model: str) -> list[str]:
    overrides = [f"task={task}", f"task.model={model}", *TINY, "batch_size=16"]
    if task in ("mnist", "cifar10"):
        overrides += ["data.synthetic=true", "data.n_synthetic=40"]
    return overrides


# ResNet-50 takes 16 s: make test-fast leaves it out.
@pytest.mark.parametrize("task,model", [pytest.param(t, m, marks=pytest.mark.slow) if m == "resnet50" else (t, m)
                                        for t in ("linreg", "digits", "mnist", "cifar10") for m in MODELS[t]])
def test_every_task_and_model_trains_a_few_steps(
    compose_cfg: Callable[..., DictConfig], task: str, model: str
) -> None:
    cfg = compose_cfg(*_tiny_task(task, model))
    out = train(cfg, log=lambda _: None)
    (row,) = out.rows
    assert row["epoch"] == 1 and row["train_loss"] > 0
    assert row["samples_per_s"] > 0 and row["epoch_time_s"] > 0
    if task != "linreg":
        assert 0.0 <= row["val_acc"] <= 1.0
    reference = build_model(model, _shape(task), 1 if task == "linreg" else 10, image_size=32)
    assert out.info["n_params"] == sum(p.numel() for p in reference.parameters())


def _shape(task: str) -> tuple[int, ...]:
    return {"linreg": (1,), "digits": (1, 8, 8), "mnist": (1, 28, 28), "cifar10": (3, 32, 32)}[task]


def _on_meta(data: Splits) -> Splits:
    """The same splits on PyTorch's `meta` device: shapes without storage, which cannot be copied to the host, so a
    batch that comes out on `meta` was never moved off the data's device."""
    fields = ("x_train", "y_train", "x_val", "y_val")
    return dataclasses.replace(data, **{f: getattr(data, f).to("meta") for f in fields})


def test_cifar_resnet_at_128_pixels_resizes_on_device(compose_cfg: Callable[..., DictConfig]) -> None:
    """The data stays 32 px in memory; each batch is resized to 128 px on the data's device, and the ResNet is
    built for 128 px inputs (the ImageNet stem)."""
    cfg = compose_cfg(*_tiny_task("cifar10", "resnet18"), "task.image_size=128", "data.n_synthetic=20")
    data = load_data(cfg, torch.device("cpu"))
    assert data.x_train.shape[1:] == (3, 32, 32)
    batches = Batches(cfg, _on_meta(data), Rank(), torch.device("meta"), channels_last=False)
    for xb, _ in [next(batches.train(1)), next(batches.val())]:
        assert xb.shape[1:] == (3, 128, 128) and xb.device.type == "meta"
    out = train(cfg, log=lambda _: None)
    (row,) = out.rows
    assert row["train_loss"] > 0
    n_params = {size: sum(p.numel() for p in build_model("resnet18", (3, 32, 32), 10, image_size=size).parameters())
                for size in (32, 128)}
    assert n_params[32] != n_params[128] and out.info["n_params"] == n_params[128]


def _class_share_error(batches: Batches, labels: torch.Tensor) -> float:
    """The largest gap, over the full training batches of epoch 1 and the classes, between a batch's count of a
    class and that class's share of the training set times the batch size."""
    shares = torch.bincount(labels).double() / len(labels)
    worst = 0.0
    for _, yb in batches.train(1):
        if len(yb) == batches.batch_size:
            worst = max(worst, (torch.bincount(yb, minlength=len(shares)) - shares * len(yb)).abs().max().item())
    return worst


def test_mnist_cnn_with_augmentation_and_stratified_batches(compose_cfg: Callable[..., DictConfig]) -> None:
    """Augmentation changes the training inputs (not the validation ones, not the order), and every training batch
    carries each class in its share of the set, where shuffled batches miss the shares."""
    task = [*_tiny_task("mnist", "cnn"), "data.n_synthetic=1000", "batch_size=64"]
    cfg = compose_cfg(*task, "data.augment.enabled=true", "data.stratified=true")
    plain = compose_cfg(*task, "data.augment.enabled=false", "data.stratified=true")
    shuffled = compose_cfg(*task, "data.augment.enabled=false", "data.stratified=false")
    data = load_data(cfg, torch.device("cpu"))
    augmented, raw = (Batches(c, data, Rank(), torch.device("cpu"), channels_last=False) for c in (cfg, plain))
    pairs = list(zip(augmented.train(1), raw.train(1), strict=True))
    assert len(pairs) > 5
    for (xa, ya), (xr, yr) in pairs:
        assert torch.equal(ya, yr) and xa.shape == xr.shape  # the same samples, in the same order
        assert not torch.allclose(xa, xr)
    assert all(torch.equal(xa, xr) for (xa, _), (xr, _) in zip(augmented.val(), raw.val(), strict=True))
    assert _class_share_error(augmented, data.y_train) <= 2.0
    assert _class_share_error(Batches(shuffled, data, Rank(), torch.device("cpu"), False), data.y_train) > 4.0
    (row,) = train(cfg, log=lambda _: None).rows
    assert 0.0 <= row["train_acc"] <= 1.0


@pytest.mark.parametrize("study", SWEEPS)
def test_every_study_composes(study: str) -> None:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF.parent / "sweeps"), version_base="1.3"):
        # train.py's config_path (conf/) plus --config-dir sweeps, as `make sweep-<study>` runs it
        cfg = compose(config_name=study, return_hydra_config=True,
                      overrides=[f"hydra.searchpath=[file://{CONF}]"])
    assert cfg.study == study
    assert cfg.hydra.sweeper.params, f"sweeps/{study}.yaml must sweep something"
    second_line = (CONF.parent / "sweeps" / f"{study}.yaml").read_text().splitlines()[1]
    assert second_line.startswith("# Run: python train.py -m")
