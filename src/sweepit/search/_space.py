"""The search space: one `Param` per searched key (an Optuna distribution) and the overrides every job gets. How the
entries are written (Hydra's override grammar) is read by the Hydra plugin (`hydra_plugins.sweepit._space`)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sweepit.errors import ConfigError


@dataclass
class Param:
    name: str                         # the config key (the Optuna parameter name)
    prefix: str                       # "", "+" or "++": how the override adds the key
    distribution: Any                 # an optuna.distributions.BaseDistribution
    spelled: str                      # the expression as given, for messages
    choices: list[Any] = field(default_factory=list)        # categorical: values Optuna sees
    choice_strings: list[str] = field(default_factory=list)  # ... and how each is written in an override

    @classmethod
    def interval(cls, name: str, prefix: str, spelled: str, low: float, high: float, log: bool = False,
                 integer: bool = False) -> Param:
        """A continuous range [low, high] (integers in it when `integer`), on a log scale when `log`."""
        from optuna.distributions import FloatDistribution, IntDistribution

        if not low < high:
            raise ConfigError(f"an interval must have low < high, but {name}={spelled} has low={low:g}, "
                              f"high={high:g}; swap or widen them.")
        if log and low <= 0:
            raise ConfigError(f"a log-scaled interval must have low > 0, but {name}={spelled} has low={low:g}; "
                              f"start it above 0, e.g. {name}=tag(log, interval(1e-5, {high:g})).")
        with _optuna_checks(name, spelled):
            if integer:
                return cls(name, prefix, IntDistribution(math.ceil(low), math.floor(high), log=log), spelled)
            return cls(name, prefix, FloatDistribution(low, high, log=log), spelled)

    @classmethod
    def steps(cls, name: str, prefix: str, spelled: str, values: Sequence[float], step: float,
              log: bool = False) -> Param:
        """Evenly spaced `values` (a range): ints with that step when all are ints, else floats."""
        from optuna.distributions import FloatDistribution, IntDistribution

        if not values:
            raise ConfigError(f"a range must hold at least one value, but {name}={spelled} is empty; "
                              "check start < stop for a positive step.")
        if log and step != 1:
            raise ConfigError(f"a log-scaled range must have step 1 (Optuna's rule), but {name}={spelled} "
                              f"has step {step}; drop the step or the log tag.")
        with _optuna_checks(name, spelled):
            if all(isinstance(v, int) for v in values) and isinstance(step, int) and step > 0:
                return cls(name, prefix, IntDistribution(int(values[0]), int(values[-1]), log=log, step=step), spelled)
            lo, hi = min(values), max(values)
            dist = FloatDistribution(float(lo), float(hi), log=log, step=None if log else abs(float(step)))
            return cls(name, prefix, dist, spelled)

    @classmethod
    def choice(cls, name: str, prefix: str, spelled: str, values: Sequence[Any], strings: Sequence[str]) -> Param:
        """A categorical: `values` as Optuna stores them, `strings` as each is written in an override."""
        from optuna.distributions import CategoricalDistribution

        if len(set(strings)) != len(strings):
            raise ConfigError(f"choices must differ, but {name}={spelled} repeats a value; list each once.")
        with _optuna_checks(name, spelled):
            return cls(name, prefix, CategoricalDistribution(list(values)), spelled, list(values), list(strings))

    def override(self, value: Any) -> str:
        """`key=value` for the job; categorical values keep the spelling they were given in."""
        if self.choices:
            for choice, text in zip(self.choices, self.choice_strings, strict=True):
                if choice == value and type(choice) is type(value):
                    return f"{self.prefix}{self.name}={text}"
        return f"{self.prefix}{self.name}={spelled(value)}"


@contextmanager
def _optuna_checks(name: str, spelled: str) -> Iterator[None]:
    """Optuna's own checks of a distribution (ValueError) as a ConfigError that names the entry."""
    try:
        yield
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(f"{name}={spelled} is not a valid search space: {e}") from None


@dataclass
class SearchSpace:
    params: list[Param]
    fixed: list[str]                  # overrides every job gets as they are

    @property
    def distributions(self) -> dict[str, Any]:
        return {p.name: p.distribution for p in self.params}

    def overrides(self, values: Mapping[str, Any]) -> list[str]:
        """Fixed overrides, one per searched parameter, then `name=value` for each value drawn outside the space (a
        custom search space's conditional parameters)."""
        names = {p.name for p in self.params}
        extra = [f"{name}={spelled(value)}" for name, value in values.items() if name not in names]
        return [*self.fixed, *(p.override(values[p.name]) for p in self.params), *extra]

    def first_point(self) -> dict[str, Any]:
        """A point of the space, to check before any trial that a job's overrides compose."""
        return {p.name: p.choices[0] if p.choices else p.distribution.low for p in self.params}

    def grid(self) -> dict[str, list[Any]]:
        """Every value of every parameter, for the grid sampler; refuses continuous ones."""
        out: dict[str, list[Any]] = {}
        for p in self.params:
            d = p.distribution
            if p.choices:
                out[p.name] = list(p.choices)
            elif getattr(d, "step", None) is not None and not getattr(d, "log", False):
                n = round((d.high - d.low) / d.step) + 1
                out[p.name] = [d.low + i * d.step for i in range(n)]
            else:
                raise ConfigError(f"the grid sampler needs a discrete space (choice or range), but {p.name}="
                                  f"{p.spelled} is continuous; give it as choice(...) or range(...), or pick "
                                  "another sampler (hydra/sweeper/sampler=tpe).")
        return out

    def describe(self) -> str:
        return ", ".join(f"{p.name}={p.spelled}" for p in self.params) or "(none)"


def spelled(value: Any) -> str:
    """A value as Hydra's override grammar reads it back."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)
