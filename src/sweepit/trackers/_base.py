"""What every tracker is given (RunInfo), what it does (Tracker), and how a job's `logger` node becomes trackers."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweepit.errors import ConfigError
from sweepit.results import JobState, SweepPaths

# Files beside a job's directories that say the directory above a job is a sweep (sweepit's, Hydra's basic one).
_SWEEP_MARKERS = (SweepPaths.manifest, SweepPaths.multirun)
# Config subtrees that are not hyperparameters of the job.
_NOT_PARAMS = ("hydra", "logger")
# The endings a tracker shows as a run that finished well (`ended`: a single run of a user's own loop; `paused`: at a
# rung of the halving sweeper).
ENDED_WELL = (JobState.COMPLETED, JobState.PRUNED, JobState.PAUSED, JobState.ENDED)


@dataclass(frozen=True)
class RunInfo:
    """One job as a tracker's run: where it writes, which sweep it belongs to, and its hyperparameters."""

    job_dir: Path
    sweep_dir: Path | None           # None: a single run (`python train.py`), not part of a sweep
    name: str                        # the run: the job directory's name, e.g. `3_lr=0.1,optimizer=sgd`
    group: str                       # the sweep: `<study>/<timestamp>` (a single run: its study)
    params: dict[str, Any] = field(default_factory=dict)   # the flattened config: `trainer.lr_schedule` -> value
    overrides: tuple[str, ...] = ()  # what the command line (or the sweeper) changed for this job

    @property
    def home(self) -> Path:
        """Where a tracker keeps what all runs of the sweep share (the sweep directory; a single run's own)."""
        return self.sweep_dir or self.job_dir


class Tracker:
    """A tracker's three moments; each subclass writes them to its package's files or server."""

    #: the Python module the tracker imports, and the extra of sweepit that installs it
    module: str = ""
    extra: str = ""

    def start(self, run: RunInfo) -> None:
        raise NotImplementedError

    def log(self, metrics: Mapping[str, float], epoch: int) -> None:
        raise NotImplementedError

    def finish(self, status: str, result: Mapping[str, Any] | None) -> None:
        """The job ended with `status` (completed, pruned, diverged, failed, interrupted; `ended` for a single
        run of a user's own loop, which no launcher records); `result` is its result.json when it has one."""
        raise NotImplementedError


def _has_methods(obj: Any) -> bool:
    return all(callable(getattr(obj, m, None)) for m in ("start", "log", "finish"))


def _require(node: Mapping[str, Any], key: str) -> None:
    """ConfigError when the node's class cannot be imported, or is a tracker whose package is missing."""
    from sweepit._targets import locate

    cls = locate(node["_target_"], f"{key}._target_")
    if (isinstance(cls, type) and issubclass(cls, Tracker) and cls.module
            and importlib.util.find_spec(cls.module) is None):
        raise ConfigError(
            f"{key} needs the `{cls.module}` package, which is not installed: install sweepit's extra with "
            f"`pip install -e '.[{cls.extra}]'` (or `pip install {cls.extra}`), or drop the logger "
            f"(remove `logger={key.split('.')[-1]}` from the command line).")


def _nodes(config: Any, strict: bool) -> list[tuple[str, Mapping[str, Any]]]:
    """The `logger` node's trackers as (key, plain mapping), in config order. `strict` (sweepit's own loop, whose
    `logger` node is sweepit's group) refuses whatever is not a tracker's config. Otherwise the node may be an app's
    own group (lightning-hydra-template's `logger=csv` is Lightning's loggers): the entries whose `_target_` is not a
    tracker are the app's, left unread and unresolved (they may interpolate what only the app's run sets)."""
    from sweepit._targets import plain

    node = _select(config, "logger")
    if node is None or (strict and plain(node) == {}):
        return []
    if not isinstance(node, Mapping):
        if not strict:
            return []
        raise ConfigError(f"logger must be a mapping of trackers (like logger.tensorboard._target_="
                          f"sweepit.trackers.TensorBoard), but got logger={plain(node)!r}. Choose them with the logger "
                          "group: logger=tensorboard, logger='[tensorboard,mlflow]' or logger=many.")
    out = []
    for name in node:
        sub = node[name]
        if sub is None:
            continue  # a tracker switched off with logger.<name>=null
        target = sub.get("_target_") if isinstance(sub, Mapping) else None
        if strict and target is None:
            raise ConfigError(f"logger.{name} must be a tracker's config with a _target_ (like "
                              f"_target_: sweepit.trackers.TensorBoard), but got logger.{name}={plain(sub)!r}.")
        if strict or _is_tracker(target, f"logger.{name}._target_"):
            out.append((f"logger.{name}", plain(sub)))
    return out


