"""Optuna samplers by name, each seedable; a sampler whose extra package is missing says which to install."""

from __future__ import annotations

import importlib.util
from typing import Any

from sweepit.errors import ConfigError
from sweepit.search._space import SearchSpace

SAMPLERS = ("tpe", "random", "cmaes", "gp", "qmc", "grid", "nsgaii")
# Python modules each sampler needs beyond Optuna (module -> pip package).
_NEEDS: dict[str, dict[str, str]] = {
    "cmaes": {"cmaes": "cmaes"},
    "gp": {"scipy": "scipy", "torch": "torch"},
    "qmc": {"scipy": "scipy"},
}


def check_sampler(name: str) -> None:
    """Refuse an unknown sampler, or one whose packages are not installed, before any trial starts."""
    if name not in SAMPLERS:
        raise ConfigError(f"hydra.sweeper.sampler.name must be one of {', '.join(SAMPLERS)}, but got {name!r}; "
                          "set for example hydra.sweeper.sampler.name=tpe.")
    missing = [pkg for module, pkg in _NEEDS.get(name, {}).items() if importlib.util.find_spec(module) is None]
    if missing:
        raise ConfigError(f"the {name} sampler needs the Python package(s) {', '.join(missing)}, which are not "
                          f"installed; run `pip install {' '.join(missing)}`, or pick another sampler "
                          "(hydra.sweeper.sampler.name=tpe).")


def build_sampler(name: str, seed: int | None, space: SearchSpace, n_startup_trials: int = 10,
                  population_size: int = 50) -> Any:
    import optuna

    check_sampler(name)
    s = optuna.samplers
    if name == "tpe":
        # multivariate: models optimizer and lr jointly (the best lr depends on the optimizer);
        # constant_liar: trials in flight count as bad, so parallel asks spread out.
        return s.TPESampler(seed=seed, n_startup_trials=n_startup_trials, multivariate=True, constant_liar=True)
    if name == "random":
        return s.RandomSampler(seed=seed)
    if name == "cmaes":
        return s.CmaEsSampler(seed=seed, n_startup_trials=n_startup_trials)
    if name == "gp":
        return s.GPSampler(seed=seed, n_startup_trials=n_startup_trials)
    if name == "qmc":
        return s.QMCSampler(seed=seed)
    if name == "nsgaii":
        return s.NSGAIISampler(seed=seed, population_size=population_size)
    return _grid_sampler(space.grid(), seed)


def grid_size(space: SearchSpace) -> int:
    n = 1
    for values in space.grid().values():
        n *= len(values)
    return n


def _grid_sampler(grid: dict[str, list[Any]], seed: int | None) -> Any:
    import optuna

    class GridSampler(optuna.samplers.GridSampler):
        """Optuna's grid sampler calls `study.stop()` when the grid is used up, which only works inside
        `study.optimize`; the sweeper asks and tells itself and stops at the grid's size instead."""

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            return None

    return GridSampler(grid, seed=seed)
