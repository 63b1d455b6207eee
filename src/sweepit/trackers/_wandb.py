"""`logger=wandb`: one W&B run per job, grouped by sweep (`group=<study>/<timestamp>`).

Offline by default: compute nodes rarely reach the internet, so the run is written under the job directory for a
later `wandb sync`. A requeued or resumed job continues the same run (its id is kept in the job directory).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweepit._files import atomic_write
from sweepit.errors import ConfigError
from sweepit.results import JobPaths
from sweepit.trackers._base import ENDED_WELL, RunInfo, Tracker

log = logging.getLogger(__name__)
_MODES = ("offline", "online", "disabled", "shared")


class WandB(Tracker):
    module = "wandb"
    extra = "wandb"

    def __init__(self, project: str | None = None, entity: str | None = None, mode: str = "offline",
                 tags: list[str] | None = None) -> None:
        self.project = project
        self.entity = entity
        if mode not in _MODES:
            raise ConfigError(f"logger.wandb.mode must be one of {', '.join(_MODES)}, but got mode={mode!r}. "
                              "offline (the default) writes the run for a later `wandb sync`.")
        self.mode: Any = mode
        self.tags = list(tags or [])
        self.run: Any = None

    def start(self, run: RunInfo) -> None:
        import wandb

        id_file = JobPaths(run.job_dir).wandb_run
        run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(4)  # W&B's id alphabet
        atomic_write(id_file, run_id)
        self.run = wandb.init(
            project=self.project or run.group.split("/")[0], entity=self.entity, group=run.group, name=run.name,
            id=run_id, resume="allow", dir=str(run.job_dir), config=run.params, mode=self.mode,
            tags=self.tags or None, job_type="train", notes=" ".join(run.overrides) or None,
            settings=wandb.Settings(silent=True, console="off"),
        )

    def log(self, metrics: Mapping[str, float], epoch: int) -> None:
        self.run.log(dict(metrics), step=epoch)

    def finish(self, status: str, result: Mapping[str, Any] | None) -> None:
        if self.run is None:
            return
        self.run.summary["sweepit_status"] = status
        if result is not None and isinstance(result.get("objective"), int | float):
            self.run.summary["objective"] = float(result["objective"])
        run_dir = self.run.dir
        self.run.finish(exit_code=0 if status in ENDED_WELL else 1)
        self.run = None
        if self.mode == "offline":
            log.info(f"sweepit: W&B run saved offline; upload it with `wandb sync {Path(run_dir).parent}`")
