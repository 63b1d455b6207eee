"""Hydra's job steps at their cost, for `run_forked_job`: what Hydra 1.3's `run_job` makes of a job's config (what
HydraConfig holds, the task's copy, the `.hydra/` files' text), equal to Hydra's own, with less copying and rendering.
`warm_up` does once, in the process that forks the jobs, what each job would otherwise repeat.
`tests/hydra_plugins/test_job_files.py` compares every file with Hydra's own."""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf, flag_override
from omegaconf._utils import get_omega_conf_dumper

from hydra_plugins.sweepit._compose import copy_config, pickled
from sweepit.results import JobPaths

_BLOCK_CACHE_MAX = 256  # blocks kept of each kind of file: the same in every job of a sweep, a few per file
_PARSED_MAX = 1024  # interpolations' parse trees kept, by text: a sweep's configs hold a few dozen


def hydra_view(config: DictConfig) -> DictConfig:
    """What `HydraConfig.set_config(config)` sets, `{"hydra": <config.hydra>}`, the job's hydra node marked read-only
    with `config` as its parent: that node itself, where Hydra deep-copies it (a process of the job's own has no
    other use for the node, and every change to it shows through, as a second `set_config` would show it)."""
    node = config._get_node("hydra")
    assert isinstance(node, DictConfig)
    OmegaConf.set_readonly(node, True)
    view = DictConfig({})
    with flag_override(view, "no_deepcopy_set_nodes", True):
        view["hydra"] = node
    node._set_parent(config)
    return view


def task_config(config: DictConfig) -> DictConfig:
    """The task's copy of `config`, without its hydra node (Hydra's deep copy less the node it deletes): pickled
    without that node, which is put back in its place."""
    content = config.__dict__["_content"]
    items = list(content.items())
    del content["hydra"]
    try:
        return copy_config(config, pickled(config))
    finally:
        content.clear()
        content.update(items)


class YamlBlocks:
    """`OmegaConf.to_yaml(cfg)` of a mapping, from the text of each key's block, each rendered once per distinct value
    and reused: a sweep's jobs share most of their config, and of their hydra node all but a few keys of `job`,
    `runtime` and `overrides`. In YAML's block style a mapping's text is its key lines, each followed by its value's
    text, which for a mapping is again its keys' blocks, at every depth. Values are compared with their types (True, 1
    and 1.0 are equal in Python, not in YAML)."""

    def __init__(self, depth: int = 3) -> None:
        self.depth = depth  # mappings nested deeper than this are rendered whole
        self.learnt = False  # rendered whole until `learn`: blocks cost more than the whole when none is reused
        self._blocks: dict[tuple[str, ...], list[tuple[Any, str]]] = {}
        self._heads: dict[tuple[str, ...], str] = {}

    def learn(self, cfg: DictConfig | ListConfig) -> str:
        """`to_yaml(cfg)`, whose blocks later calls reuse (the sweep's config, in the process that forks its jobs)."""
        self.learnt = True
        return self.to_yaml(cfg)

    def to_yaml(self, cfg: DictConfig | ListConfig) -> str:
        container = OmegaConf.to_container(cfg, enum_to_str=True)
        if not self.learnt or not isinstance(container, dict) or not container:
            return _dump(container)
        try:
            return self._text((), container)
        except _Irregular:  # a key YAML writes on more than one line: the whole, at once
            return _dump(container)

    def _text(self, path: tuple[Any, ...], mapping: dict[Any, Any]) -> str:
        parts = []
        for key, value in mapping.items():
            inner = (*path, key)
            if isinstance(value, dict) and value and len(inner) < self.depth:
                parts.append(self._head(inner) + self._text(inner, value))
            else:
                parts.append(self._block(inner, value))
        return "".join(parts)

    def _head(self, path: tuple[Any, ...]) -> str:
        """The line of the last key of `path` whose value is a mapping."""
        known = _tag(path)
        head = self._heads.get(known)
        if head is None:
            head = self._heads[known] = _lines(path, {0: 0})[0]
        return head

    def _block(self, path: tuple[Any, ...], value: Any) -> str:
        seen = self._blocks.setdefault(_tag(path), [])
        for known, text in seen:
            if _same(known, value):
                return text
        text = "".join(_lines(path, value))
        if len(seen) < _BLOCK_CACHE_MAX:
            seen.append((value, text))
        return text


def _tag(path: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple(f"{type(key).__name__}:{key}" for key in path)


def _lines(path: tuple[Any, ...], value: Any) -> list[str]:
    """The lines of the last key of `path` and of its `value`, as they are in the text of the whole: the text of
    `{path[0]: {path[1]: ... value}}` without the lines of the keys above."""
    for key in reversed(path):
        value = {key: value}
    lines = _dump(value).splitlines(keepends=True)
    if len(lines) < len(path) or not all(line.endswith(":\n") for line in lines[:len(path) - 1]):
        raise _Irregular
    return lines[len(path) - 1:]


class _Irregular(Exception):
    """A block's text is not its key's line and its value's lines."""


def _dump(container: Any) -> str:
    """OmegaConf.to_yaml's rendering of a container."""
    return yaml.dump(container, default_flow_style=False, allow_unicode=True, sort_keys=False,
                     Dumper=get_omega_conf_dumper())


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types throughout (keys in the same order): rendered the same."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and all(ka == kb and type(ka) is type(kb) and _same(va, vb)
                                        for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True))
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


# The `.hydra/` files' blocks, by file name.
SAVED = {f.name: YamlBlocks() for f in (JobPaths.config, JobPaths.hydra_config, JobPaths.overrides)}


def warm_up(config: DictConfig | None = None) -> None:
    """Once, in the process that forks jobs (the driver, a packed worker, a fork server), before the first fork: the
    modules a job's Hydra steps import, the parse of every interpolation in `config` (the sweep's: its jobs resolve
    the same ones, its directory's and its log file's among them), and the `.hydra/` files' blocks of `config`."""
    # Hydra's configure_log imports it at the first job (hydra-core 1.3.2, the declared floor, has none).
    with contextlib.suppress(ImportError):
        import hydra._internal.logging_config  # noqa: F401

    parse_once()
    if config is None or "hydra" not in config:
        return
    _parse_all(config)
    SAVED[JobPaths.hydra_config.name].learn(OmegaConf.masked_copy(config, "hydra"))
    SAVED[JobPaths.config.name].learn(task_config(config))


def parse_once() -> None:
    """OmegaConf parses an interpolation's text (with ANTLR, slowly) each time it resolves it: its parse trees,
    kept here by text, serve every later resolution, in this process and in those it forks. OmegaConf itself reuses
    a tree while it parses others (a nested interpolation), so a tree stays valid."""
    import omegaconf.base

    if not hasattr(omegaconf.base.parse, "cache_info"):
        omegaconf.base.parse = functools.lru_cache(maxsize=_PARSED_MAX)(omegaconf.base.parse)


def _parse_all(node: Any) -> None:
    """Parse each interpolation under `node` (none is resolved)."""
    import omegaconf.base

    if isinstance(node, DictConfig | ListConfig) and not (node._is_none() or node._is_missing()
                                                           or node._is_interpolation()):
        for key in node.keys() if isinstance(node, DictConfig) else range(len(node)):
            _parse_all(node._get_node(key))  # type: ignore[arg-type]
        return
    raw = node._value()
    if isinstance(raw, str) and "${" in raw:
        with contextlib.suppress(Exception):  # a text OmegaConf refuses is refused again where it is resolved
            omegaconf.base.parse(raw)
