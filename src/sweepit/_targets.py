"""`_target_` nodes (Hydra's instantiate convention) without Hydra and without torch: the one way sweepit builds what
a config names (models, data, losses, trackers, Optuna samplers and pruners), a mistake being one ConfigError."""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from omegaconf import OmegaConf

from sweepit.errors import ConfigError


def plain(node: Any) -> Any:
    """A config node as plain Python (interpolations resolved)."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def target_node(cfg: Any, key: str) -> dict[str, Any] | None:
    """The config's `key` node (model, data, loss) when it names a `_target_`: the user's own."""
    node = plain(OmegaConf.select(cfg, key, default=None)) if OmegaConf.is_config(cfg) else None
    return node if isinstance(node, dict) and node.get("_target_") else None


def locate(target: Any, key: str) -> Callable[..., Any]:
    """The class or function `target` names (`package.module.Name`); ConfigError when it cannot be imported."""
    if callable(target):
        return target
    if not isinstance(target, str) or "." not in target:
        raise ConfigError(f"{key} must name a class or function by its dotted path (like mypkg.nets.MyNet), but got "
                          f"{key}={target!r}.")
    module_name, _, name = target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(
            f"{key} must name an importable class or function, but {key}={target} cannot be imported: "
            f"{type(e).__name__}: {e}. Check the spelling, and that its package is importable where the job runs "
            "(`pip install -e` it, start the sweep from its folder, or add it to PYTHONPATH).") from None
    found = getattr(module, name, None)
    if not callable(found):
        raise ConfigError(f"{key} must name a class or function, but {module_name} has "
                          f"{'no attribute ' + repr(name) if found is None else repr(name) + ', which is not callable'}"
                          f" ({key}={target}). Check the spelling.")
    return found


def instantiate(node: Mapping[str, Any], key: str, fill: Mapping[str, Any] | None = None,
                skip: tuple[str, ...] = ("_target_",)) -> Any:
    """Call `node["_target_"]` with the node's other keys but `skip` (nested nodes built first, `_args_` positional,
    `_partial_: true` a functools.partial); `fill` adds arguments the callable takes and the node does not give."""
    target = locate(node.get("_target_"), f"{key}._target_")
    args = list(node.get("_args_", []))
    kwargs = {k: _build_nested(v, f"{key}.{k}") for k, v in node.items() if k not in (*skip, "_args_", "_partial_")}
    signature = parameters(target)
    accepted = None if signature is None else signature[0]
    for name, value in (fill or {}).items():
        if name not in kwargs and (accepted is None or name in accepted):
            kwargs[name] = value
    if signature is not None and not signature[1]:  # a callable without **kwargs: name what it does not take
        unknown = sorted(k for k in kwargs if k not in signature[0])
        if unknown:
            raise ConfigError(
                f"{key}._target_={node['_target_']} takes the arguments ({', '.join(sorted(signature[0])) or 'none'}), "
                f"but the {key} node also gives {', '.join(unknown)}. Remove them from {key} (on the command line: "
                f"~{key}.{unknown[0]}), or rename them to the callable's own arguments.")
    if node.get("_partial_"):
        return functools.partial(target, *args, **kwargs)
    try:
        return target(*args, **kwargs)
    except TypeError as e:
        raise ConfigError(f"{key}._target_={node['_target_']} refused the arguments {sorted(kwargs)} from the {key} "
                          f"node: {str(e).rstrip('.')}. Give it the arguments it expects "
                          f"(+{key}.<name>=<value>).") from e


def _build_nested(value: Any, key: str) -> Any:
    if isinstance(value, Mapping) and "_target_" in value:
        return instantiate(value, key)
    if isinstance(value, list):
        return [_build_nested(v, f"{key}[{i}]") for i, v in enumerate(value)]
    return value


def parameters(target: Callable[..., Any]) -> tuple[set[str], bool] | None:
    """The keyword arguments `target` names, and whether it takes **kwargs; None when its signature cannot be
    read (a C extension)."""
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return None
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names, any(p.kind is p.VAR_KEYWORD for p in params)
