"""Keeps the job configs that Hydra's sweeper composes to validate a batch, so the launcher need not compose
each one again (about 0.1 s of CPU per job, the largest per-job cost a short job has in the driver).

Hydra's sweepers call `hydra_context.config_loader.load_sweep_config` for every job of a batch before
`launch()`, then drop the result; the local launcher composes the very same config in the same process.
The launcher puts this wrapper in place of the shared context's loader at `setup()`; everything but
`load_sweep_config` is passed through untouched.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

MAX_KEPT = 256  # configs of about 0.25 MB each: at most ~64 MB; later jobs are composed when they start


class ComposedConfigs:
    def __init__(self, loader: Any, max_kept: int = MAX_KEPT) -> None:
        self.loader = loader
        self.max_kept = max_kept
        self._kept: dict[tuple[int, tuple[str, ...]], DictConfig] = {}

    @classmethod
    def install(cls, hydra_context: Any) -> ComposedConfigs:
        """Put the wrapper in place of the context's loader (once) and return it; launchers call this at setup()."""
        if not isinstance(hydra_context.config_loader, cls):
            hydra_context.config_loader = cls(hydra_context.config_loader)
        loader: ComposedConfigs = hydra_context.config_loader
        return loader

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        config = self.loader.load_sweep_config(master_config, sweep_overrides)
        if len(self._kept) < self.max_kept:
            self._kept[(id(master_config), tuple(sweep_overrides))] = config
        return config

    def take(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        """The config composed earlier for these overrides (handed out once), else a freshly composed one."""
        config = self._kept.pop((id(master_config), tuple(sweep_overrides)), None)
        if config is None:
            config = self.loader.load_sweep_config(master_config, sweep_overrides)
        return config

    def clear(self) -> None:
        self._kept.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
