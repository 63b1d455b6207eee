"""A job's overrides: their keys, the job's own ones as they were typed (`+model.hidden=64`, which the tables'
{key: value} columns drop), and the command that runs one job of a sweep again, alone, from where the sweep ran."""

from __future__ import annotations

import itertools
import math
import os
import shlex
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sweepit.results._paths import JobPaths, SweepPaths

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present: far faster
# What the jobs took from the driver's environment beyond its command line, so that a command that runs the app again
# must set it too: a user's own package on PYTHONPATH (the config-only example's `PYTHONPATH=... python train.py`).
DRIVER_ENV = ("PYTHONPATH",)


def override_key(item: str) -> str:
    """The key an override sets: `+`, `++` and `~` dropped (`+model.hidden=64` -> `model.hidden`)."""
    return item.partition("=")[0].lstrip("+~")


def own_key(item: str) -> str | None:
    """The override's key; None for a `hydra.*` override (such as the Optuna sweeper's `hydra.job.env_set`, which
    a launcher's records, sweep.json, also carry): not the job's own."""
    key = override_key(item)
    return None if key.startswith("hydra.") else key


def short_value(value: str) -> str:
    """An override's value for people (a table's cell, a legend): a float of many digits to 4 significant ones, as
    the tables print numbers. Where it is pasted or read back it stays exact."""
    if "." not in value and "e" not in value.lower():
        return value
    try:
        number = float(value)
    except ValueError:
        return value
    short = f"{number:.4g}"
    return short if len(short) < len(value) and math.isfinite(number) else value


def load_yaml(path: Path) -> Any:
    """The parsed file, or None when it is missing or not YAML."""
    try:
        with open(path) as f:
            return yaml.load(f, Loader=_LOADER)
    except (OSError, yaml.YAMLError):
        return None


def saved_hydra(path: Path) -> dict[str, Any]:
    """The `hydra` node of a config Hydra saved (multirun.yaml, a job's .hydra/hydra.yaml); {} when there is none."""
    data = load_yaml(path)
    hydra = data.get("hydra") if isinstance(data, dict) else None
    return hydra if isinstance(hydra, dict) else {}


def typed_overrides(job_dir: Path) -> list[str]:
    """The job's own overrides as typed (`+`, `++` and `~` kept), from Hydra's `.hydra/overrides.yaml`; [] when the job
    has none or never started."""
    items = load_yaml(JobPaths(job_dir).overrides)
    return own_overrides(str(i) for i in items) if isinstance(items, list) else []


def own_overrides(overrides: Iterable[str]) -> list[str]:
    """A job's own overrides: Hydra's `hydra.*` left out."""
    return [o for o in overrides if own_key(o) is not None]


def override_values(overrides: Iterable[str]) -> dict[str, str]:
    """A job's own `key=value` overrides as {key: value}, `+`, `++` and `~` dropped (one pass: a report reads
    100,000 jobs' overrides)."""
    return {key: item.partition("=")[2] for item in overrides if (key := own_key(item)) is not None}


def app_script(manifest: dict[str, Any], sweep_dir: Path | None = None) -> str:
    """The app's script from the driver's command line in sweep.json. Without sweep.json (a launcher that is not
    sweepit's), the job's name that Hydra kept in multirun.yaml is the script's, found in the app's config folder or
    a folder above it (`config_path="conf"` beside the script)."""
    argv, cwd = manifest.get("argv"), manifest.get("cwd")
    if isinstance(argv, list) and len(argv) > 1 and str(argv[1]).endswith(".py"):
        return _relative(str(argv[1]), cwd)
    hydra = saved_hydra(SweepPaths(sweep_dir).multirun) if sweep_dir is not None else {}
    if not hydra:
        return "train.py"
    name = str((hydra.get("job") or {}).get("name") or "train")
    runtime = hydra.get("runtime") or {}
    cwd = runtime.get("cwd")
    main = next((str(s.get("path")) for s in runtime.get("config_sources") or []
                 if isinstance(s, dict) and s.get("provider") == "main" and s.get("schema") == "file"), None)
    if main is not None:
        folder = Path(main if os.path.isabs(main) else os.path.join(str(cwd or "."), main))
        for place in (folder, *folder.parents):
            if (place / f"{name}.py").is_file():
                return _relative(str(place / f"{name}.py"), cwd)
            if isinstance(cwd, str) and str(place) == cwd:
                break
    return f"{name}.py"


def driver_env() -> dict[str, str]:
    """The variables of DRIVER_ENV that this process (a sweep's driver) has, which sweep.json records as `env`."""
    return {k: os.environ[k] for k in DRIVER_ENV if os.environ.get(k)}


