"""Hydra callbacks of sweepit: each job's record under any launcher, the end-of-sweep summary table and report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def ends_with_report(config: DictConfig) -> bool:
    """Whether the sweep ends with `<sweep dir>/report/`: its SweepSummary callback's `report` (none: no report)."""
    from sweepit.results import asks_for_report

    return asks_for_report(config.hydra.get("callbacks"))


def preload_report(config: DictConfig) -> None:
    """The report's imports (the reporting room, matplotlib), when the sweep ends with a report: a driver makes them
    while its jobs run, and the report then costs its drawing alone."""
    if ends_with_report(config):
        from sweepit.reporting import preload

        preload()


class SweepSummary(Callback):
    """What sweepit adds to a sweep whatever launcher runs it: under another launcher (Hydra's `basic` runs every
    job in one process), each job's session and its record, as sweepit's launchers make them themselves; at the end
    of a multirun, the results table and `<sweep dir>/report/` (`hydra.callbacks.summary.report=false`: none)."""

    def __init__(self, report: bool = True) -> None:
        self.report = report
        self._session: Any = None  # the job's session when this callback began it

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        from sweepit.train import join_session

        session, began = join_session(Path(str(config.hydra.runtime.output_dir)), config)
        self._session = session if began else None  # else sweepit's job runner began it, and records the job

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        from hydra_plugins.sweepit._runner import record

        record(session, job_return)  # and the session ends

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        """A single run that failed with sweepit's own plain-language error, run from the command line: Hydra raises
        the job's error after this, and would add its hint to set HYDRA_FULL_ERROR=1 for a stack trace, which says
        nothing more of such an error. Raised as SystemExit instead, Hydra's report passes it by and Python prints
        the message alone, with exit status 1. HYDRA_FULL_ERROR=1, or a caller of Hydra's API, gets the error."""
        import os

        from hydra_plugins.sweepit._launcher import reported_by_hydra
        from sweepit.errors import SweepitError

        job_return = kwargs.get("job_return")
        error = getattr(job_return, "_return_value", None)
        if isinstance(error, SweepitError) and os.environ.get("HYDRA_FULL_ERROR") != "1" and reported_by_hydra():
            job_return.return_value = SystemExit(str(error))  # type: ignore[union-attr]

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        launcher = config.hydra.launcher
        if launcher.get("dry_run", False) or launcher.get("wait", True) is False:
            return  # nothing ran yet: `sweepit status` / `sweepit report` later
        sweep_dir = Path(config.hydra.sweep.dir)
        # sweepit's launchers and its Optuna sweeper print the table themselves: once is enough.
        if not any(str(node.get("_target_", "")).startswith("hydra_plugins.sweepit")
                   for node in (config.hydra.launcher, config.hydra.sweeper)):
            from sweepit.results import summarize

            print(summarize(sweep_dir), flush=True)
        if self.report:
            from sweepit.reporting import try_build_report

            try_build_report(sweep_dir)
