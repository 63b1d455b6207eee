"""Optuna samplers and pruners from a spec: a `_target_` node with keywords of the Optuna class. A null keyword is left
out (the nodes list the keywords of Optuna 4 and 5 both); a spec without `_target_` is the default class."""

from __future__ import annotations

import importlib.util
import math
import warnings
from collections.abc import Mapping
from typing import Any

from sweepit._targets import instantiate, locate, parameters
from sweepit.errors import ConfigError
from sweepit.search._space import SearchSpace

# Short name -> Optuna class. The Hydra plugin's config groups (hydra/sweeper/sampler=<name>) use the same names.
SAMPLER_CLASSES = {
    "tpe": "optuna.samplers.TPESampler", "random": "optuna.samplers.RandomSampler",
    "cmaes": "optuna.samplers.CmaEsSampler", "gp": "optuna.samplers.GPSampler", "qmc": "optuna.samplers.QMCSampler",
    "grid": "optuna.samplers.GridSampler", "nsgaii": "optuna.samplers.NSGAIISampler",
    "nsgaiii": "optuna.samplers.NSGAIIISampler",
}
# sweepit's defaults where they differ from Optuna's (the config groups carry the same values). tpe: multivariate
# models optimizer and lr jointly (the best lr depends on the optimizer); constant_liar counts trials in flight as
# bad, so that parallel asks spread out.
SAMPLER_DEFAULTS: dict[str, dict[str, Any]] = {"tpe": {"multivariate": True, "constant_liar": True}}
# Optuna 4's ExperimentalWarning about them (the user did not set them: sweepit did).
_DEFAULTS_WARNING = ("Argument ``(" + "|".join(sorted({k for d in SAMPLER_DEFAULTS.values() for k in d}))
                     + ")`` is an experimental feature")
# Samplers of the released hydra-optuna-sweeper that Optuna 4 no longer has.
REMOVED_SAMPLERS = {"optuna.samplers.MOTPESampler": "MOTPESampler was removed in Optuna 4: TPESampler searches several "
                                                    "objectives itself; use hydra/sweeper/sampler=tpe"}
# Python modules each sampler needs beyond Optuna (module -> pip package).
_NEEDS: dict[str, dict[str, str]] = {
    "cmaes": {"cmaes": "cmaes"},
    "gp": {"scipy": "scipy", "torch": "torch"},
    "qmc": {"scipy": "scipy"},
}
SAMPLER_KEY = "hydra.sweeper.sampler"


def resolve(spec: Mapping[str, Any], classes: Mapping[str, str], default: str,
            defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    kept = {k: v for k, v in spec.items() if v is not None}
    if "_target_" not in kept:
        return {"_target_": classes[default], **(defaults or {}), **kept}
    return kept


def short_name(spec: Mapping[str, Any], classes: Mapping[str, str] = SAMPLER_CLASSES) -> str:
    """The short name of a resolved spec's class (`tpe`), else its `_target_`, for logs."""
    target = str(spec.get("_target_"))
    return next((n for n, t in classes.items() if t == target), target)


def resolve_sampler(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The sampler spec resolved (`resolve`), refused now when its name is unknown or its package is missing."""
    resolved = resolve(spec, SAMPLER_CLASSES, "tpe", SAMPLER_DEFAULTS["tpe"])
    if resolved["_target_"] in REMOVED_SAMPLERS:
        raise ConfigError(f"{SAMPLER_KEY}._target_ must name a class of the installed Optuna, but "
                          f"{resolved['_target_']} is not one: {REMOVED_SAMPLERS[resolved['_target_']]}.")
    check_sampler(short_name(resolved))
    locate(resolved["_target_"], f"{SAMPLER_KEY}._target_")
    return resolved


def check_sampler(name: str) -> None:
    missing = [pkg for module, pkg in _NEEDS.get(name, {}).items() if importlib.util.find_spec(module) is None]
    if missing:
        raise ConfigError(f"the {name} sampler needs the Python package(s) {', '.join(missing)}, which are not "
                          f"installed; run `pip install {' '.join(missing)}`, or pick another sampler "
                          "(hydra/sweeper/sampler=tpe).")


def is_grid(spec: Mapping[str, Any]) -> bool:
    import optuna

    cls = locate(spec.get("_target_"), f"{SAMPLER_KEY}._target_")
    return isinstance(cls, type) and issubclass(cls, optuna.samplers.GridSampler)


def build_sampler(spec: Mapping[str, Any], seed: int | None, space: SearchSpace) -> Any:
    """The sampler of a resolved spec, seeded with `seed`; a grid sampler gets the space's grid."""
    from optuna.exceptions import ExperimentalWarning

    node = {k: v for k, v in spec.items() if k != "seed"}
    cls = locate(node["_target_"], f"{SAMPLER_KEY}._target_")
    taken = parameters(cls)
    if seed is not None and (taken is None or "seed" in taken[0] or taken[1]):
        node["seed"] = seed
    if is_grid(spec):
        node.update(_target_=_no_stop(cls), search_space=space.grid())
    with warnings.catch_warnings():
        # A warning about sweepit's own defaults is not the user's to act on, and an app run with
        # `python -W error` must not die of it (it does not on the released plugin, whose defaults are Optuna's).
        warnings.filterwarnings("ignore", _DEFAULTS_WARNING, ExperimentalWarning)
        return build(node, SAMPLER_KEY, spec["_target_"])


def build(node: Mapping[str, Any], key: str, target: str) -> Any:
    """The Optuna object of a node; Optuna's own checks of its arguments (ValueError) as a ConfigError naming them."""
    try:
        return instantiate(node, key)
    except ConfigError:
        raise
    except ValueError as e:
        shown = {k: v for k, v in node.items() if k not in ("_target_", "search_space")}
        raise ConfigError(f"{key} must hold arguments {target} accepts, but it refused {shown}: {e}") from e


def grid_size(space: SearchSpace) -> int:
    return math.prod(len(values) for values in space.grid().values())


def _no_stop(cls: Any) -> Any:
    """Optuna's grid sampler calls `study.stop()` when the grid is used up, which only works inside
    `study.optimize`; the sweeper asks and tells itself and stops at the grid's size instead."""

    class GridSampler(cls):
        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            return None

    return GridSampler
