"""What a config value reads: the node at a dotted key, and every path its value depends on through interpolations,
found with OmegaConf's own grammar (each interpolation visited, nothing resolved). `Doubt` where this cannot be
sure (a resolver that may read any key, a computed key, a key through a list)."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, Node

# Resolvers whose value is a function of their arguments (and the environment) alone; `now` reads the clock, so a
# value that calls it is computed for each job; a key-reading resolver depends on the key its first argument names.
PURE_RESOLVERS = frozenset({"oc.env", "oc.decode", "oc.create", "sweepit.job_dir"})
CLOCK_RESOLVERS = frozenset({"now"})
KEY_RESOLVERS = {"hydra": "hydra.", "oc.select": "", "oc.dict.keys": "", "oc.dict.values": "", "oc.deprecated": ""}
_PLACEHOLDER = "\x00sweepit-dependency\x00"


class Doubt(Exception):
    """The fast path cannot be sure of a value: the job is composed in full."""


def related(path: str, deps: set[str]) -> bool:
    """Whether `path` is among `deps`, inside one of them, or holds one."""
    return any(d == path or d.startswith(path + ".") or path.startswith(d + ".") for d in deps)


def node_at(cfg: DictConfig, key: str) -> tuple[DictConfig, Node, str] | None:
    """The node at the dotted `key` and its parent, not resolved; None where absent. A key through anything but
    present dicts (a list, an interpolation, a None) is a doubt."""
    parent = cfg
    *path, last = key.split(".")
    for part in path:
        child = parent._get_node(part, validate_access=False)
        if child is None:
            return None
        if not isinstance(child, DictConfig) or child._is_interpolation() or child._is_none() or child._is_missing():
            raise Doubt(f"{key}: reached through something other than a dict")
        parent = child
    node = parent._get_node(last, validate_access=False)
    return None if node is None else (parent, node, last)


def dependencies(cfg: DictConfig, key: str, deps: set[str], trees: dict[str, Any]) -> bool:
    """Add to `deps` every path the value of `key` reads, through interpolations; whether it reads the clock. A
    container's value is its content unresolved (`selected`): the interpolations inside it are not read."""
    if key in deps:
        return False
    deps.add(key)
    if "[" in key or _PLACEHOLDER in key:
        raise Doubt(f"{key}: a computed or bracketed key")
    found = node_at(cfg, key)
    if found is None or not found[1]._is_interpolation():
        return False
    return _interpolation_deps(cfg, key, str(found[1]._value()), deps, trees)


def _interpolation_deps(cfg: DictConfig, path: str, text: str, deps: set[str], trees: dict[str, Any]) -> bool:
    """The paths that the interpolation `text` of the node at `path` reads, added to `deps`; whether it reads the
    clock. Visited with OmegaConf's grammar, each dependency returning a placeholder."""
    from omegaconf.grammar_parser import parse
    from omegaconf.grammar_visitor import GrammarVisitor

    parent = path.rsplit(".", 1)[0] if "." in path else ""
    clock = [False]

    def absolute(inter_key: str) -> str:
        if not inter_key.startswith("."):
            return inter_key
        up = len(inter_key) - len(inter_key.lstrip(".")) - 1
        base = parent.split(".") if parent else []
        if up > len(base):
            raise Doubt(f"{inter_key}: above the root")
        base = base[:len(base) - up]
        return ".".join([*base, inter_key.lstrip(".")]) if base else inter_key.lstrip(".")

    def on_node(inter_key: str, memo: Any) -> Any:
        clock[0] |= dependencies(cfg, absolute(inter_key), deps, trees)
        return _PLACEHOLDER

    def on_resolver(name: str, args: tuple[Any, ...], args_str: tuple[str, ...]) -> str:
        if name in CLOCK_RESOLVERS:
            clock[0] = True
        elif name in KEY_RESOLVERS:
            if not args or not isinstance(args[0], str) or _PLACEHOLDER in args[0]:
                raise Doubt(f"${{{name}:...}} with a computed key")
            key = args[0] if name == "hydra" else absolute(args[0])
            clock[0] |= dependencies(cfg, KEY_RESOLVERS[name] + key, deps, trees)
        elif name not in PURE_RESOLVERS:
            raise Doubt(f"${{{name}:...}}: a resolver that may read any key")
        return _PLACEHOLDER

    tree = trees.get(text)
    if tree is None:
        tree = trees[text] = parse(text)
    GrammarVisitor(node_interpolation_callback=on_node, resolver_interpolation_callback=on_resolver,
                   memo=None).visit(tree)
    return clock[0]
