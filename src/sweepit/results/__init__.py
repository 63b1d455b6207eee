"""What sweeps leave behind and how it is read: result.json and metrics.jsonl, sweep.json, the sweep lock, tables.

The report (`<sweep>/report/`) is a room of its own above the engines: sweepit.reporting.
"""

from __future__ import annotations

from sweepit.results._claims import STALE_S as WORKER_STALE_S
from sweepit.results._claims import WAIT, Work, WorkSource, claim, claimed, heartbeat, silent_s
from sweepit.results._clean import clean
from sweepit.results._job_files import (
    RESULT_GRACE_S,
    JobOutcome,
    JobRecord,
    ResultGrace,
    error_line,
    job_dir_name,
    job_num,
    read_metrics,
    read_record,
    returned_fields,
    start_clean,
    tail_lines,
    total_wall_time_s,
    write_metrics,
    write_result,
)
from sweepit.results._ledger import Ledger, is_finished, record_end
from sweepit.results._live import LIVE_ROWS, array_of
from sweepit.results._lock import HEARTBEAT_S as LOCK_HEARTBEAT_S
from sweepit.results._lock import SweepLock, own_folder
from sweepit.results._manifest import (
    JobEntry,
    Manifest,
    command_line,
    driver_argv,
    failure_report,
    hydra_quote,
    iter_manifest,
    read_live_manifest,
    read_manifest,
    rerun_argv,
)
from sweepit.results._overrides import (
    ConfigSource,
    app_command,
    config_of,
    config_source,
    driver_env,
    load_yaml,
    own_key,
    own_overrides,
    rerun_command,
    short_value,
    typed_overrides,
)
from sweepit.results._paths import JobPaths, SweepPaths
from sweepit.results._progress import LiveReader, Progress, format_duration, sweep_eta_s
from sweepit.results._reported import asks_for_report, records_digest, report_shows, reports_at_end, write_records
from sweepit.results._rungs import EpochSeconds, RungPlan, read_rungs, write_rungs
from sweepit.results._status import (
    DIRECTIONS,
    STOP_EPOCH_ENV,
    JobState,
    Recorder,
    as_number,
    counts_text,
    default_direction_line,
    direction_is_default,
    finite_number,
    measures_speed,
    objective_direction,
    objective_values,
    read_study_file,
    speed_study_line,
    sweep_direction,
    sweeper_value,
    worst,
    write_study_file,
)
from sweepit.results._summary import (
    MAX_ROWS,
    JobRow,
    aligned,
    best_row,
    fixed_overrides,
    format_table,
    job_folders,
    job_row,
    summarize,
    sweep_jobs,
    swept_keys,
)
from sweepit.results._unread import UnreadKeys

__all__ = [
    "DIRECTIONS", "LIVE_ROWS", "LOCK_HEARTBEAT_S", "MAX_ROWS", "RESULT_GRACE_S", "STOP_EPOCH_ENV", "WAIT",
    "WORKER_STALE_S", "ConfigSource", "EpochSeconds", "JobEntry", "JobOutcome", "JobPaths", "JobRecord", "JobRow",
    "JobState", "Ledger", "LiveReader", "Manifest", "Progress", "Recorder", "ResultGrace", "RungPlan", "SweepLock",
    "SweepPaths", "UnreadKeys", "Work", "WorkSource", "aligned", "app_command", "array_of", "as_number",
    "asks_for_report", "best_row", "claim", "claimed", "clean", "command_line", "config_of", "config_source",
    "counts_text", "default_direction_line", "direction_is_default", "driver_argv", "driver_env", "error_line",
    "failure_report", "finite_number", "fixed_overrides", "format_duration", "format_table", "heartbeat", "hydra_quote",
    "is_finished", "iter_manifest", "job_dir_name", "job_folders", "job_num", "job_row", "load_yaml", "measures_speed",
    "objective_direction", "objective_values", "own_folder", "own_key", "own_overrides", "read_live_manifest",
    "read_manifest", "read_metrics", "read_record", "read_rungs", "read_study_file", "record_end", "records_digest",
    "report_shows", "reports_at_end", "rerun_argv", "rerun_command", "returned_fields", "short_value", "silent_s",
    "speed_study_line", "start_clean", "summarize", "sweep_direction", "sweep_eta_s", "sweep_jobs", "sweeper_value",
    "swept_keys", "tail_lines", "total_wall_time_s", "typed_overrides", "worst", "write_metrics", "write_records",
    "write_result", "write_rungs", "write_study_file"
]