def _is_tracker(target: Any, key: str) -> bool:
    """Whether an entry of an app's `logger` node is a tracker for sweepit: its `_target_` is sweepit's, or a class
    with a tracker's three methods. A function is not called to find out: it may be the app's own factory."""
    from sweepit._targets import locate

    if not isinstance(target, str):
        return False
    if target.startswith("sweepit."):
        return True  # sweepit's trackers: a misspelt one is refused when it is built, not passed over
    try:
        cls = locate(target, key)
    except ConfigError:
        return False  # the app's to import, when it uses it
    return isinstance(cls, type) and _has_methods(cls)


def check_trackers(config: Any) -> None:
    """ConfigError, before any training, when a tracker of the config cannot be built; builds nothing."""
    for key, node in _nodes(config, strict=True):
        _require(node, key)


def open_trackers(config: Any, job_dir: Path) -> list[Tracker]:
    """The config's trackers, built and started for the job in `job_dir`."""
    from sweepit._targets import instantiate

    nodes = _nodes(config, strict=False)
    if not nodes:
        return []
    run = run_info(config, job_dir)
    trackers = []
    for key, node in nodes:
        _require(node, key)
        tracker = instantiate(node, key)
        if not _has_methods(tracker):
            raise ConfigError(f"{key}._target_ must build a tracker with start(run), log(metrics, epoch) and "
                              f"finish(status, result) methods, but {node['_target_']} built {type(tracker).__name__}.")
        tracker.start(run)
        trackers.append(tracker)
    return trackers


def run_info(config: Any, job_dir: Path) -> RunInfo:
    job_dir = Path(job_dir).resolve()
    parent = job_dir.parent
    sweep_dir = parent if any((parent / m).exists() for m in _SWEEP_MARKERS) else None
    study = str(_select(config, "study") or (sweep_dir.parent.name if sweep_dir else "sweepit"))
    group = f"{study}/{sweep_dir.name}" if sweep_dir is not None else study
    return RunInfo(job_dir=job_dir, sweep_dir=sweep_dir, name=job_dir.name, group=group,
                   params=flat_params(config), overrides=_overrides(config))


def flat_params(config: Any) -> dict[str, Any]:
    """The job's config as `dotted.key -> value` (lists as text), without the hydra and logger subtrees. Each value is
    resolved alone, and one that cannot be outside the job's own run (`${hydra:...}`) is kept as its text."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    out: dict[str, Any] = {}

    def leaf(prefix: str, value: Any) -> None:
        out[prefix[:-1]] = value if value is None or isinstance(value, bool | int | float | str) else str(value)

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, Mapping):
            for k in node:
                if not prefix and k in _NOT_PARAMS:
                    continue
                try:
                    value = node[k]
                except OmegaConfBaseException:  # only a config node resolves, and may fail to
                    raw = OmegaConf.to_container(node, resolve=False)
                    assert isinstance(raw, dict)
                    value = str(raw[k])
                walk(value, f"{prefix}{k}.")
        elif OmegaConf.is_list(node):
            try:
                leaf(prefix, OmegaConf.to_container(node, resolve=True))
            except OmegaConfBaseException:
                leaf(prefix, OmegaConf.to_container(node, resolve=False))
        else:
            leaf(prefix, node)

    if config is not None:
        walk(config, "")
    return out


def _select(config: Any, key: str) -> Any:
    from omegaconf import OmegaConf

    if OmegaConf.is_config(config):
        return OmegaConf.select(config, key, default=None)
    return config.get(key) if isinstance(config, Mapping) else None


def _overrides(config: Any) -> tuple[str, ...]:
    task = _select(config, "hydra.overrides.task")
    if task is None:  # Hydra's task config has no hydra node: ask Hydra, never import it
        hydra_config = sys.modules.get("hydra.core.hydra_config")
        if hydra_config is not None and hydra_config.HydraConfig.initialized():
            task = hydra_config.HydraConfig.get().overrides.task
    # The launchers' and sweepers' own settings (hydra.*) are not the job's hyperparameters.
    return tuple(str(o) for o in task or () if not str(o).lstrip("+~").startswith("hydra."))