def app_command(manifest: dict[str, Any], sweep_dir: Path | None = None) -> str:
    """The shell words that run the sweep's app alone from where the sweep ran: the driver's variables its jobs
    needed (sweep.json's `env`), its interpreter (`python_name`) and script (`app_script`)."""
    argv, env = manifest.get("argv"), manifest.get("env")
    python = python_name(str(argv[0]), manifest.get("cwd")) if isinstance(argv, list) and argv else "python"
    return shell_line([python, app_script(manifest, sweep_dir)], env if isinstance(env, dict) else {})


def shell_line(argv: list[str], env: Mapping[str, Any]) -> str:
    """`argv` as a shell line that sets `env` for it: `K=V cmd` (a quoted `'K=V'` would be run as a command, so only
    the value is quoted)."""
    return " ".join([*(f"{k}={shlex.quote(str(v))}" for k, v in env.items()), shlex.join(argv)])


def python_name(interpreter: str, cwd: Any = None) -> str:
    """How a shell here names the Python `interpreter` (a driver's sys.executable): `python` when that name runs it
    (its venv is active), else its path (`.venv/bin/python`: `python` may be another Python, without the app's
    packages)."""
    if not os.path.isabs(interpreter):
        return interpreter
    found = shutil.which("python")
    try:
        # The same file in the same folder: a venv's python is a link to the base Python, but another prefix.
        if found and os.path.samefile(found, interpreter) and os.path.samefile(os.path.dirname(found),
                                                                              os.path.dirname(interpreter)):
            return "python"
    except OSError:
        pass
    path = _relative(interpreter, cwd)
    return path if os.sep in path else os.path.join(".", path)


def _relative(path: str, cwd: Any) -> str:
    """`path` relative to `cwd` when inside it."""
    if isinstance(cwd, str) and os.path.isabs(path):
        rel = os.path.relpath(path, cwd)
        return path if rel.startswith("..") else rel
    return path


@dataclass(frozen=True)
class ConfigSource:
    """What a single run of the sweep's app needs besides a job's own overrides to get that job's config."""

    name: str = "config"            # --config-name
    config_dir: str | None = None   # --config-dir, relative to where the sweep ran when inside it
    # `hydra.mode=RUN` when the config itself sets `hydra.mode: MULTIRUN` (lightning-hydra-template's
    # hparams_search files do): without it the one job would start a sweep of its own.
    single_run: tuple[str, ...] = ()


def config_of(hydra: Mapping[Any, Any]) -> ConfigSource:
    """The ConfigSource of a sweep from its config's `hydra` node (saved or live, as plain data)."""
    name = str((hydra.get("job") or {}).get("config_name") or "config")
    runtime = hydra.get("runtime") or {}
    config_dir = next((str(s.get("path")) for s in runtime.get("config_sources") or []
                       if isinstance(s, Mapping) and s.get("provider") == "command-line"), None)
    mode = hydra.get("mode")
    typed = (hydra.get("overrides") or {}).get("hydra") or []
    # Hydra adds `hydra.mode=MULTIRUN` to the overrides of a `-m` run whose config sets no mode: a MULTIRUN
    # without it came from the config.
    from_config = str(getattr(mode, "name", mode)) == "MULTIRUN" and "hydra.mode=MULTIRUN" not in typed
    return ConfigSource(name, config_dir and _relative(config_dir, runtime.get("cwd")),
                        ("hydra.mode=RUN",) if from_config else ())


def config_source(sweep_dir: Path, job_dirs: Iterable[Path]) -> ConfigSource:
    """The sweep's ConfigSource, from multirun.yaml or a job's .hydra/hydra.yaml (the first of three that has
    one)."""
    hydra = saved_hydra(SweepPaths(sweep_dir).multirun)
    for job_dir in itertools.islice(job_dirs, 3):
        hydra = hydra or saved_hydra(JobPaths(job_dir).hydra_config)
    return config_of(hydra) if hydra else ConfigSource()


def rerun_command(app: str, source: ConfigSource, overrides: list[str], swept: Iterable[str]) -> str:
    """`<app> [--config-dir D --config-name S] [hydra.mode=RUN] <overrides>` (`app`: `app_command`), the overrides
    of keys not in `swept` (those every job shares) first: one run, pasteable into a shell where the sweep ran."""
    varying = set(swept)
    ordered = ([o for o in overrides if own_key(o) not in varying]
               + [o for o in overrides if own_key(o) in varying])
    args: list[str] = []
    if source.config_dir:
        args += ["--config-dir", source.config_dir]
    if source.name != "config" or source.config_dir:
        args += ["--config-name", source.name]
    return " ".join([app, *map(shlex.quote, [*args, *source.single_run, *ordered])])
