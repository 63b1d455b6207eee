"""Hydra callbacks of sweepit: the end-of-sweep summary for launchers that do not print one themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepSummary(Callback):
    """Prints the results table when a multirun ends (sweepit's own launchers print it themselves)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        target = str(config.hydra.launcher.get("_target_", ""))
        if target.startswith("hydra_plugins.sweepit"):
            return
        from sweepit.summary import summarize

        print(summarize(Path(config.hydra.sweep.dir)), flush=True)
