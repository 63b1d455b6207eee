"""Composing once per choice of config groups (`ComposedConfigs`) gives every job the config Hydra's own
`load_sweep_config` gives it: the same tree (unresolved), the same resolved task config, the same node types
and flags, and Hydra's own error for a job that does not compose."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from hydra_plugins.sweepit._compose import ComposedConfigs
from sweepit_testing import CONF, write_conf

# An app of its own, with what the built-in configs lack: a group option that adds keys, a `_global_` option,
# a nested group, keys interpolating swept keys, env_copy and a sweep subdir of the job's override_dirname.
FILES = {
    "config.yaml": """
defaults:
  - _self_
  - opt: adam
  - model: small
  - optional extra: null
lr: 0.001
seed: 0
name: ${opt.name}-lr${lr}
scaled_lr: ${lr}
stamp: ${now:%H-%M-%S-%f}
tags: [a, b]
nested: {depth: 1, keep: true, drop: 3}
hydra:
  job:
    env_copy: [HOME]
  sweep:
    dir: /tmp/sweepit-compose-test
    subdir: ${hydra.job.num}_${hydra.job.override_dirname}
""",
    "opt/adam.yaml": "name: adam\nbetas: [0.9, 0.999]\nlr_mult: 1.0\n",
    "opt/sgd.yaml": "name: sgd\nmomentum: 0.0\nnesterov: false\nlr_mult: ${lr}\n",
    "model/small.yaml": "defaults:\n  - head: linear\n  - _self_\nwidth: 8\n",
    "model/large.yaml": "defaults:\n  - head: mlp\n  - _self_\nwidth: 64\ndepth: 4\n",
    "model/head/linear.yaml": "kind: linear\n",
    "model/head/mlp.yaml": "kind: mlp\nhidden: ${model.width}\n",
    "extra/more.yaml": "# @package _global_\nextra_key: 5\nnested:\n  added: ${seed}\n",
    "addon/on.yaml": "enabled: true\nstrength: ${lr}\n",
}

MASTER_OVERRIDES = ["hydra.job.config.override_dirname.exclude_keys=[seed]", "hydra/launcher=basic",
                    "hydra.sweep.dir=/tmp/sweepit-compose-master"]

SWEEP = [
    ["lr=0.1"],
    ["opt=sgd", "lr=0.1"],
    ["lr=0.01", "opt=sgd", "opt.momentum=0.9"],          # a value for a key that only the chosen option has
    ["opt.momentum=0.9", "opt=sgd"],                     # the same, the value first: Hydra applies groups first
    ["extra=more", "extra_key=7", "nested.added=2"],     # a _global_ option, then values for the keys it brought
    ["extra=more", "seed=3"],                            # nested.added interpolates the swept seed
    ["+addon=on", "addon.strength=2", "lr=0.4"],         # a group added to the defaults (`+group=option`)
    ["+addon=on", "lr=0.4"],                             # addon.strength interpolates the swept lr
    ["model=large", "model/head=linear", "lr=0.2"],      # a nested group, overridden after its parent
    ["model=large", "model.width=16"],                   # model.head.hidden interpolates the swept width
    ["+new.key=1", "+new.other=[1,2]", "++lr=0.3", "++fresh=x"],
    ["~nested.drop", "~tags", "seed=2"],
    ["~nested.drop=3", "opt=sgd"],                       # deletion with the value it must have
    ["name='plain string'", "scaled_lr=${seed}", "nested={depth: 2}"],  # quoted, a new interpolation, a dict
    ["opt={name: custom, lr_mult: 2.0}"],                # a dict for a group's key is a value override (Hydra's rule)
    ["tags=[x,y,z]", "nested.keep=false", "seed=null"],
    # The Optuna sweeper's style: fixed overrides, one per searched parameter (floats as repr), extra `+` ones.
    ["seed=1", "opt=sgd", "lr=0.0031622776601683794", "+addon=on", "++hydra.job.env_set.SWEEPIT_TRIAL=3"],
    ["seed=1", "opt=adam", "lr=1e-05", "model.width=32"],
    ["hydra.job.name=renamed", "lr=0.5"],                # a hydra value: Hydra's job name step reads it after
    ["lr=0.1"],                                          # a job again: nothing of the first one leaks in
]

BAD = [
    ["no_such_key=1"],            # Could not override 'no_such_key'
    ["+lr=0.5"],                  # Could not append: an item is already there
    ["opt=no_such_option"],       # missing config in a group
    ["~no_such_key"],             # Could not delete
    ["lr=1,2"],                   # a sweep in a job's overrides
    ["lr=[1"],                    # a parse error
    ["++opt=sgd"],                # force-add of a config group
    ["+extra=more"],              # a group already in the defaults list, added again
]


def _shape(node: Any, path: str = "") -> list[tuple[Any, ...]]:
    """Every node's path, class, structured type, reference type, optional flag and local flags."""
    if isinstance(node, DictConfig | ListConfig):
        meta = node._metadata
        out: list[tuple[Any, ...]] = [(path, type(node).__name__, meta.object_type, meta.ref_type, meta.optional,
                                       tuple(sorted(meta.flags.items())))]
        if node._is_missing() or node._is_none() or node._is_interpolation():
            return out
        keys = node.keys() if isinstance(node, DictConfig) else range(len(node))
        for key in keys:
            out += _shape(node._get_node(key), f"{path}.{key}")
        return out
    meta = node._metadata
    return [(path, type(node).__name__, meta.ref_type, meta.optional, tuple(sorted(meta.flags.items())))]


