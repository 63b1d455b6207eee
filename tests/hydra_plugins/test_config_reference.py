"""One schema per engine, and the configuration reference generated from it.

Each plugin's Hydra schema is its engine's option dataclass plus the keys only Hydra has, so a key, its type and its
default exist once; docs/configuration.md is written from those dataclasses and their comments by
`make config-reference`, and the committed page must be what that command writes now."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from hydra_plugins.sweepit.config import (
    PRUNER_CONFS,
    SAMPLER_CONFS,
    HalvingSweeperConf,
    LocalLauncherConf,
    OptunaSweeperConf,
    SlurmLauncherConf,
)
from sweepit.local._local_sweep import LocalOptions
from sweepit.search._halving import HalvingOptions
from sweepit.search._options import SearchOptions
from sweepit.search._samplers import REMOVED_SAMPLERS
from sweepit.slurm._request import SlurmOptions
from sweepit_testing import REPO

PAGE = REPO / "docs" / "configuration.md"
# The keys a schema adds to its engine's options: what only Hydra has.
HYDRA_ONLY = {
    LocalLauncherConf: {"_target_"},
    SlurmLauncherConf: {"_target_"},
    OptunaSweeperConf: {"_target_", "_recursive_", "defaults", "params", "search_space", "custom_search_space"},
    HalvingSweeperConf: {"_target_", "params"},
}
ENGINE = {LocalLauncherConf: LocalOptions, SlurmLauncherConf: SlurmOptions, OptunaSweeperConf: SearchOptions,
          HalvingSweeperConf: HalvingOptions}


@pytest.mark.parametrize("schema", list(ENGINE), ids=lambda s: s.__name__)
def test_each_schema_is_its_engines_options_plus_the_keys_only_hydra_has(schema: type) -> None:
    engine = ENGINE[schema]
    assert issubclass(schema, engine)
    engine_keys = {f.name for f in dataclasses.fields(engine) if f.init}
    # What Hydra composes: the engine's keys (not app_dir, which the launcher sets) and the schema's own.
    composed = set(OmegaConf.structured(schema).keys())
    assert composed == engine_keys | HYDRA_ONLY[schema]


def _page_rows(text: str) -> list[str]:
    return re.findall(r"^\| `([a-z_0-9]+)` \|", text, flags=re.M)


def test_the_page_lists_every_key_of_every_schema_with_what_it_is() -> None:
    text = PAGE.read_text()
    rows = _page_rows(text)
    for schema in ENGINE:
        keys = [k for k in OmegaConf.structured(schema) if not str(k).startswith("_") and k != "defaults"]
        missing = [k for k in keys if k not in rows]
        assert not missing, f"{schema.__name__}: {missing} not in {PAGE.name}"
    for group, confs in (("sampler", SAMPLER_CONFS), ("pruner", PRUNER_CONFS)):
        for name, conf in confs.items():
            if conf._target_ in REMOVED_SAMPLERS:
                continue
            section = text.split(f"### `{group}={name}`", 1)[1].split("\n### ", 1)[0]
            keywords = [f.name for f in dataclasses.fields(conf) if not f.name.startswith("_")]
            assert keywords == _page_rows(section), f"{group}={name}"
    # sweepit's own keys each say what they are (the samplers' and pruners' keywords are Optuna's, documented there).
    launcher_and_sweeper = text[:text.index("## hydra.sweeper.sampler")]
    blank = re.findall(r"^\| `([a-z_0-9]+)` \|[^|]*\|[^|]*\|\s*\|$", launcher_and_sweeper, flags=re.M)
    assert not blank, f"keys without a comment in their dataclass: {blank}"


def test_make_config_reference_writes_the_committed_page(tmp_path: Path) -> None:
    """The README's and `make help`'s command, run as written in a scratch copy: it rewrites the page exactly as
    committed (a key added to a dataclass without running it fails here)."""
    for name in ("Makefile", "scripts", "src"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, tmp_path / name)
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    proc = subprocess.run(["make", "config-reference"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "docs" / "configuration.md").read_text() == PAGE.read_text()


def test_the_pages_send_readers_to_the_reference_not_to_the_schemas_source() -> None:
    """A page that says where every key is described links this generated page, not the dataclasses it is made of."""
    sources = [page.name for page in sorted((REPO / "docs").glob("*.md"))
               if "hydra_plugins/sweepit/config.py" in page.read_text()]
    assert not sources, f"{sources} send readers to src/hydra_plugins/sweepit/config.py; link configuration.md"
    assert "](configuration.md#hydralauncher-slurm)" in (REPO / "docs" / "slurm.md").read_text()


def test_the_reference_offers_no_sampler_optuna_removed_and_optuna_md_agrees() -> None:
    """A sampler the released plugin had and Optuna 4 removed stays choosable (choosing it explains) but is not
    offered: the reference names it under "Not offered" only, and the Optuna how-to lists no such sampler."""
    text = PAGE.read_text()
    for name, conf in SAMPLER_CONFS.items():
        if conf._target_ in REMOVED_SAMPLERS:
            assert f"### `sampler={name}`" not in text and f"Not offered: `sampler={name}`" in text
            assert f"`{name}`" not in (REPO / "docs" / "optuna.md").read_text()


def test_the_gpu_binding_is_said_as_the_request_makes_it() -> None:
    """trainer.gpus=N asks --gpus-per-node, never --gpus-per-task (tests/slurm/test_slurm_launcher_request.py
    holds the request itself): the generated reference, the launcher's yaml and the GPU how-to say so."""
    from sweepit.slurm._place import spread

    request = spread(0, 2, 5, node_gpus=4, max_nodes=1, gpus_key="trainer.gpus")
    assert (request.tasks_per_node, request.gpus_per_node, request.gpus_per_task) == (2, 2, None)
    launcher_yaml = REPO / "src" / "hydra_plugins" / "sweepit" / "conf" / "hydra" / "launcher" / "slurm.yaml"
    for place in (PAGE, launcher_yaml, REPO / "docs" / "gpu.md"):
        assert "one GPU each" not in place.read_text(), place.name
    row = next(line for line in PAGE.read_text().splitlines() if line.startswith("| `gpus_key` | `str \\| None`"))
    assert "--gpus-per-node, not --gpus-per-task" in row and "sees all of its node's GPUs" in row
    assert "each task seeing all of them" in launcher_yaml.read_text()
