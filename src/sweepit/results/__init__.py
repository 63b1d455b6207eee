"""What sweeps leave behind and how it is read: result.json and metrics.jsonl, sweep.json, the sweep lock, tables.

    rows = collect("outputs/optimizer_lr/2026-11-21_10-00-00")     # one JobRow per job directory
    print(summarize(sweep_dir))                                     # the table a sweep prints at its end

The report (`<sweep>/report/`: CSV, Markdown, plots, HTML) is a room of its own above the engines: sweepit.reporting.
"""

from __future__ import annotations

from sweepit.results._job_files import METRICS_FILE, RESULT_FILE, JobRecord, read_metrics, read_result
from sweepit.results._status import (
    STATUSES,
    Recorder,
    State,
    Status,
    objective_direction,
    sweep_direction,
    sweeper_value,
)
from sweepit.results._summary import JobRow, collect, summarize

__all__ = ["METRICS_FILE", "RESULT_FILE", "STATUSES", "JobRecord", "JobRow", "Recorder", "State", "Status", "collect",
           "objective_direction", "read_metrics", "read_result", "summarize", "sweep_direction", "sweeper_value"]
