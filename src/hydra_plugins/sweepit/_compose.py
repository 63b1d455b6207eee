"""Each job's config, as Hydra's `ConfigLoaderImpl.load_sweep_config` composes it, at a fraction of the cost.

Of Hydra's compose steps only the defaults tree and the merge of the config files depend on which options of the
config groups a job picks, and they take most of the time. `ComposedConfigs` composes them once per such choice (a
"base") and gives each job a copy of its base with the rest of Hydra's steps applied, in Hydra's order and with
Hydra's own functions. An override is a group override by Hydra's rule (`defaults_list.Overrides`): its key names
a config group and its value is not a dict. Jobs this cannot reproduce exactly are composed by Hydra itself: an
override of `hydra.searchpath` or `hydra.runtime.*`, a sweep left in a job's overrides, a loader that is not Hydra
1.3's `ConfigLoaderImpl`, and any error (Hydra then raises its own).
"""

from __future__ import annotations

import copy
import functools
import io
import logging
import os
import pickle
import re
import sys
from dataclasses import dataclass, replace
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)

MAX_KEPT = 256  # configs of about 0.25 MB each: at most ~64 MB; later jobs are composed when they start
MAX_BASES = 64  # distinct choices of config groups kept composed (about 0.25 MB each)
MAX_PARSED = 4096  # parsed override strings kept (an Optuna lr is a new string every trial: bounded, not a leak)
_TEMPLATES: dict[str, Any] = {}  # `key` of a `key=number` -> Hydra's Override of `key=0`
# `key=number`, the number one INT or FLOAT token of Hydra's override grammar (OverrideLexer.g4) without underscores:
# what a sweeper writes for `seed=range(0,N)` or a sampled `lr`, a new string for every job, which Hydra's costly
# parser would parse each time. Such an override is Hydra's parse of `key=0` with the value replaced.
_NUMBER = re.compile(r"(?P<head>(?:\+\+|\+)?[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*)="
                     r"(?P<value>[+-]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")


class LoadedConfigs:
    """A config repository (Hydra's `IConfigRepository`) that loads each config file once per search path. Hydra
    deep-copies its repository for every compose: the copy shares the files loaded so far. `load_config` returns a
    copy, because composing changes the loaded results in place."""

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


# A config composed from a defaults tree, before any value override (Hydra's state right after
# `_compose_config_from_defaults_list` and the struct flag, with the job-independent `hydra.runtime` fields filled
# in), and the same pickled once, for its jobs' copies.
_Base = tuple[DictConfig, "Pickled | None"]