def _task(config: DictConfig) -> Any:
    """The task's config, resolved (as the job sees it)."""
    task = copy.deepcopy(config)
    with open_dict(task):
        del task["hydra"]
    return OmegaConf.to_container(task, resolve=True)


def assert_same(got: DictConfig, expected: DictConfig) -> None:
    assert OmegaConf.to_container(got, resolve=False) == OmegaConf.to_container(expected, resolve=False)
    assert _task(got) == _task(expected)
    assert _shape(got) == _shape(expected)
    assert OmegaConf.to_yaml(got) == OmegaConf.to_yaml(expected)


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    return write_conf(tmp_path, FILES)


def _loaders(conf_dir: Path, master_overrides: list[str]) -> tuple[Any, DictConfig, ComposedConfigs]:
    loader = GlobalHydra.instance().config_loader()
    master = loader.load_configuration("config", master_overrides, run_mode=RunMode.MULTIRUN)
    assert master.stamp  # resolved in the master: every job's `${now:}` is the master's (its cache is copied)
    return loader, master, ComposedConfigs(copy.deepcopy(loader))


@pytest.mark.slow  # composes every job twice: 12 s
def test_every_job_equals_hydras_composition(conf_dir: Path) -> None:
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        loader, master, composed = _loaders(conf_dir, MASTER_OVERRIDES)
        for job in SWEEP:
            assert_same(composed.load_sweep_config(master, job), loader.load_sweep_config(master, job))
        assert composed.n_full == 0 and composed.n_from_base == len(SWEEP)
        # hydra.runtime values, which Hydra fills in again after them (a base has them already): Hydra composes.
        runtime_job = ["hydra.runtime.version_base=x", "++hydra.runtime.choices.opt=y"]
        assert_same(composed.load_sweep_config(master, runtime_job), loader.load_sweep_config(master, runtime_job))
        assert composed.n_full == 1
        # One compose per choice of groups (the master's hydra/launcher among them), not one per job.
        assert len(composed._bases) == 8
        for job in SWEEP:  # kept for the launcher, and the same config again
            assert_same(composed.take(master, job), loader.load_sweep_config(master, job))


def test_built_in_configs_equal_hydras_composition() -> None:
    jobs = [["seed=1"], ["optimizer=sgd", "lr=0.1"], ["optimizer=adam", "lr=0.01", "task=mnist", "data.synthetic=true"],
            ["task=cifar10", "trainer.gpus=2", "+extra.key=3"], ["optimizer=rmsprop", "hydra.launcher.n_workers=1"],
            ["logger=tensorboard", "lr=0.2"], ["task=linreg", "epochs=5", "seed=31"]]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", ["task=linreg", "hydra/sweeper=optuna"],
                                           run_mode=RunMode.MULTIRUN)
        composed = ComposedConfigs(copy.deepcopy(loader))
        for job in jobs:
            assert_same(composed.take(master, job), loader.load_sweep_config(master, job))
        assert composed.n_full == 0


