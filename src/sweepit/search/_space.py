"""The search space, read from Hydra's override grammar into Optuna distributions.

    choice(a,b,c) or a,b,c    -> categorical          range(1,10,2)   -> int (or float) with that step
    interval(0.1, 1)          -> float                tag(log, ...)   -> the same on a log scale
    tag(int, interval(8, 64)) -> int                  a plain value   -> fixed, passed to every job

A malformed entry raises ConfigError that names it, before any trial starts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sweepit.errors import ConfigError

_TAGS = {"log", "int"}
_PRIMITIVE = (str, int, float, bool, type(None))


@dataclass
class Param:
    name: str                         # the config key (the Optuna parameter name)
    prefix: str                       # "", "+" or "++": how the override adds the key
    distribution: Any                 # an optuna.distributions.BaseDistribution
    spelled: str                      # the expression as given, for messages
    choices: list[Any] = field(default_factory=list)        # categorical: values Optuna sees
    choice_strings: list[str] = field(default_factory=list)  # ... and how each is written in an override

    def override(self, value: Any) -> str:
        """`key=value` for the job; categorical values keep the spelling they were given in."""
        if self.choices:
            for choice, text in zip(self.choices, self.choice_strings, strict=True):
                if choice == value and type(choice) is type(value):
                    return f"{self.prefix}{self.name}={text}"
        return f"{self.prefix}{self.name}={_number(value)}"


@dataclass
class SearchSpace:
    params: list[Param]
    fixed: list[str]                  # overrides every job gets as they are

    @property
    def distributions(self) -> dict[str, Any]:
        return {p.name: p.distribution for p in self.params}

    def overrides(self, values: Mapping[str, Any]) -> list[str]:
        """Fixed overrides, then one per searched parameter."""
        return [*self.fixed, *(p.override(values[p.name]) for p in self.params)]

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
                                  "another sampler (hydra.sweeper.sampler.name=tpe).")
        return out

    def describe(self) -> str:
        return ", ".join(f"{p.name}={p.spelled}" for p in self.params) or "(none)"


def _number(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def parse_space(params: Mapping[str, str] | None, arguments: Sequence[str], config_loader: Any = None) -> SearchSpace:
    """`hydra.sweeper.params` entries, then the command-line overrides (which win for the same key)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    lines = [f"{k}={v}" for k, v in (params or {}).items()]
    parser = OverridesParser.create(config_loader=config_loader)
    parsed: dict[str, Any] = {}
    for line in [*lines, *arguments]:
        try:
            override = parser.parse_override(line)
        except HydraException as e:
            raise ConfigError(f"each search-space entry must follow Hydra's override grammar (choice, range, "
                              f"interval, tag(log, ...)), but {line!r} does not: {str(e).splitlines()[0]}. "
                              "Quote it for the shell, e.g. 'lr=tag(log, interval(1e-4, 1))'.") from None
        parsed[override.key_or_group] = override  # a later entry for the same key replaces the earlier one
    space = SearchSpace(params=[], fixed=[])
    for override in parsed.values():
        if override.is_sweep_override():
            space.params.append(_param(override))
        else:
            space.fixed.append(override.input_line or f"{override.get_key_element()}="
                               f"{override.get_value_element_as_str()}")
    return space


def _param(override: Any) -> Param:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    key = override.get_key_element()
    name, prefix = override.key_or_group, key[: len(key) - len(key.lstrip("+~"))]
    spelled = override.get_value_element_as_str() if override.input_line is None else \
        override.input_line.split("=", 1)[1]
    if "~" in prefix or override.package is not None:
        raise ConfigError(f"a searched parameter must be a plain `key=` or `+key=` override, but got "
                          f"{override.input_line!r}; write it as key=choice(...).")
    sweep = override.value()
    tags = set(getattr(sweep, "tags", set()))
    if tags - _TAGS:
        raise ConfigError(f"search-space tags must be among {sorted(_TAGS)}, but {name}={spelled} has "
                          f"{sorted(tags - _TAGS)}; e.g. {name}=tag(log, interval(1e-4, 1)).")
    log = "log" in tags
    try:
        if override.is_interval_sweep():
            low, high = float(sweep.start), float(sweep.end)
            _check_bounds(name, spelled, low, high, log)
            if "int" in tags:
                dist: Any = IntDistribution(math.ceil(low), math.floor(high), log=log)
            else:
                dist = FloatDistribution(low, high, log=log)
            return Param(name, prefix, dist, spelled)
        if override.is_range_sweep():
            values = list(sweep.range())
            if not values:
                raise ConfigError(f"a range must hold at least one value, but {name}={spelled} is empty; "
                                  "check start < stop for a positive step.")
            step = sweep.step
            if log and step != 1:
                raise ConfigError(f"a log-scaled range must have step 1 (Optuna's rule), but {name}={spelled} "
                                  f"has step {step}; drop the step or the log tag.")
            if all(isinstance(v, int) for v in values) and isinstance(step, int) and step > 0:
                dist = IntDistribution(values[0], values[-1], log=log, step=step)
            else:
                lo, hi = min(values), max(values)
                dist = FloatDistribution(float(lo), float(hi), log=log, step=None if log else abs(float(step)))
            return Param(name, prefix, dist, spelled)
        if override.is_discrete_sweep():  # choice, a,b,c or glob
            if tags:
                raise ConfigError(f"tags apply to interval and range only, but {name}={spelled} tags a choice; "
                                  "drop the tag.")
            raw = list(override.sweep_iterator())
            strings = [override._get_value_element_as_str(v) for v in raw]
            values = [v if isinstance(v, _PRIMITIVE) else s for v, s in zip(raw, strings, strict=True)]
            if not values:
                raise ConfigError(f"a choice must hold at least one value, but {name}={spelled} holds none.")
            if len(set(strings)) != len(strings):
                raise ConfigError(f"choices must differ, but {name}={spelled} repeats a value; list each once.")
            return Param(name, prefix, CategoricalDistribution(values), spelled, values, strings)
    except ValueError as e:  # Optuna's own checks of distributions
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"{name}={spelled} is not a valid search space: {e}") from None
    raise ConfigError(f"{name}={spelled} is a sweep the Optuna sweeper does not know; use choice, range or interval.")


def _check_bounds(name: str, spelled: str, low: float, high: float, log: bool) -> None:
    if not low < high:
        raise ConfigError(f"an interval must have low < high, but {name}={spelled} has low={low:g}, "
                          f"high={high:g}; swap or widen them.")
    if log and low <= 0:
        raise ConfigError(f"a log-scaled interval must have low > 0, but {name}={spelled} has low={low:g}; "
                          f"start it above 0, e.g. {name}=tag(log, interval(1e-5, {high:g})).")
