"""What sweeps leave behind and how it is read: result.json and metrics.jsonl, sweep.json, tables, reports.

    rows = collect("outputs/optimizer_lr/2026-11-21_10-00-00")     # one JobRow per job directory
    print(summarize(sweep_dir))                                     # the table a sweep prints at its end
    build_report(sweep_dir)                                         # <sweep>/report/: CSV, Markdown, plots, HTML
"""

from __future__ import annotations

from sweepit.results._job_files import METRICS_FILE, RESULT_FILE, read_metrics, read_result
from sweepit.results._status import STATUSES, objective_direction, sweep_direction, sweeper_value
from sweepit.results._summary import JobRow, collect, summarize
from sweepit.results.report import build_report

__all__ = ["METRICS_FILE", "RESULT_FILE", "STATUSES", "JobRow", "build_report", "collect", "objective_direction",
           "read_metrics", "read_result", "summarize", "sweep_direction", "sweeper_value"]
