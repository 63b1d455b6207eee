"""Keeps the job configs that Hydra's sweeper composes to validate a batch, so the launcher need not compose
each one again (about 0.1 s of CPU per job, the largest per-job cost a short job has in the driver).

Hydra's sweepers call `hydra_context.config_loader.load_sweep_config` for every job of a batch before
`launch()`, then drop the result; the local launcher composes the very same config in the same process.
The launcher puts this wrapper in place of the shared context's loader at `setup()`; everything but
`load_sweep_config` is passed through untouched.

Composing itself is made cheaper too: Hydra reads and parses every config file again for each job (about
half of a compose's 0.07 s here). `LoadedConfigs` keeps each file as loaded, keyed by the search path it
came from, and hands out deep copies (Hydra edits what it loads), so a sweep reads each file once.
"""

from __future__ import annotations

import copy
from typing import Any

from omegaconf import DictConfig

MAX_KEPT = 256  # configs of about 0.25 MB each: at most ~64 MB; later jobs are composed when they start


class LoadedConfigs:
    """A config repository (Hydra's `IConfigRepository`) that loads each config file once per search path.

    Hydra wraps its repository in a fresh `CachingConfigRepository` for every compose, deep-copying it; the
    copy made by `__deepcopy__` shares the files loaded so far. `load_config` returns a copy of what was
    loaded, because composing changes the loaded results in place."""

    def __init__(self, repository: Any, loaded: dict[tuple[Any, ...], Any] | None = None) -> None:
        self.repository = repository
        self.loaded: dict[tuple[Any, ...], Any] = {} if loaded is None else loaded

    def __deepcopy__(self, memo: dict[int, Any]) -> LoadedConfigs:
        return LoadedConfigs(copy.deepcopy(self.repository, memo), self.loaded)

    def load_config(self, config_path: str) -> Any:
        key = (tuple((s.provider, s.path) for s in self.repository.get_sources()), config_path)
        if key not in self.loaded:
            self.loaded[key] = self.repository.load_config(config_path=config_path)
        return copy.deepcopy(self.loaded[key])

    def __getattr__(self, name: str) -> Any:  # initialize_sources, group_exists, get_group_options, ...
        if name in ("repository", "loaded") or name.startswith("__"):  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.repository, name)


class ComposedConfigs:
    def __init__(self, loader: Any, max_kept: int = MAX_KEPT) -> None:
        self.loader = loader
        self.max_kept = max_kept
        self._kept: dict[tuple[int, tuple[str, ...]], DictConfig] = {}
        # Hydra 1.3's ConfigLoaderImpl keeps its repository in `repository`; any other loader is left as it is.
        repository = getattr(loader, "repository", None)
        if repository is not None and type(repository).__name__ == "ConfigRepository":
            loader.repository = LoadedConfigs(repository)

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
