"""A sweep of 100,000 jobs cannot keep 100,000 composed configs in its driver: once a job has ended and saved its
config (`.hydra/config.yaml`, `hydra.yaml`), the local launcher lets go of it, and the JobReturn a sweeper gets
reads them back when asked. What it reads back must be what Hydra's own launcher returns for the same sweep."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hydra.test_utils.test_utils import TSweepRunner
from hydra.version import setbase
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.sweepit._runner import SavedConfig, SavedJobReturn, promised_config, release_config

pytestmark = pytest.mark.usefixtures("hydra_default_version_base")


def task(cfg: DictConfig) -> float:
    return float(cfg.x) * 10


def _sweep(runner: TSweepRunner, sweep_dir: Path, launcher: str) -> Any:
    return runner(calling_file=None, calling_module="hydra.test_utils.a_module", config_path="configs",
                  config_name="compose.yaml", task_function=task, temp_dir=str(sweep_dir),
                  overrides=[f"hydra/launcher={launcher}", "+x=1,2", "group1=file1,file2"])


def test_released_configs_come_back_as_hydras_launcher_returns_them(hydra_sweep_runner: TSweepRunner,
                                                                     tmp_path: Path) -> None:
    with _sweep(hydra_sweep_runner, tmp_path / "local", "local") as local, \
            _sweep(hydra_sweep_runner, tmp_path / "basic", "basic") as basic:  # (each removes its directory at exit)
        ours = [r for batch in local.returns for r in batch]
        theirs = [r for batch in basic.returns for r in batch]
        assert len(ours) == len(theirs) == 4
        assert all(isinstance(r, SavedJobReturn) and r._saved is not None for r in ours)  # nothing loaded yet
        for mine, hydras in zip(ours, theirs, strict=True):
            assert mine.overrides == hydras.overrides and mine.return_value == hydras.return_value
            assert mine.task_name == hydras.task_name
            assert mine.working_dir is not None and hydras.working_dir is not None  # each in its sweep directory
            assert os.path.relpath(mine.working_dir, tmp_path / "local") == os.path.relpath(hydras.working_dir,
                                                                                            tmp_path / "basic")
            assert OmegaConf.to_container(mine.cfg) == OmegaConf.to_container(hydras.cfg)
            assert mine.hydra_cfg is not None and hydras.hydra_cfg is not None
            job, expected = mine.hydra_cfg.hydra.job, hydras.hydra_cfg.hydra.job
            assert (job.num, job.id, job.name, job.override_dirname) == (
                expected.num, str(expected.id), expected.name, expected.override_dirname)
            assert Path(mine.hydra_cfg.hydra.runtime.output_dir).parent == tmp_path / "local"
        assert all(r.cfg is r.cfg for r in ours)  # read once, then the same object each time
        mine = SavedJobReturn(SavedConfig(tmp_path / "local" / "0" / ".hydra", "a_module", True), overrides=[])
        mine.cfg = OmegaConf.create({"set": True})
        assert mine.cfg == {"set": True} and mine.hydra_cfg is not None  # a field set leaves the other to be read
        assert mine.hydra_cfg.hydra.job.num == 0
        gone = SavedJobReturn(SavedConfig(tmp_path / "local" / "0" / ".hydra", "a_module", True), overrides=[])
    with pytest.raises(FileNotFoundError, match="saved config of the job, read back for its JobReturn"):
        _ = gone.cfg  # the sweep directory was removed at the end of the with


def _composed(output_subdir: str | None) -> DictConfig:
    hydra = {"output_subdir": output_subdir, "job": {"name": "app", "chdir": None}}
    config = OmegaConf.create({"x": 1, "hydra": hydra})
    assert isinstance(config, DictConfig)
    return config


@pytest.mark.parametrize(("output_subdir", "saved", "released"),
                         [(".hydra", True, True), (".hydra", False, False), (None, False, False)])
def test_a_config_is_released_only_when_the_job_saved_it(tmp_path: Path, output_subdir: str | None, saved: bool,
                                                         released: bool) -> None:
    """A job killed before Hydra's run_job saved its config (or an app with hydra.output_subdir=null) keeps it in
    memory: nothing could read it back."""
    if saved:
        (tmp_path / ".hydra").mkdir()
        for name in ("config.yaml", "hydra.yaml"):
            (tmp_path / ".hydra" / name).write_text("x: 1\n")
    config = _composed(output_subdir)
    kept: Any = release_config(config, tmp_path)
    if released:
        assert isinstance(kept, SavedConfig) and kept.saved_dir == tmp_path / ".hydra" and kept.task_name == "app"
    else:
        assert kept is config


def test_an_unset_chdir_follows_the_version_base_in_force_each_time(tmp_path: Path) -> None:
    """Hydra's run_job chdirs into the job's directory when `hydra.job.chdir` is unset only under a version base
    before 1.2. A process may compose under several (a test session does): the answer follows the one in force, as
    run_job's does, and not the first one asked under (Hydra's Slurm launcher suite once got the checkout as a
    job's working_dir after an earlier test had asked under 1.3)."""
    answers = []
    for base in ("1.3", "1.1", "1.3"):  # (the module's fixture gives the singleton back as it was)
        setbase(base)
        promised = promised_config(tmp_path, ".hydra", "app", None)
        assert promised is not None
        answers.append(promised.chdir)
    assert answers == [False, True, False]
    promised = promised_config(tmp_path, ".hydra", "app", True)
    assert promised is not None and promised.chdir is True  # set: followed under any base