@pytest.mark.parametrize("job", BAD, ids=lambda job: " ".join(job))
def test_a_job_that_does_not_compose_raises_hydras_error(conf_dir: Path, job: list[str]) -> None:
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        loader, master, composed = _loaders(conf_dir, MASTER_OVERRIDES)
        with pytest.raises(Exception) as expected:
            loader.load_sweep_config(master, job)
        with pytest.raises(type(expected.value)) as got:
            composed.load_sweep_config(master, job)
        assert str(got.value) == str(expected.value)
        assert composed.n_full == 1  # Hydra composed it, to raise its own error


def test_searchpath_override_falls_back_to_hydra(conf_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other" / "opt"
    other.mkdir(parents=True)
    (other / "rmsprop.yaml").write_text("name: rmsprop\nalpha: 0.99\n")
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        loader, master, composed = _loaders(conf_dir, [f"hydra.searchpath=[file://{tmp_path / 'other'}]"])
        job = ["opt=rmsprop", "lr=0.2"]
        assert_same(composed.load_sweep_config(master, job), loader.load_sweep_config(master, job))
        assert composed.n_full == 1 and composed.n_from_base == 0


def test_few_bases_kept_still_compose_right(conf_dir: Path) -> None:
    """More choices of groups than bases kept: the oldest is dropped and composed again when needed."""
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        loader, master, composed = _loaders(conf_dir, MASTER_OVERRIDES)
        composed.max_bases = 2
        for job in SWEEP:
            assert_same(composed.compose(master, job), loader.load_sweep_config(master, job))
        assert len(composed._bases) == 2 and composed.n_full == 0


def test_a_loader_pickled_into_a_worker_still_composes_from_bases(conf_dir: Path) -> None:
    """A Slurm worker (packed grid, Optuna worker) gets the driver's loader pickled, its repository already wrapped
    by the driver's ComposedConfigs; wrapped again in the worker, every job is still composed from a base (every
    job of a packed grid would be composed by Hydra in full if the worker did not see it)."""
    import pickle

    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        loader, master, driver = _loaders(conf_dir, MASTER_OVERRIDES)
        driver.compose(master, SWEEP[0])
        in_worker = ComposedConfigs(pickle.loads(pickle.dumps(driver.loader)))
        for job in SWEEP:
            assert_same(in_worker.compose(master, job), loader.load_sweep_config(master, job))
        assert in_worker.n_full == 0 and in_worker.n_from_base == len(SWEEP)


def test_a_config_of_a_class_its_module_defined_again_is_copied_by_pickling(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Hydra's plugin scan executes a plugin's module again: in a Slurm worker a structured config composed from the
    driver's ConfigStore holds the class of the first execution, which pickle refuses by name. It is still copied by
    pickling (deep copies cost twice as much in every job), equal and of the same class."""
    import importlib
    import sys

    from hydra_plugins.sweepit._compose import copy_config, pickled

    (tmp_path / "redefined_conf.py").write_text(
        "from dataclasses import dataclass, field\n\n@dataclass\nclass Conf:\n    lr: float = 0.1\n"
        "    tags: list = field(default_factory=lambda: ['a'])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("redefined_conf")
    first = module.Conf
    config = OmegaConf.create({"launcher": OmegaConf.structured(first), "seed": 3})
    importlib.reload(module)  # what the scan does to the plugin's module
    assert module.Conf is not first
    try:
        kept = pickled(config)
        assert kept is not None and kept.classes == (first,)
        copied = copy_config(config, kept)
        assert copied == config and copied is not config
        assert OmegaConf.get_type(copied.launcher) is first
        copied.launcher.lr = 0.5  # a copy of its own
        assert config.launcher.lr == 0.1
        plain = pickled(OmegaConf.create({"a": 1}))
        assert plain is not None and plain.classes == ()  # pickled by name as before
    finally:
        sys.modules.pop("redefined_conf", None)
