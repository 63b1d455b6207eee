"""Optuna samplers and pruners from a spec: a `_target_` node with every keyword of the Optuna class, or a short name.

    {"_target_": "optuna.samplers.TPESampler", "seed": 0, "multivariate": False}  # the class and its keywords
    {"name": "random", "seed": 0}                                     # a short name (sweepit's first form)

`resolve` turns either into the first form. A `name` that names another entry of the table than `_target_` does
wins (so `hydra.sweeper.sampler.name=random` still works on the default tpe node): that class is built with
sweepit's defaults for it and those keys of the node that it takes. A null keyword is left out (Optuna's default;
the nodes list the keywords of Optuna 4 and 5 both, and a null one of the other version is dropped). A sampler
whose extra package is missing says which to install.
"""

from __future__ import annotations

import importlib.util
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
SAMPLERS = tuple(SAMPLER_CLASSES)
# sweepit's defaults where they differ from Optuna's (the config groups carry the same values). tpe: multivariate
# models optimizer and lr jointly (the best lr depends on the optimizer); constant_liar counts trials in flight as
# bad, so that parallel asks spread out.
SAMPLER_DEFAULTS: dict[str, dict[str, Any]] = {"tpe": {"multivariate": True, "constant_liar": True}}
# Optuna 4's ExperimentalWarning about them (the user did not set them: sweepit did).
_DEFAULTS_WARNING = ("Argument ``(" + "|".join(sorted({k for d in SAMPLER_DEFAULTS.values() for k in d}))
                     + ")`` is an experimental feature")
# Names of the released hydra-optuna-sweeper that Optuna 4 no longer has.
REMOVED_SAMPLERS = {"motpe": "MOTPESampler was removed in Optuna 4: TPESampler searches several objectives itself; "
                             "use hydra/sweeper/sampler=tpe"}
# Python modules each sampler needs beyond Optuna (module -> pip package).
_NEEDS: dict[str, dict[str, str]] = {
    "cmaes": {"cmaes": "cmaes"},
    "gp": {"scipy": "scipy", "torch": "torch"},
    "qmc": {"scipy": "scipy"},
}
SAMPLER_KEY = "hydra.sweeper.sampler"


def resolve(spec: Mapping[str, Any], classes: Mapping[str, str], defaults: Mapping[str, Mapping[str, Any]],
            key: str, default: str, removed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`{"_target_": ..., keywords}` from a spec by `_target_` or by short `name` (see the module's docstring)."""
    spec = dict(spec)
    name, target = spec.pop("name", None), spec.pop("_target_", None)
    own = next((n for n, t in classes.items() if t == target), None)
    if target is None and name in (None, ""):
        name = default
    if name not in (None, "") and name != own:
        name = str(name)
        if removed and name in removed:
            raise ConfigError(f"{key}.name must name a class of the installed Optuna, but {name!r} does not: "
                              f"{removed[name]}.")
        if name not in classes:
            raise ConfigError(f"{key}.name must be one of {', '.join(classes)}, but got {name!r}; pick one with "
                              f"hydra/sweeper/{key.rsplit('.', 1)[-1]}={default} (its keywords then become settable "
                              f"as {key}.<keyword>), or set {key}.name={default}.")
        cls = locate(classes[name], f"{key}._target_")
        taken = parameters(cls)
        kept = {k: v for k, v in spec.items() if v is not None and (taken is None or k in taken[0])}
        return {"_target_": classes[name], **defaults.get(name, {}), **kept}
    return {"_target_": target, **{k: v for k, v in spec.items() if v is not None}}


def short_name(spec: Mapping[str, Any], classes: Mapping[str, str] = SAMPLER_CLASSES) -> str:
    """The short name of a resolved spec's class (`tpe`), else its `_target_`, for logs and the study record."""
    target = str(spec.get("_target_"))
    return next((n for n, t in classes.items() if t == target), target)


def resolve_sampler(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The sampler spec resolved (`resolve`), refused now when its name is unknown or its package is missing."""
    resolved = resolve(spec, SAMPLER_CLASSES, SAMPLER_DEFAULTS, SAMPLER_KEY, "tpe", REMOVED_SAMPLERS)
    check_sampler(short_name(resolved))
    locate(resolved["_target_"], f"{SAMPLER_KEY}._target_")
    return resolved


def check_sampler(name: str) -> None:
    """Refuse a sampler whose packages are not installed, before any trial starts."""
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
    """The sampler of a resolved spec, seeded with `seed` (a resumed study passes another one); a grid sampler gets
    the space's grid."""
    from optuna.exceptions import ExperimentalWarning

    node = {k: v for k, v in spec.items() if k != "seed"}
    cls = locate(node["_target_"], f"{SAMPLER_KEY}._target_")
    taken = parameters(cls)
    if seed is not None and (taken is None or "seed" in taken[0] or taken[1]):
        node["seed"] = seed
    if is_grid(spec):
        node.update(_target_=_no_stop(cls), search_space=space.grid())
    try:
        with warnings.catch_warnings():
            # A warning about sweepit's own defaults is not the user's to act on, and an app run with
            # `python -W error` must not die of it (it does not on the released plugin, whose defaults are Optuna's).
            warnings.filterwarnings("ignore", _DEFAULTS_WARNING, ExperimentalWarning)
            return instantiate(node, SAMPLER_KEY)
    except ValueError as e:  # Optuna's own checks of its arguments
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"{SAMPLER_KEY} must hold arguments {spec['_target_']} accepts, but it refused "
                          f"{ {k: v for k, v in node.items() if k not in ('_target_', 'search_space')} }: {e}") from e


def grid_size(space: SearchSpace) -> int:
    n = 1
    for values in space.grid().values():
        n *= len(values)
    return n


def _no_stop(cls: Any) -> Any:
    """Optuna's grid sampler calls `study.stop()` when the grid is used up, which only works inside
    `study.optimize`; the sweeper asks and tells itself and stops at the grid's size instead."""

    class GridSampler(cls):
        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            return None

    return GridSampler
