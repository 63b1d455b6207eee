"""Hydra callbacks of sweepit: the end-of-sweep summary table and report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepSummary(Callback):
    """When a multirun ends: the results table (sweepit's own launchers and sweeper print it themselves) and
    `<sweep dir>/report/` (turn off with `hydra.callbacks.summary.report=false`)."""

    def __init__(self, report: bool = True) -> None:
        self.report = report

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        launcher = config.hydra.launcher
        if launcher.get("dry_run", False) or launcher.get("wait", True) is False:
            return  # nothing ran yet: `sweepit status` / `sweepit report` later
        sweep_dir = Path(config.hydra.sweep.dir)
        # sweepit's launchers and its Optuna sweeper print the table themselves: once is enough.
        ours = [str(node.get("_target_", "")).startswith("hydra_plugins.sweepit")
                for node in (config.hydra.launcher, config.hydra.sweeper)]
        if not any(ours):
            from sweepit.results._summary import summarize

            print(summarize(sweep_dir), flush=True)
        if self.report:
            from sweepit.results.report import try_build_report

            try_build_report(sweep_dir)
