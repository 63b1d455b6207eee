"""A job's directory and a few of its config's values, as a full compose of the job gives them, without one.

The driver of a sweep needs little of each job's config: its directory (`hydra.sweep.subdir`) and the values its
launcher plans with (the GPUs, the time limit). `JobPlans` keeps one working config per choice of config groups,
composed as Hydra composes it with the group overrides alone, and finds from it which keys those values depend on
(through interpolations, read with OmegaConf's own grammar). A job's value override that touches none of them
changes none of them: its values are the working config's, with the job's number and `override_dirname` set in.
A job whose override does touch one has it set in the working config, and undone after. Whatever this cannot be
sure of (an override of a `hydra.` key, a resolver it does not know, a key reached through brackets or a computed
name, an override that adds or deletes a key) leaves the job to the full compose.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from omegaconf import AnyNode, Container, DictConfig, Node, OmegaConf, StringNode, ValueNode, read_write

from hydra_plugins.sweepit._config_reads import CLOCK_RESOLVERS, Doubt, dependencies, node_at, related
from hydra_plugins.sweepit._runner import uses_hydra_resolver

SUBDIR = "hydra.sweep.subdir"
# What Hydra sets per job after the value overrides (`hydra.job.num`, `.id`: the launcher; the dirname: Hydra).
PER_JOB = ("hydra.job.num", "hydra.job.id", "hydra.job.override_dirname")
def selected(config: DictConfig, key: str) -> Any:
    """`OmegaConf.select(config, key)` (None where absent), a container as plain dicts and lists, its interpolations
    left as they are (`hydra.job.env_set` may read what only the job's run sets): the value a planner reads, the
    same from a full compose and from `JobPlans`."""
    value = OmegaConf.select(config, key, default=None)
    return OmegaConf.to_container(value) if isinstance(value, Container) else value


@dataclass
class Working:
    """One choice of config groups' working config, and what the wanted keys depend on in it."""

    config: DictConfig
    deps: set[str] = field(default_factory=set)        # every config path a wanted value reads
    prefixes: set[str] = field(default_factory=set)    # their proper prefixes (an override of a parent touches)
    per_job: dict[str, bool] = field(default_factory=dict)  # wanted key -> whether it changes from job to job
    constant: dict[str, Any] = field(default_factory=dict)  # the values of the other keys
    # Hydra's settings of hydra.job.override_dirname, where a value reads it (kv_sep, item_sep, exclude_keys).
    dirname: tuple[str, str, list[str]] | None = None
    hydra: bool = False     # whether the subdir may call Hydra's `${hydra:}` resolver (job_dir)

    def __post_init__(self) -> None:
        job = self.config.hydra.job  # the nodes set for each job
        self.num, self.id, self.override_dirname = (job._get_node(k) for k in ("num", "id", "override_dirname"))
        # Nodes found by their keys: a job's overrides set values in nodes, never replace them.
        self.nodes: dict[str, tuple[DictConfig, Node, str] | None] = {}

    def node(self, key: str) -> tuple[DictConfig, Node, str] | None:
        """`node_at(self.config, key)`, kept."""
        if key not in self.nodes:
            self.nodes[key] = node_at(self.config, key)
        return self.nodes[key]

    def touches(self, key: str) -> bool:
        """Whether an override of `key` may change a wanted value."""
        if key in self.deps or key in self.prefixes:
            return True
        parts = key.split(".")
        return any(".".join(parts[:i]) in self.deps for i in range(1, len(parts)))


class JobPlans:
    """The working configs of one sweep (one master config), for `SweepitLauncher.plan_job`."""

    def __init__(self, composed: Any, master: DictConfig, max_working: int) -> None:
        self.composed = composed  # ComposedConfigs
        self.master = master
        self.max_working = max_working
        self.working: dict[tuple[Any, ...], Working | None] = {}
        self.trees: dict[str, Any] = {}  # interpolation string -> its parse tree (OmegaConf's parse is costly)

    def plan(self, num: int, overrides: Sequence[str], keys: tuple[str, ...],
             sweep_dir: Path) -> tuple[Path, dict[str, Any]] | None:
        """Job `num`'s directory and the values of `keys`; None where a full compose is needed."""
        split = self.composed.split(self.master, list(overrides))
        if split is None:
            return None
        parsed, is_value = split
        own = len(parsed) - len(overrides)  # the master's hydra overrides come first
        values = [o for o, value in zip(parsed[own:], is_value[own:], strict=True) if value]
        if any(str(o.key_or_group).startswith("hydra") for o in values):
            return None  # Hydra reads some hydra keys after the values (env_copy, the dirname's settings)
        groups = tuple(o.input_line for o, value in zip(parsed[own:], is_value[own:], strict=True) if not value)
        working = self._working(groups, keys)
        if working is None:
            return None
        touching = [o for o in values if working.touches(str(o.key_or_group))]
        try:
            with _Applied(working.config, touching):
                return self._values(working, num, [o for o in parsed[own:] if not o.is_hydra_override()], keys,
                                    sweep_dir, fresh=bool(touching))
        except Exception:  # a doubt, or an error that the full compose raises as Hydra's own
            return None

    def _values(self, working: Working, num: int, app: list[Any], keys: tuple[str, ...], sweep_dir: Path,
                fresh: bool) -> tuple[Path, dict[str, Any]]:
        """The job's number and override_dirname set in the working config (as `numbered` and Hydra set them), then
        its directory and the values of `keys` (those that do not change from job to job kept)."""
        from hydra._internal.config_loader_impl import get_overrides_dirname

        cfg = working.config
        working.num._set_value(num)
        working.id._set_value(num)
        if working.dirname is not None:
            kv_sep, item_sep, exclude_keys = working.dirname
            working.override_dirname._set_value(get_overrides_dirname(
                overrides=app, kv_sep=kv_sep, item_sep=item_sep, exclude_keys=exclude_keys))
        # A cached resolver (`${now:}`) as a fresh compose has it: the master's cache alone (copied again only when
        # a job's values added to it).
        if OmegaConf.get_cache(cfg) != OmegaConf.get_cache(self.master):
            OmegaConf.copy_cache(from_config=self.master, to_config=cfg)
        path = job_dir(cfg, sweep_dir, lambda c: self._select(working, SUBDIR), working.hydra)
        values = {}
        for key in keys:
            if fresh or working.per_job[key]:
                values[key] = self._select(working, key)
            else:
                value = working.constant[key]
                values[key] = copy.deepcopy(value) if isinstance(value, dict | list) else value
        return path, values

    def _select(self, working: Working, key: str) -> Any:
        """`selected(cfg, key)`, a leaf interpolation resolved from the parse tree kept of it (OmegaConf's
        `select` parses it every time) or, for a plain `${key}` or `${resolver:${key},...}`, by OmegaConf's own
        steps without its grammar; anything else by `selected` itself."""
        cfg = working.config
        found = working.node(key)
        if found is None or not isinstance(found[1], ValueNode) or not found[1]._is_interpolation():
            return selected(cfg, key)
        parent, node, last = found
        text = node._value()
        quick = _quick(working, parent, found[1], last, text)
        if quick is not _SLOW:
            return quick
        tree = self.trees.get(text)
        if tree is None:
            from omegaconf.grammar_parser import parse

            tree = self.trees[text] = parse(text)
        resolved = parent._resolve_interpolation_from_parse_tree(
            parent=parent, value=node, key=last, parse_tree=tree, throw_on_resolution_failure=True, memo=set())
        if resolved is None or resolved._is_missing():
            return selected(cfg, key)
        value = resolved._value() if isinstance(resolved, ValueNode) else resolved
        return OmegaConf.to_container(value) if isinstance(value, Container) else value

    def _working(self, groups: tuple[str, ...], keys: tuple[str, ...]) -> Working | None:
        """The working config of this choice of groups and what `keys` depend on in it (None: every job of it is
        composed in full)."""
        index = (groups, keys)
        if index in self.working:
            return self.working[index]
        if len(self.working) >= self.max_working:
            del self.working[next(iter(self.working))]  # the oldest choice
        working: Working | None = None
        try:
            config = self.composed.compose(self.master, list(groups))
            working = Working(config)
            dirname = False
            for key in (SUBDIR, *keys):
                key_deps: set[str] = set()
                clock = dependencies(config, key, key_deps, self.trees)
                working.deps |= key_deps
                working.per_job[key] = clock or any(related(path, key_deps) for path in PER_JOB)
                dirname |= related("hydra.job.override_dirname", key_deps)
            if any(related("hydra.overrides", {path}) for path in working.deps):
                raise Doubt("the job's overrides are read")  # the working config holds the groups' alone
            working.hydra = uses_hydra_resolver(config.hydra.sweep)
            if dirname:
                settings = config.hydra.job.config.override_dirname
                working.dirname = (settings.kv_sep, settings.item_sep, list(settings.exclude_keys))
            working.prefixes = {".".join(p.split(".")[:i]) for p in working.deps for i in range(1, p.count(".") + 1)}
            for key in keys:
                if not working.per_job[key]:
                    working.constant[key] = self._select(working, key)
        except Exception:  # a doubt, or a job that does not compose (the full compose raises Hydra's error)
            working = None
        self.working[index] = working
        return working


_SLOW: Any = object()
_KEY = r"[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*"
_NODE_INTERPOLATION = re.compile(rf"\$\{{({_KEY})\}}")
_RESOLVER_OF_KEYS = re.compile(rf"\$\{{([A-Za-z_][\w.]*):((?:\$\{{{_KEY}\}},)*\$\{{{_KEY}\}})\}}")


def _quick(working: Working, parent: DictConfig, node: ValueNode, last: str, text: str) -> Any:
    """The value of a node (AnyNode or StringNode) whose text is `${key}` or `${resolver:${key},...}` (plain absolute
    keys of present values), computed by OmegaConf's own steps without parsing it: the value at the key, or the
    resolver called on those values; _SLOW for anything else."""
    if not isinstance(node, AnyNode | StringNode):
        return _SLOW
    match = _NODE_INTERPOLATION.fullmatch(text)
    if match is not None:
        value = _plain_value(working, match[1])
    else:
        match = _RESOLVER_OF_KEYS.fullmatch(text)
        if match is None or match[1] in CLOCK_RESOLVERS:
            return _SLOW
        args_str = tuple(match[2].split(","))
        args = tuple(_plain_value(working, arg[2:-1]) for arg in args_str)
        if any(arg is _SLOW for arg in args):
            return _SLOW
        value = parent._evaluate_custom_resolver(key=last, node=node, inter_type=match[1], inter_args=args,
                                                 inter_args_str=args_str)
    if value is _SLOW or value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
        return _SLOW  # (OmegaConf's conversions of these differ by node type: its own steps take them)
    return str(value) if isinstance(node, StringNode) else value


def _plain_value(working: Working, key: str) -> Any:
    """The value at `key` when it is a plain one (not an interpolation, a container or missing), else _SLOW."""
    found = working.node(key)
    if found is None:
        return _SLOW
    node = found[1]
    if not isinstance(node, ValueNode) or node._is_interpolation() or node._is_missing():
        return _SLOW
    return node._value()


def job_dir(config: DictConfig, sweep_dir: Path, subdir: Callable[[DictConfig], Any] | None = None,
            hydra: bool | None = None) -> Path:
    """`hydra.sweep.dir/hydra.sweep.subdir` as Hydra's run_job resolves it (the subdir may use hydra.job.*);
    `sweep_dir` is the sweep's, resolved once (its `${now:}` is cached, so every job's is the same). `subdir`: how
    to select it; `hydra`: whether it may call Hydra's resolver (`uses_hydra_resolver`), where known."""
    from hydra.core.hydra_config import HydraConfig

    select = subdir or (lambda c: OmegaConf.select(c, SUBDIR))
    if not (uses_hydra_resolver(config.hydra.sweep) if hydra is None else hydra):
        return sweep_dir / str(select(config))
    # Hydra's `${hydra:key}` reads `HydraConfig.get()`, the job's hydra node: shown here as the node itself (its
    # set_config copies the whole node, which costs more than composing the job).
    hydra_config = HydraConfig.instance()
    saved = hydra_config.cfg
    hydra_config.cfg = SimpleNamespace(hydra=config._get_node("hydra"))  # type: ignore[assignment]
    try:
        return sweep_dir / str(select(config))
    finally:
        hydra_config.cfg = saved


class _Applied:
    """The job's overrides that touch a wanted value set in the working config, and undone after. Only a plain
    `key=value` of a key the config has as a value (not a container): anything else is a doubt."""

    def __init__(self, cfg: DictConfig, overrides: list[Any]) -> None:
        self.cfg, self.overrides = cfg, overrides
        self.saved: list[tuple[ValueNode, Any]] = []

    def __enter__(self) -> None:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        for o in self.overrides:
            if o.is_add() or o.is_force_add() or o.is_delete() or o.package is not None \
                    or isinstance(o.value(), dict | list):
                raise Doubt(f"{o.input_line}: not a plain value of a key")
            found = node_at(self.cfg, str(o.key_or_group))
            if found is None or not isinstance(found[1], ValueNode):
                raise Doubt(f"{o.input_line}: not a value the config has")
            self.saved.append((found[1], found[1]._value()))
        try:
            ConfigLoaderImpl._apply_overrides_to_config(self.overrides, self.cfg)
        except Exception as e:  # a bad value: the full compose raises Hydra's error
            self.__exit__()
            raise Doubt(str(e)) from e

    def __exit__(self, *exc: object) -> None:
        for node, value in reversed(self.saved):
            with read_write(node):
                node._set_value(value)
        self.saved.clear()
