"""Shared fixtures: compose the real configs from conf/, shrunk to run in seconds on a CPU."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from sweepit_testing import CONF


@pytest.fixture
def compose_cfg() -> Iterator[Callable[..., DictConfig]]:
    """compose_cfg("task=mnist", ...) returns the job config as `python train.py <overrides>` sees it."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):

        def _compose(*overrides: str) -> DictConfig:
            return compose(config_name="config", overrides=list(overrides))

        yield _compose

