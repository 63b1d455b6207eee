"""The model, data, loss and optimizer of a job, from a built-in name or any `_target_` (Hydra's instantiate
convention, docs/own-code.md); a mistake is one ConfigError that names the key, the value and what is expected."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

from sweepit._targets import instantiate, plain, target_node
from sweepit.errors import ConfigError

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # an nn.Module loss, or a plain function
# Keys of the data node that are sweepit's, never arguments of a data callable.
DATA_KEYS = ("_target_", "loader", "val_fraction", "stratified", "augment")
# The built-in models by `task.model`: (target, the task keys passed to it).
BUILTIN_MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "linear": ("sweepit.train.models.linear", ()),
    "softmax": ("sweepit.train.models.softmax", ()),
    "mlp": ("sweepit.train.models.mlp", ("hidden", "dropout")),
    "cnn": ("sweepit.train.models.cnn", ("hidden", "dropout")),
    "resnet18": ("sweepit.train.models.resnet18", ("image_size",)),
    "resnet50": ("sweepit.train.models.resnet50", ("image_size",)),
}


def model_node(cfg: Any) -> dict[str, Any]:
    """`model` when it has a `_target_`, else the built-in named by `task.model` (check_config made sure it is one)
    with its task arguments."""
    return target_node(cfg, "model") or builtin_node(str(cfg.task.model), plain(cfg.task))


def builtin_node(name: str, task: Mapping[str, Any]) -> dict[str, Any]:
    target, keys = BUILTIN_MODELS[name]
    defaults = {"hidden": 128, "dropout": 0.0, "image_size": 32}
    return {"_target_": target, **{k: task.get(k, defaults[k]) for k in keys}}


def build_model(cfg: Any, input_shape: tuple[int, ...], n_outputs: int) -> nn.Module:
    node = model_node(cfg)
    model = instantiate(node, "model", fill={"input_shape": input_shape, "n_outputs": n_outputs})
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model._target_ must build a torch.nn.Module, but {node['_target_']} returned a "
                          f"{type(model).__name__}. Return the network itself (an nn.Module subclass instance).")
    return model


def build_loss(cfg: Any, regression: bool) -> Loss:
    """The loss: `loss._target_` when set, else cross-entropy for class labels and mean squared error otherwise."""
    node = target_node(cfg, "loss")
    if node is not None:
        loss = instantiate(node, "loss")
        if not callable(loss):
            raise ConfigError(f"loss._target_ must build a loss (an nn.Module or a function of (output, target)), "
                              f"but {node['_target_']} returned a {type(loss).__name__}.")
        return loss
    return nn.MSELoss() if regression else nn.CrossEntropyLoss()


@torch.no_grad()
def check_output(model: nn.Module, x: torch.Tensor, y: torch.Tensor, n_outputs: int, regression: bool,
                 cfg: Any) -> None:
    """One forward pass in eval mode (no randomness drawn) on a few samples: the output must fit the labels."""
    name = f"model._target_={model_node(cfg)['_target_']}"
    was_training = model.training
    model.eval()
    try:
        out = model(x)
    except Exception as e:
        raise ConfigError(f"the model must take the data's inputs, but {name} raised "
                          f"{type(e).__name__}: {e} on a batch of shape {tuple(x.shape)}. Fix the model's input "
                          "layer (sweepit passes input_shape= to a model whose constructor takes it).") from e
    finally:
        model.train(was_training)
    expected = (len(x), n_outputs) if not regression else tuple(y.shape)
    fits = tuple(out.shape) == expected or (regression and out.numel() == y.numel())
    if not isinstance(out, torch.Tensor) or not fits:
        what = f"{n_outputs} classes of the data" if not regression else "the regression targets"
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ConfigError(f"the model's output must have shape {expected} (batch, one value per output) for the "
                          f"{what}, but {name} gives {got} on {len(x)} inputs of shape "
                          f"{tuple(x.shape[1:])}. Fix its output layer to {n_outputs} outputs (sweepit passes "
                          "n_outputs= to a model whose constructor takes it).")


def load_data(cfg: Any, device: torch.device) -> Any:
    """The job's data: `data._target_`'s (checked against the contract), else the built-in set `data.name`."""
    from sweepit.train.data import Splits, load_splits, to_device
    from sweepit.train.data.custom import from_user

    node = target_node(cfg, "data")
    if node is None:
        return load_splits(cfg, device)
    seed = int(cfg.seed)
    result = instantiate(node, "data", fill={"seed": seed}, skip=DATA_KEYS)
    data = from_user(result, str(node["_target_"]), float(node.get("val_fraction") or 0.0), seed)
    return to_device(data, device) if isinstance(data, Splits) else data


ALGORITHMS = ("SGD", "Adagrad", "RMSprop", "Adam", "AdamW", "Adamax", "Adadelta", "NAdam")


def build_optimizer(params: Iterable[torch.nn.Parameter], optimizer_cfg: Any, lr: float) -> torch.optim.Optimizer:
    """The `optimizer` config group's torch optimizer at `lr`."""
    algorithm = optimizer_cfg["algorithm"]
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"optimizer.algorithm must be one of {', '.join(ALGORITHMS)}, but got {algorithm!r}.")
    kwargs = dict(optimizer_cfg.get("kwargs") or {})
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    try:
        return getattr(torch.optim, algorithm)(params, lr=lr, **kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"optimizer {optimizer_cfg['name']} rejects its settings {kwargs}: {e}") from e
