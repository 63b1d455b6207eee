"""The launchers' loader wrapper: configs composed with files loaded once are the configs Hydra composes."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf, open_dict

from hydra_plugins.sweepit._compose import ComposedConfigs, LoadedConfigs, hydra_parse, parse_number
from hydra_plugins.sweepit._launcher import job_dir
from hydra_plugins.sweepit._runner import job_return, uses_hydra_resolver
from sweepit_testing import CONF, run_command

SWEEP_JOBS = [
    ["seed=1"],
    ["optimizer=sgd", "lr=0.1"],
    ["optimizer=adam", "lr=0.01", "task=mnist", "data.synthetic=true"],
    ["task=cifar10", "trainer.gpus=2", "+extra.key=3"],
    ["optimizer=rmsprop", "hydra.launcher.n_workers=1"],
    ["seed=1"],  # the same job again: nothing of the first compose leaks into the second
]


def _yaml(config: object) -> str:
    return OmegaConf.to_yaml(config, resolve=False)


def test_loaded_once_composes_the_same_configs_as_hydra() -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", ["task=linreg"], run_mode=RunMode.MULTIRUN)
        expected = [_yaml(loader.load_sweep_config(master, job)) for job in SWEEP_JOBS]
        wrapped = ComposedConfigs(copy.deepcopy(loader))
        assert isinstance(wrapped.loader.repository, LoadedConfigs)
        got = [_yaml(wrapped.take(master, job)) for job in SWEEP_JOBS]
        assert got == expected
        loaded = wrapped.loader.repository.loaded
        assert len(loaded) >= 5 and any(path == "optimizer/sgd" for _, path in loaded)  # files are kept ...
        n = len(loaded)
        wrapped.take(master, ["optimizer=sgd", "lr=0.3"])
        assert len(loaded) == n  # ... and read once: a job of the same files loads none again
    # The loader still travels to other processes (the Slurm launcher pickles it with each job). Pickled in a fresh
    # interpreter, as the launcher's driver is: a process that ran Hydra's launcher suites has scanned Hydra's plugins
    # again, and holds config-source classes that pickle no longer finds under their names.
    travelled = run_command([sys.executable, "-c", _PICKLED.format(conf=str(CONF), job=SWEEP_JOBS[1])])
    assert travelled.returncode == 0, travelled.stderr[-3000:]
    assert travelled.stdout == expected[1]


_PICKLED = """
import pickle, sys
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf
from hydra_plugins.sweepit._compose import ComposedConfigs
with initialize_config_dir(config_dir={conf!r}, version_base="1.3"):
    loader = GlobalHydra.instance().config_loader()
    master = loader.load_configuration("config", ["task=linreg"], run_mode=RunMode.MULTIRUN)
    wrapped = ComposedConfigs(loader)
    wrapped.take(master, {job!r})
    again = pickle.loads(pickle.dumps(wrapped.loader))
    sys.stdout.write(OmegaConf.to_yaml(again.load_sweep_config(master, {job!r}), resolve=False))
"""


NUMBER_LINES = ["seed=0", "seed=7", "seed=-3", "seed=+12", "+x=1999", "++a.b_c=4", "lr=0.1", "lr=1e-3", "lr=1.",
                "lr=.5", "lr=-2.5E+2", "lr=3e4", "seed=0"]
OTHER_LINES = ["seed=007", "seed=1_000", "lr=1.5abc", "lr=inf", "lr=nan", "x=1.2.3", "x=--1", "x=true", "x=null",
               "layers.0.size=3", "~seed=1", "x=1,2", "x=range(0,3)", "db@pkg=1", "x= 1", "x=abc"]


def test_a_number_override_is_parsed_as_hydra_parses_it() -> None:
    """The fast path for `key=number` (a new string every job of a `range` or an Optuna trial) gives Hydra's own
    Override, value type included; anything else is left to Hydra's parser."""
    templates: dict[str, object] = {}
    for line in NUMBER_LINES:
        got, expected = parse_number(line, templates), hydra_parse(line)
        assert got == expected and type(got._value) is type(expected._value), line
    for line in OTHER_LINES:
        assert parse_number(line, templates) is None, line
    assert sorted(templates) == ["++a.b_c", "+x", "lr", "seed"]  # Hydra parsed `key=0` once per key


