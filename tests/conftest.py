"""Shared fixtures: compose the real configs from conf/, shrunk to run in seconds on a CPU."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.version import _UNSPECIFIED_, VersionBase
from omegaconf import DictConfig

from sweepit_testing import CONF, tmpfs


@pytest.fixture
def compose_cfg() -> Iterator[Callable[..., DictConfig]]:
    """compose_cfg("task=mnist", ...) returns the job config as `python train.py <overrides>` sees it."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):

        def _compose(*overrides: str) -> DictConfig:
            return compose(config_name="config", overrides=list(overrides))

        yield _compose



@pytest.fixture
def hydra_default_version_base() -> Iterator[None]:
    """Hydra's own launcher suites expect Hydra's default version base (jobs chdir into their output
    directory). A test that composed with version_base="1.3" earlier in the session leaves that in Hydra's
    VersionBase singleton, which `hydra_restore_singletons` then restores as it found it."""
    instance = VersionBase.instance()
    saved = instance.version_base
    instance.version_base = _UNSPECIFIED_  # as in a fresh process
    yield
    instance.version_base = saved


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB file system (tmpfs) to fill up; skipped where mounting is not permitted."""
    with tmpfs(tmp_path / "small", "64k") as mount:
        yield mount
