"""The Optuna sweeper's search space, read from Hydra's override grammar into sweepit's `SearchSpace`
(docs/optuna.md lists the forms). The grammar is Hydra's, so it is read here; the space and its checks are
Hydra-free (`sweepit.search.Param`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from hydra._internal.deprecation_warning import deprecation_warning

from sweepit.errors import ConfigError
from sweepit.search import Param, SearchSpace, spelled

_TAGS = {"log", "int"}
_PRIMITIVE = (str, int, float, bool, type(None))


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
    if override.is_interval_sweep():
        # int(interval(...)), the released plugin's spelling: Hydra's int() cast leaves both ends ints (else floats).
        integer = "int" in tags or (isinstance(sweep.start, int) and isinstance(sweep.end, int))
        return Param.interval(name, prefix, spelled, float(sweep.start), float(sweep.end), log=log, integer=integer)
    if override.is_range_sweep() and sweep.shuffle:  # shuffle(range(...)): its values, as a categorical
        if tags:
            raise ConfigError(f"tags apply to interval and range only, but {name}={spelled} tags a shuffled range; "
                              "drop the tag or the shuffle.")
        values = list(sweep.range())
        return Param.choice(name, prefix, spelled, values, [override._get_value_element_as_str(v) for v in values])
    if override.is_range_sweep():
        return Param.steps(name, prefix, spelled, list(sweep.range()), sweep.step, log=log)
    if override.is_discrete_sweep():  # choice, a,b,c, shuffle(a,b,c) or glob
        if tags:
            raise ConfigError(f"tags apply to interval and range only, but {name}={spelled} tags a choice; "
                              "drop the tag.")
        sweep.shuffle = False  # shuffle(a,b,c): the sampler picks; the choices keep one order (a resume checks it)
        raw = list(override.sweep_iterator())
        strings = [override._get_value_element_as_str(v) for v in raw]
        values = [v if isinstance(v, _PRIMITIVE) else s for v, s in zip(raw, strings, strict=True)]
        return Param.choice(name, prefix, spelled, values, strings)
    raise ConfigError(f"{name}={spelled} is a sweep the Optuna sweeper does not know; use choice, range or interval.")


# The URL and the first lines of the released plugin's own warnings, which users' filters may match.
UPGRADE_URL = "https://hydra.cc/docs/upgrades/1.1_to_1.2/changes_to_sweeper_config/"


def space_params(params: Mapping[str, str] | None, search_space: Mapping[str, Any] | None) -> dict[str, str]:
    """The search space's `hydra.sweeper.params`, as the released plugin reads them (a search space given beside
    them is warned about even when empty, as there); the deprecated `search_space` alone is read as `params`."""
    if search_space is None:
        return dict(params or {})
    if params is not None:
        warnings.warn("Both hydra.sweeper.params and hydra.sweeper.search_space are configured.\nHydra will use "
                      f"hydra.sweeper.params for defining search space.\n{UPGRADE_URL}", UserWarning, stacklevel=2)
        return dict(params)
    read = from_search_space(search_space)
    lines = "\n".join(f"    {k}: {v}" for k, v in read.items())
    deprecation_warning("`hydra.sweeper.search_space` is deprecated and will be removed in the next major release.\n"
                        f"Please configure with `hydra.sweeper.params`.\n{UPGRADE_URL}\n"
                        f"sweepit reads it as these hydra.sweeper.params; write them so instead:\n  params:\n{lines}",
                        stacklevel=2)
    return read


def from_search_space(search_space: Mapping[str, Any]) -> dict[str, str]:
    """The released plugin's deprecated `hydra.sweeper.search_space` (`key: {type: int|float|categorical, low, high,
    log, step, choices}`) as `hydra.sweeper.params` entries."""
    params: dict[str, str] = {}
    for key, spec in search_space.items():
        where = f"hydra.sweeper.search_space.{key}"
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{where} must be a mapping with `type` (int, float or categorical) and its bounds or "
                              f"choices, but got {spec!r}; write it as hydra.sweeper.params.{key}: interval(0, 1).")
        kind, low, high, step = spec.get("type"), spec.get("low"), spec.get("high"), spec.get("step")
        kind = getattr(kind, "name", kind)  # the released plugin's DistributionType enum
        if kind == "categorical":
            choices = spec.get("choices")
            if not isinstance(choices, Sequence) or isinstance(choices, str) or not choices:
                raise ConfigError(f"{where}.choices must be a non-empty list for type categorical, but got "
                                  f"{choices!r}; e.g. choices: [adam, sgd].")
            params[str(key)] = f"choice({','.join(spelled(c) for c in choices)})"
            continue
        if kind not in ("int", "float"):
            raise ConfigError(f"{where}.type must be int, float or categorical, but got {kind!r}; write it as "
                              f"hydra.sweeper.params.{key}: interval(0, 1) (or int(interval(...)), choice(...)).")
        if not isinstance(low, int | float) or not isinstance(high, int | float):
            raise ConfigError(f"{where} must give numbers `low` and `high` for type {kind}, but got low={low!r}, "
                              f"high={high!r}; e.g. low: 0, high: 1.")
        cast = int if kind == "int" else float
        ends = f"{cast(low)!r}, {cast(high)!r}"
        if step is not None and step != (1 if kind == "int" else None):
            stop = cast(high) + (1 if kind == "int" else cast(step) / 2)  # range() leaves its stop out
            params[str(key)] = f"range({cast(low)!r}, {stop!r}, {cast(step)!r})"
        elif kind == "int":
            params[str(key)] = f"tag(log, int(interval({ends})))" if spec.get("log") else f"int(interval({ends}))"
        else:
            params[str(key)] = f"tag(log, interval({ends}))" if spec.get("log") else f"interval({ends})"
    return params