class ComposedConfigs:
    """Hydra's config loader, wrapped: `load_sweep_config` composes a job as Hydra does, and keeps up to MAX_KEPT
    configs for the launcher's `take` (Hydra's sweepers compose every job of a batch before `launch()`)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.max_bases = MAX_BASES
        self._kept: dict[tuple[int, tuple[str, ...]], DictConfig] = {}
        self._bases: dict[tuple[Any, ...], _Base] = {}
        self._group_repos: dict[Any, Any] = {}   # config_name -> the repository that says which groups exist
        self._groups: dict[tuple[Any, str], bool] = {}  # (config_name, override key) -> whether it is a group
        self.n_full = self.n_from_base = 0       # jobs composed by Hydra itself / from a base (for tests, logs)
        self._master: tuple[DictConfig, Any, list[Any]] | None = None  # the last master: config name, parsed overrides
        # Hydra's validation of a batch now under way (its frame), how many of its jobs were seen, and their kinds.
        self._validating: Any = None
        self._n_validated = 0
        self._kinds: set[tuple[str, ...]] = set()
        # Hydra 1.3's ConfigLoaderImpl keeps its repository in `repository`; any other loader is left as it is. A
        # loader that was wrapped before (the driver's, pickled into a Slurm worker) has its LoadedConfigs already.
        repository = getattr(loader, "repository", None)
        wrapped = isinstance(repository, LoadedConfigs)
        self._hydra_loader = wrapped or (repository is not None and type(repository).__name__ == "ConfigRepository")
        if self._hydra_loader and not wrapped:
            loader.repository = LoadedConfigs(repository)

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig | None:
        caller = sys._getframe(1)
        if caller.f_code is _validation_code() and not self._sampled(caller, sweep_overrides):
            return None  # Hydra's validation drops what it gets
        config = self.compose(master_config, sweep_overrides)
        if len(self._kept) < MAX_KEPT:
            self._kept[(id(master_config), tuple(sweep_overrides))] = config
        return config

    def _sampled(self, validation: Any, sweep_overrides: list[str]) -> bool:
        """Whether Hydra's validation of a batch (the frame of `Sweeper.validate_batch_is_legal`) is to compose this
        job: the first of each kind (`kind`), and jobs 0, 1, 2, 4, 8, ... of the batch. The others are composed
        where they run: one whose values compose only for some of their kind fails there, recorded as a failed job."""
        if validation is not self._validating:
            self._validating, self._n_validated, self._kinds = validation, 0, set()
        index = self._n_validated
        self._n_validated += 1
        kind = job_kind(sweep_overrides)
        new = kind not in self._kinds
        self._kinds.add(kind)
        return new or index & (index - 1) == 0

    def take(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        """The config composed earlier for these overrides (handed out once), else a freshly composed one."""
        config = self._kept.pop((id(master_config), tuple(sweep_overrides)), None)
        if config is None:
            config = self.compose(master_config, sweep_overrides)
        return config

    def peek(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        """The config composed earlier for these overrides (kept for `take`), else a freshly composed one (not kept)."""
        config = self._kept.get((id(master_config), tuple(sweep_overrides)))
        return config if config is not None else self.compose(master_config, sweep_overrides)

    def clear(self) -> None:
        """Forget the kept configs (the bases stay: a sweeper's next batch picks the same groups)."""
        self._kept.clear()
        self._validating = None

    def compose(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        """The job's config, equal to `loader.load_sweep_config(master_config, sweep_overrides)`."""
        if self._hydra_loader:
            try:
                config = self._from_base(master_config, list(sweep_overrides))
            except Exception as e:  # Hydra's own compose raises Hydra's own error (or shows the fast path wrong)
                log.debug(f"{sweep_overrides}: composing from a base failed ({type(e).__name__}: {e}); Hydra composes")
                config = None
            if config is not None:
                self.n_from_base += 1
                return config
        self.n_full += 1
        return self.loader.load_sweep_config(master_config, sweep_overrides)

    def _from_base(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig | None:
        """Hydra's `load_sweep_config` with the defaults tree and the merge taken from the job's base; None
        for jobs this does not reproduce exactly."""
        from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
        from hydra.core.utils import JobRuntime

        split = self.split(master_config, sweep_overrides)
        if split is None:
            return None
        parsed, is_value = split
        config_name = master_config.hydra.job.config_name
        groups = [o for o, value in zip(parsed, is_value, strict=True) if not value]
        base = self._base(config_name, groups)
        cfg = copy_config(*base)

        # From here on, Hydra's ConfigLoaderImpl._load_configuration_impl, step by step.
        ConfigLoaderImpl._apply_overrides_to_config([o for o, value in zip(parsed, is_value, strict=True) if value],
                                                    cfg)
        app_overrides = []
        for override in parsed:
            if override.is_hydra_override():
                cfg.hydra.overrides.hydra.append(override.input_line)
            else:
                cfg.hydra.overrides.task.append(override.input_line)
                app_overrides.append(override)
        # The base holds the runtime fields that are the same for all of its jobs (see _base).
        with open_dict(cfg.hydra):
            for key in cfg.hydra.job.env_copy:
                cfg.hydra.job.env_set[key] = os.environ[key]
        cfg.hydra.runtime.cwd = os.getcwd()
        if "name" not in cfg.hydra.job:
            cfg.hydra.job.name = JobRuntime().get("name")
        cfg.hydra.job.override_dirname = get_overrides_dirname(
            overrides=app_overrides,
            kv_sep=cfg.hydra.job.config.override_dirname.kv_sep,
            item_sep=cfg.hydra.job.config.override_dirname.item_sep,
            exclude_keys=cfg.hydra.job.config.override_dirname.exclude_keys,
        )
        cfg.hydra.job.config_name = config_name
        # And load_sweep_config's last step: the master's resolver cache (`${now:}` resolves as it did there).
        OmegaConf.copy_cache(from_config=master_config, to_config=cfg)
        return cfg

    def split(self, master_config: DictConfig, sweep_overrides: list[str]) -> tuple[list[Any], list[bool]] | None:
        """The master's hydra overrides and the job's, parsed, and which of them are value overrides (the others
        choose config groups: the job's base); None for a job that Hydra is to compose itself."""
        if not self._hydra_loader:
            return None
        if self._master is None or self._master[0] is not master_config:
            hydra_overrides = OmegaConf.to_container(master_config.hydra.overrides.hydra)
            assert isinstance(hydra_overrides, list)
            self._master = master_config, master_config.hydra.job.config_name, [parse_override(line)
                                                                                 for line in hydra_overrides]
        config_name = self._master[1]
        parsed = [*self._master[2], *(parse_override(line) for line in sweep_overrides)]
        if any(o.is_sweep_override() or o.get_key_element() == "hydra.searchpath" for o in parsed):
            return None
        if any(str(o.key_or_group).startswith("hydra.runtime") for o in parsed):
            return None  # Hydra fills those in after the job's values; a base has them already
        # Hydra's rule (defaults_list.Overrides): a value override is a dict or names no config group.
        return parsed, [isinstance(o.value(), dict) or not self._is_group(config_name, o.key_or_group) for o in parsed]

    def _is_group(self, config_name: str | None, key: str) -> bool:
        """Whether `key` names a config group (asked of the repository once per key)."""
        found = self._groups.get((config_name, key))
        if found is None:
            found = self._groups[(config_name, key)] = bool(self._group_repo(config_name).group_exists(key))
        return found

    def _group_repo(self, config_name: str | None) -> Any:
        """The repository with the primary config's `hydra.searchpath` in place: which config groups exist."""
        repo = self._group_repos.get(config_name)
        if repo is None:
            from hydra._internal.config_repository import CachingConfigRepository

            self.loader.ensure_main_config_source_available()
            repo = CachingConfigRepository(self.loader.repository)
            self.loader._process_config_searchpath(config_name, [], repo)
            self._group_repos[config_name] = repo
        return repo

    def _base(self, config_name: str | None, groups: list[Any]) -> _Base:
        """The config of this choice of groups, composed as Hydra composes it, before any value override."""
        key = (config_name, tuple(o.input_line for o in groups))
        base = self._bases.get(key)
        if base is not None:
            return base
        from hydra import __version__, version
        from hydra._internal.config_repository import CachingConfigRepository
        from hydra._internal.defaults_list import create_defaults_list
        from hydra.conf import ConfigSourceInfo

        repo = CachingConfigRepository(self.loader.repository)
        self.loader._process_config_searchpath(config_name, groups, repo)
        defaults_list = create_defaults_list(repo=repo, config_name=config_name, overrides_list=groups,
                                             prepend_hydra=True, skip_missing=False)  # RunMode.RUN, as Hydra's
        assert not defaults_list.config_overrides, "a value override among the group overrides"
        cfg = self.loader._compose_config_from_defaults_list(defaults=defaults_list.defaults, repo=repo)
        OmegaConf.set_struct(cfg, True)
        OmegaConf.set_readonly(cfg.hydra, False)
        # The `hydra.runtime` fields Hydra fills in after the value overrides that do not depend on the job (setting
        # `config_sources`, a list of structured nodes, is the costly one).
        with open_dict(cfg.hydra):
            cfg.hydra.runtime.choices.update(dict(defaults_list.overrides.known_choices))
            cfg.hydra.runtime.version = __version__
            cfg.hydra.runtime.version_base = version.getbase()
            cfg.hydra.runtime.config_sources = [ConfigSourceInfo(path=x.path, schema=x.scheme(), provider=x.provider)
                                                for x in repo.get_sources()]
        base = cfg, pickled(cfg)
        if len(self._bases) >= self.max_bases:
            del self._bases[next(iter(self._bases))]  # the oldest choice
        self._bases[key] = base
        return base

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


@functools.cache
def _validation_code() -> Any:
    """The code of Hydra's `Sweeper.validate_batch_is_legal`, which composes every job of a batch and drops the
    configs: the caller that `ComposedConfigs.load_sweep_config` answers from a sample (a sweeper that overrides it
    has its jobs composed as it asks)."""
    from hydra.plugins.sweeper import Sweeper

    return Sweeper.validate_batch_is_legal.__code__


def job_kind(sweep_overrides: list[str]) -> tuple[str, ...]:
    """What a job's overrides compose like: each override as it is, but a `key=number` as its key and whether the
    number is an int or a float (a `range` or a sampled value: a new string each job, composed alike)."""
    kind = []
    for line in sweep_overrides:
        match = _NUMBER.fullmatch(line)
        if match is None:
            kind.append(line)
        else:
            value = match["value"]
            kind.append(f"{match['head']}=<{'float' if any(c in value for c in '.eE') else 'int'}>")
    return tuple(kind)


@functools.lru_cache(maxsize=MAX_PARSED)
def parse_override(line: str) -> Any:
    """Hydra's Override of one override string, parsed once: an Override is not changed once parsed."""
    return parse_number(line, _TEMPLATES) or hydra_parse(line)


def hydra_parse(line: str) -> Any:
    """Hydra's Override of one override string, by Hydra's own (costly) parser."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides([line])[0]


def parse_number(line: str, templates: dict[str, Any]) -> Any:
    """Hydra's Override of `key=number` (see _NUMBER) without Hydra's parser, from Hydra's parse of `key=0` (kept in
    `templates`); None for any other override."""
    match = _NUMBER.fullmatch(line)
    if match is None:
        return None
    head, text = match["head"], match["value"]
    template = templates.get(head)
    if template is None:
        template = templates[head] = hydra_parse(f"{head}=0")
    value = float(text) if any(c in text for c in ".eE") else int(text)
    return replace(template, _value=value, input_line=line)


@dataclass(frozen=True)
class Pickled:
    """A config pickled for copies in this process (or a child forked from it): its bytes, and the classes that do
    not pickle by name here, referred to by their place in `classes`. Hydra's plugin scan executes a plugin's module
    again, so a structured config composed before the scan (a Slurm worker's) holds a class that its module no
    longer names, which pickle refuses."""

    data: bytes
    classes: tuple[type, ...] = ()


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.classes: list[type] = []

    def persistent_id(self, obj: Any) -> int | None:
        if isinstance(obj, type) and not _named(obj):
            self.classes.append(obj)
            return len(self.classes) - 1
        return None


def _named(cls: type) -> bool:
    """Whether pickle finds `cls` by its module and name."""
    found: Any = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is cls


def pickled(config: DictConfig) -> Pickled | None:
    """`config` pickled; None when a value in it does not pickle (a lambda in a structured config)."""
    try:
        return Pickled(pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL))
    except pickle.PicklingError:
        pass  # a class its module names no more: kept by reference (below)
    except Exception:
        return None
    buffer = io.BytesIO()
    pickler = _Pickler(buffer)
    try:
        pickler.dump(config)
    except Exception:
        return None
    return Pickled(buffer.getvalue(), tuple(pickler.classes))


def copy_config(config: DictConfig, pickled_config: Pickled | None) -> DictConfig:
    """A copy of `config`, unpickled from `pickled_config` (faster than a deep copy), else deep-copied."""
    if pickled_config is None:
        return copy.deepcopy(config)
    if not pickled_config.classes:
        return pickle.loads(pickled_config.data)
    unpickler = pickle.Unpickler(io.BytesIO(pickled_config.data))
    unpickler.persistent_load = pickled_config.classes.__getitem__  # type: ignore[method-assign]
    return unpickler.load()
