"""A local job runs in its own forked process through `run_forked_job`: Hydra's `run_job` with fewer config copies.
Whatever the job, its files and its callbacks see must be what Hydra's own `run_job` gives for the same config."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import run_job, setup_globals
from hydra.types import HydraContext, RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from hydra_plugins.sweepit._compose import ComposedConfigs
from hydra_plugins.sweepit._runner import run_forked_job
from sweepit_testing import CONF


class Seen:
    """What the task and the callbacks saw."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def task(self, cfg: DictConfig) -> float:
        self.events.append(("task", (OmegaConf.to_container(cfg), OmegaConf.is_struct(cfg), OmegaConf.is_readonly(cfg),
                                     OmegaConf.to_container(HydraConfig.get()), os.getcwd(),
                                     os.environ.get("SWEEPIT_TEST_ENV"))))
        return float(cfg.lr) * 2

    def on_job_start(self, config: DictConfig, **_: Any) -> None:
        self.events.append(("start", OmegaConf.to_container(config)))

    def on_job_end(self, config: DictConfig, job_return: Any, **_: Any) -> None:
        self.events.append(("end", (OmegaConf.to_container(config), job_return.return_value)))


def _files(job_dir: Path) -> dict[str, str]:
    """Every file of the job, its log's timestamps left out."""
    return {str(p.relative_to(job_dir)): re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", "<time>", p.read_text())
            for p in sorted(job_dir.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("extra", [
    [],
    ["hydra.job.chdir=true", "hydra.sweep.subdir=${hydra:job.num}_${hydra.job.override_dirname}",
     "+hydra.job.env_set.SWEEPIT_TEST_ENV=set"],
    ["hydra.output_subdir=saved", "hydra.verbose=true", "hydra.job_logging.root.level=DEBUG",
     "hydra.job_logging.handlers.file.filename=${hydra.runtime.output_dir}/own-${hydra.job.num}.log"],
])
def test_a_forked_job_runs_as_hydras_run_job_runs_it(extra: list[str], tmp_path: Path) -> None:
    setup_globals()
    cwd = os.getcwd()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", ["task=linreg", f"hydra.sweep.dir={tmp_path}", *extra],
                                           run_mode=RunMode.MULTIRUN)
        config = ComposedConfigs(copy.deepcopy(loader)).take(master, ["optimizer=sgd", "lr=0.3"])
        with open_dict(config):
            config.hydra.job.num = config.hydra.job.id = 3
        results = []
        for run in ("hydra", "sweepit"):
            seen = Seen()
            callbacks = type("Callbacks", (), {"on_job_start": seen.on_job_start, "on_job_end": seen.on_job_end})()
            context = HydraContext(config_loader=loader, callbacks=callbacks)  # type: ignore[arg-type]
            job_config = copy.deepcopy(config)
            if run == "hydra":
                ret = run_job(task_function=seen.task, config=job_config, job_dir_key="hydra.sweep.dir",
                              job_subdir_key="hydra.sweep.subdir", hydra_context=context)
            else:
                ret = run_forked_job(context, seen.task, job_config)
            assert os.getcwd() == cwd  # back where it started
            job_dirs = [p for p in tmp_path.iterdir() if p.is_dir()]
            assert len(job_dirs) == 1
            results.append((seen.events, _files(job_dirs[0]), ret.overrides, ret.working_dir, ret.task_name,
                            ret.status, ret.return_value, OmegaConf.to_container(ret.cfg),
                            OmegaConf.to_container(ret.hydra_cfg), OmegaConf.to_container(job_config)))
            for path in sorted(job_dirs[0].rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            job_dirs[0].rmdir()
    hydras, ours = results
    assert [name for name, _ in ours[0]] == ["start", "task", "end"]
    assert ours == hydras
    subdir = "saved" if "hydra.output_subdir=saved" in extra else ".hydra"
    log = "own-3.log" if "hydra.output_subdir=saved" in extra else "app.log"  # the job name of an initialize()d app
    assert set(ours[1]) == {f"{subdir}/config.yaml", f"{subdir}/hydra.yaml", f"{subdir}/overrides.yaml", log}