@pytest.mark.parametrize(("subdir", "expected"), [
    ("${hydra.job.num}_${hydra.job.override_dirname}", "7_lr=0.3,optimizer=sgd"),  # interpolations within the config
    ("${hydra:job.num}_${hydra:runtime.choices.optimizer}", "7_sgd"),  # Hydra's resolver: reads HydraConfig
    ("${study}_${seed}", "multirun_0"),  # the task's keys (which could call the resolver themselves)
])
def test_a_jobs_directory_resolves_as_hydras_run_job_resolves_it(subdir: str, expected: str, tmp_path: Path) -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", ["task=linreg", f"hydra.sweep.subdir={subdir}"],
                                           run_mode=RunMode.MULTIRUN)
        config = ComposedConfigs(copy.deepcopy(loader)).take(master, ["optimizer=sgd", "lr=0.3"])
        with open_dict(config):
            config.hydra.job.num = 7
        assert job_dir(config, tmp_path) == tmp_path / expected


def test_a_job_whose_directory_read_hydras_config_still_gives_its_job_return(tmp_path: Path) -> None:
    """The project's default `hydra.sweep.dir` (`outputs/${study}/...`) makes job_dir() set HydraConfig, which marks
    the config's hydra node read-only in place; the JobReturn built from it later sets hydra.runtime.output_dir (the
    README's Slurm command, without hydra.sweep.dir, ended in ReadonlyConfigError)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", ["task=linreg"], run_mode=RunMode.MULTIRUN)
        config = ComposedConfigs(copy.deepcopy(loader)).take(master, ["lr=0.3"])
        with open_dict(config):
            config.hydra.job.num = 0
        assert uses_hydra_resolver(config.hydra.sweep)  # the default goes through HydraConfig
        flag = config.hydra._get_node_flag("readonly")
        directory = job_dir(config, tmp_path)
        assert config.hydra._get_node_flag("readonly") == flag
        ret = job_return(["lr=0.3"], config, directory, "completed")
    assert ret.hydra_cfg.hydra.runtime.output_dir == str(directory) and ret.cfg.lr == 0.3


@pytest.mark.parametrize(("own", "launcher"), [
    ([], "hydra_plugins.sweepit.local_launcher.LocalLauncher"),
    (["  - override hydra/launcher: slurm"], "hydra_plugins.sweepit.slurm_launcher.SlurmLauncher"),
])
def test_one_line_brings_sweepit_to_a_users_config_and_the_users_own_choices_win(
        tmp_path: Path, own: list[str], launcher: str) -> None:
    """`- sweepit` in an app's defaults list (docs/own-code.md): sweepit's launcher, summary callback and job folders;
    the app's own override of the launcher, and its own `hydra:` keys after `_self_`, win over the line's."""
    (tmp_path / "config.yaml").write_text("\n".join(
        ["defaults:", "  - sweepit", "  - _self_", *own, "lr: 0.1", "hydra:", "  job:", "    name: mine"]) + "\n")
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        hydra = loader.load_configuration("config", [], run_mode=RunMode.MULTIRUN).hydra
        assert hydra.launcher._target_ == launcher
        assert hydra.callbacks.summary._target_ == "hydra_plugins.sweepit.callbacks.SweepSummary"
        assert str(hydra.sweep.dir).startswith("outputs/mine/")  # the app's name, as `sweepit ls` reads it
        assert OmegaConf.to_container(hydra.sweep, resolve=False)["subdir"] == (
            "${sweepit.job_dir:${hydra.job.num},${hydra.job.override_dirname}}")
