"""Write the configuration reference (docs/configuration.md) from the plugins' schema dataclasses: every key, its
type, its default and the comment above it in the source. Nothing in that page is kept by hand
(tests/hydra_plugins/test_config_reference.py checks it).

    python scripts/config_reference.py    # or: make config-reference
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

from omegaconf import MISSING

OUT = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


@dataclasses.dataclass
class Key:
    name: str
    type: str
    default: str
    comment: str
    section: str  # the `# -- section --` line above it in the source, or ""


def _comments(cls: type) -> dict[str, tuple[str, str, str]]:
    """{field: (annotation, comment, section)} for the fields a class body declares, from its source: the comment
    lines right above each field, joined, or its trailing comment."""
    lines, _ = inspect.getsourcelines(cls)
    source = textwrap.dedent("".join(lines))
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    text = source.splitlines()
    found: dict[str, tuple[str, str, str]] = {}
    section = ""
    prev_end = body.body[0].lineno - 1 if body.body else 0
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            prev_end = node.end_lineno or node.lineno
            continue
        above: list[str] = []
        for raw in text[prev_end:node.lineno - 1]:
            line = raw.strip()
            if line.startswith("# --"):
                section, above = line.strip("#- ").strip(), []
            elif line.startswith("#"):
                above.append(line[1:].strip())
            elif not line:
                above = []
        own = text[node.lineno - 1]
        trailing = own.split("  # ", 1)[1].strip() if "  # " in own else ""
        if trailing.startswith("type:"):
            trailing = ""
        found[node.target.id] = (ast.unparse(node.annotation), " ".join(above) or trailing, section)
        prev_end = node.end_lineno or node.lineno
    return found


def _yaml(value: Any) -> str:
    if value is MISSING:
        return "(config group)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value else "''"
    return repr(value).replace("'", "")


def keys(schema: type) -> list[Key]:
    """Every key of a schema dataclass (its engine's base class included), in the schema's order."""
    declared: dict[str, tuple[str, str, str]] = {}
    for cls in reversed(schema.__mro__):
        if dataclasses.is_dataclass(cls):
            for name, (annotation, comment, section) in _comments(cls).items():
                old = declared.get(name)
                # An override without a comment of its own keeps its base's words.
                declared[name] = (annotation, comment or (old[1] if old else ""), section or (old[2] if old else ""))
    out = []
    for f in dataclasses.fields(schema):
        if f.metadata.get("omegaconf_ignore") or f.name.startswith("_") or f.name == "defaults":
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = MISSING
        annotation, comment, section = declared[f.name]
        out.append(Key(f.name, annotation, _yaml(default), comment, section))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(rows: list[Key], blank: str = "") -> list[str]:
    lines = ["| key | type | default | what it is |", "|---|---|---|---|"]
    lines += [f"| `{k.name}` | `{_cell(k.type)}` | `{_cell(k.default)}` | {_cell(k.comment or blank)} |" for k in rows]
    return lines


def _group(title: str, prefix: str, how: str, schema: type) -> list[str]:
    lines = [f"## {title}", "", how, ""]
    engine = schema.__mro__[1]  # the engine's option dataclass the schema extends
    for paragraph in (inspect.getdoc(engine) or "").split("\n\n")[1:]:  # the first says what this page is
        lines += [paragraph, ""]
    sections: dict[str, list[Key]] = {}
    for k in keys(schema):
        sections.setdefault(k.section, []).append(k)
    for section, rows in sections.items():
        if section and len(sections) > 1:
            lines += [f"### {prefix}: {section}", ""]
        lines += [*_table(rows), ""]
    return lines


def render() -> str:
    from hydra_plugins.sweepit.config import (
        PRUNER_CONFS,
        SAMPLER_CONFS,
        HalvingSweeperConf,
        LocalLauncherConf,
        OptunaSweeperConf,
        SlurmLauncherConf,
    )
    from sweepit.search._samplers import REMOVED_SAMPLERS

    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `make config-reference` (scripts/config_reference.py) from the schema dataclasses and",
        "     the comments on their fields: edit those, not this page. -->",
        "",
        "Every key of sweepit's launchers and sweeper, with its type, its default and what it does. Set one on the",
        "command line (`hydra.launcher.timeout_min=30`), in your config's `hydra:` node, or in a profile.",
        "",
    ]
    lines += _group("hydra.launcher: local (the default)", "local",
                    "`hydra/launcher=local`: each job in a forked worker process on this machine.", LocalLauncherConf)
    lines += _group("hydra.launcher: Slurm", "Slurm",
                    "`hydra/launcher=slurm` (or a cluster profile: `marenostrum5`, `juwels_booster`, `cte_power`): "
                    "each job a Slurm job. `hydra/launcher=sweepit_slurm`, which `--help` lists beside them, is the "
                    "schema that `slurm` and the profiles extend: the keys below with their defaults, no site's "
                    "values.", SlurmLauncherConf)
    lines += _group("hydra.sweeper: halving", "halving", "`hydra/sweeper=halving`: a grid whose jobs pause at each "
                    "rung, the best 1/eta resumed from their checkpoints ([how-to](howto-halving.md)).",
                    HalvingSweeperConf)
    lines += _group("hydra.sweeper: Optuna", "Optuna", "`hydra/sweeper=optuna`: adaptive search.", OptunaSweeperConf)
    removed: list[str] = []
    for title, group, confs in (("samplers", "sampler", SAMPLER_CONFS), ("pruners", "pruner", PRUNER_CONFS)):
        lines += [f"## hydra.sweeper.{group}: the {title}", "",
                  f"`hydra/sweeper/{group}=<name>`; each holds every keyword of its Optuna class, with Optuna's own "
                  "default (null: Optuna's default), and means what Optuna's documentation of the class says.", ""]
        for name, conf in confs.items():
            target = next((f.default for f in dataclasses.fields(conf) if f.name == "_target_"), "")
            if target in REMOVED_SAMPLERS:  # kept in the group so that choosing it explains; not offered here
                removed.append(f"`{group}={name}` ({REMOVED_SAMPLERS[target]})")
                continue
            lines += [f"### `{group}={name}` ({target})", ""]
            rows = keys(conf)
            lines += (_table(rows, blank="the Optuna keyword") if rows else ["No keywords."]) + [""]
        if removed:
            lines += [f"Not offered: {'; '.join(removed)}.", ""]
            removed = []
    return "\n".join(lines).rstrip() + "\n"


def write_page(out: Path, text: str) -> int:
    """Write a generated page and say where; the other reference scripts write theirs through this too."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out}")
    return 0


def main() -> int:
    return write_page(OUT, render())


if __name__ == "__main__":
    sys.exit(main())
