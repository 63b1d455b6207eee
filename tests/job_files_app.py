"""Runs a Hydra app's multirun (`python job_files_app.py MODE OUT.json APP.py ARGS...`) with sweepit's local
launcher chosen, in one of two ways, and writes the JobReturn of each job to OUT.json:
- `sweepit`: as the local launcher runs it (each job in a process forked for it, through sweepit's job path);
- `hydra`: each job composed by Hydra's own config loader and run by Hydra's own `run_job`, as Hydra's basic
  launcher runs it, in the very configuration the local launcher gets (its `hydra.launcher` node and choices too),
  so that every file Hydra writes can be compared byte for byte.
"""

from __future__ import annotations

import json
import runpy
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, run_job, setup_globals
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict


def fields(ret: JobReturn) -> dict[str, Any]:
    """What a sweeper reads of a JobReturn, as plain values."""
    return {"overrides": list(ret.overrides or []), "working_dir": ret.working_dir, "task_name": ret.task_name,
            "status": ret.status.name, "return_value": repr(ret.return_value),
            "cfg": OmegaConf.to_container(ret.cfg), "hydra_cfg": OmegaConf.to_container(ret.hydra_cfg)}


def main(mode: str, out: Path, app: str, args: list[str]) -> None:
    Plugins.instance()  # Hydra's plugin scan runs the plugins' modules again: the class patched here is the one it uses
    from hydra_plugins.sweepit.local_launcher import LocalLauncher

    returns: list[dict[str, Any]] = []
    if mode == "hydra":
        def setup(self: Any, *, hydra_context: HydraContext, task_function: TaskFunction,
                  config: DictConfig) -> None:
            self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

        def launch(self: Any, job_overrides: Sequence[Sequence[str]],
                   initial_job_idx: int) -> list[JobReturn]:
            # Hydra's BasicLauncher.launch, less its log lines (which land in the previous job's log file).
            setup_globals()
            assert self.config is not None and self.hydra_context is not None and self.task_function is not None
            Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
            runs = []
            for idx, overrides in enumerate(job_overrides, initial_job_idx):
                sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
                with open_dict(sweep_config):
                    sweep_config.hydra.job.id = sweep_config.hydra.job.num = idx
                runs.append(run_job(hydra_context=self.hydra_context, task_function=self.task_function,
                                    config=sweep_config, job_dir_key="hydra.sweep.dir",
                                    job_subdir_key="hydra.sweep.subdir"))
            returns.extend(fields(r) for r in runs)
            return runs

        LocalLauncher.setup, LocalLauncher.launch = setup, launch  # type: ignore[method-assign, assignment]
    else:
        launch_jobs = LocalLauncher.launch

        def launch_and_keep(self: Any, job_overrides: Sequence[Sequence[str]],
                            initial_job_idx: int) -> Sequence[JobReturn]:
            runs = launch_jobs(self, job_overrides, initial_job_idx)
            returns.extend(fields(r) for r in runs)
            return runs

        LocalLauncher.launch = launch_and_keep  # type: ignore[method-assign]
    sys.argv = [app, *args]
    sys.path[0] = str(Path(app).resolve().parent)  # as `python APP.py` has it
    try:
        runpy.run_path(app, run_name="__main__")
    finally:
        out.write_text(json.dumps(returns, indent=1, default=repr))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4:])
