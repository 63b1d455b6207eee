"""A driver plans each job from its directory and a few values (`SweepitLauncher.plan_job`), which must equal what
the job's full compose gives (`compose_job`, then `OmegaConf.select`), while composing once per choice of config
groups, not once per job."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hydra import initialize_config_dir
from hydra._internal.callbacks import Callbacks
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import HydraContext, RunMode

from hydra_plugins.sweepit._plan_job import selected
from hydra_plugins.sweepit.slurm_launcher import SlurmLauncher
from sweepit_testing import CONF, write_conf

KEYS = ("trainer.gpus", "timeout_min", "metric", "direction", "hydra.job.env_set", "device", "name", "nested")

# An app of its own: a group option that sets the GPU key, keys that interpolate swept keys and the job's number.
FILES = {
    "config.yaml": """
defaults:
  - _self_
  - model: small
lr: 0.001
seed: 0
gpus_wanted: 2
device: cuda:${seed}
name: ${model.name}-lr${lr}
nested: {depth: 1, label: "${hydra:runtime.choices.model}-${seed}"}
metric: val_${model.name}
timeout_min: ${oc.select:model.minutes,30}
trainer:
  gpus: ${gpus_wanted}
hydra:
  job:
    env_set: {RUN: "${lr}", FIXED: "x", OUT: "${hydra:runtime.output_dir}"}  # (set as the job runs)
    env_copy: [HOME]
  sweep:
    dir: /tmp/sweepit-plan-test
    subdir: ${hydra.job.num}/${hydra.job.override_dirname}/${model.name}
""",
    "model/small.yaml": "name: small\nwidth: 8\n",
    "model/large.yaml": "# @package _global_\nmodel: {name: large, width: 64, minutes: 90}\ntrainer: {gpus: 8}\n",
}

JOBS = [
    ["lr=0.1", "seed=1"],
    ["lr=0.2", "seed=2"],
    ["model=large", "lr=0.1", "seed=1"],     # a group choice that changes the GPU key and the time limit
    ["model=large", "trainer.gpus=4"],       # a value override of the GPU key itself
    ["gpus_wanted=3", "seed=5"],             # an override of what the GPU key interpolates
    ["model.name=tiny", "seed=3"],           # an override of what the subdir and a key interpolate
    ["+extra=1", "seed=4"],                  # an added key that nothing reads
    ["~nested.depth", "seed=4", "name=plain"],  # a deleted key, and a key's own value that was an interpolation
    ["trainer={gpus: 6}"],                   # a dict for a parent of the GPU key: the full compose
    ["hydra.job.env_set.RUN=7"],             # a hydra key: the full compose
    ["lr=0.1", "seed=1"],                    # the first job again: nothing of the others is left in
]


def _launcher(loader: Any, master: Any) -> SlurmLauncher:
    launcher = SlurmLauncher(dry_run=True)
    launcher.setup(hydra_context=HydraContext(config_loader=loader, callbacks=Callbacks()),
                   task_function=lambda cfg: None, config=master)
    return launcher


def _full(launcher: SlurmLauncher, num: int, job: list[str], sweep_dir: Path,
          keys: tuple[str, ...]) -> tuple[Path, dict[str, Any]]:
    config, path = launcher.compose_job(num, job, sweep_dir)
    return path, {key: selected(config, key) for key in keys}


def _assert_plans_equal(conf_dir: Path, master_overrides: list[str], jobs: list[list[str]],
                        keys: tuple[str, ...]) -> SlurmLauncher:
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", master_overrides, run_mode=RunMode.MULTIRUN)
        HydraConfig.instance().set_config(master)  # as in Hydra's multirun: `${hydra:}` in the driver reads it
        planner, composer = _launcher(copy.deepcopy(loader), master), _launcher(copy.deepcopy(loader), master)
        sweep_dir = Path("/tmp/sweepit-plan-sweep")
        for num, job in enumerate(jobs):
            assert planner.plan_job(num, job, sweep_dir, keys) == _full(composer, num, job, sweep_dir, keys), job
        return planner


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    return write_conf(tmp_path, FILES)


def test_plan_job_equals_the_full_compose(conf_dir: Path) -> None:
    planner = _assert_plans_equal(conf_dir, ["hydra/launcher=slurm"], JOBS, KEYS)
    # Composed: one working config per choice of groups (2), and the three jobs left to the full compose (a deletion,
    # a dict, a hydra key); none of the others.
    composed = planner.composed
    assert composed.n_full + composed.n_from_base == 2 + 3


@pytest.mark.parametrize("subdir", ["${hydra.job.num}", "${hydra:job.num}_${hydra:runtime.choices.model}",
                                    "${now:%H}_${seed}", "fixed", "'${sweepit.job_dir:${hydra.job.num},"
                                    "${hydra.job.override_dirname}}'"])
def test_plan_job_resolves_the_subdir_as_the_full_compose(conf_dir: Path, subdir: str) -> None:
    _assert_plans_equal(conf_dir, ["hydra/launcher=slurm", f"hydra.sweep.subdir={subdir}",
                                   "hydra.job.config.override_dirname.exclude_keys=[seed]"], JOBS, KEYS)


def test_plan_job_of_the_built_in_configs(tmp_path: Path) -> None:
    jobs = [["task=linreg", f"seed={i}", "lr=0.1"] for i in range(3)] + [
        ["optimizer=sgd", "lr=0.1", "trainer.gpus=2"], ["task=mnist", "device=cpu", "timeout_min=5"],
        ["task=cifar10", "trainer.gpus=4", "+extra.key=3"], ["logger=tensorboard", "lr=0.2"]]
    keys = ("trainer.gpus", "timeout_min", "metric", "direction", "hydra.job.env_set", "device", "trainer.threads")
    planner = _assert_plans_equal(CONF, ["task=linreg", "hydra/launcher=slurm"], jobs, keys)
    assert planner.composed.n_full == 0
    # Five choices of groups, five working configs; no job composed of its own.
    assert planner.composed.n_from_base == 5


def test_a_sweep_of_many_jobs_is_planned_without_composing_each(conf_dir: Path) -> None:
    jobs = [[f"+x={i}", "lr=0.1", f"seed={i % 7}"] for i in range(500)]
    planner = _assert_plans_equal(conf_dir, ["hydra/launcher=slurm"], jobs[:3], KEYS)
    sweep_dir = Path("/tmp/sweepit-plan-sweep")
    before = planner.composed.n_full + planner.composed.n_from_base
    dirs = {planner.plan_job(num, job, sweep_dir, KEYS)[0] for num, job in enumerate(jobs)}
    assert len(dirs) == len(jobs)
    assert planner.composed.n_full + planner.composed.n_from_base == before  # none composed for them
