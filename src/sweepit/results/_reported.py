"""Whether a sweep's report (`<sweep>/report/`) shows its jobs as they are: it keeps a digest of the job records it
was built from, which `sweepit status` compares with the records now. (Their files' times do not say it: `sweepit
status` records a Slurm job's last queue state and node after the sweep ended, which changes nothing a report shows.)"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sweepit._files import atomic_write
from sweepit.results._manifest import JobEntry
from sweepit.results._overrides import saved_hydra
from sweepit.results._paths import RECORDS_FILE, REPORT_PAGE, SweepPaths
from sweepit.results._records import job_dict

# The callback that writes a sweep's report when its driver ends (hydra_plugins.sweepit.callbacks.SweepSummary).
SUMMARY_CALLBACK = "hydra_plugins.sweepit.callbacks.SweepSummary"


def records_digest(jobs: Iterable[Mapping[str, Any]]) -> str:
    """A digest of each job's number, state, start and end, in job order (sweep.json's records): it changes when a job
    is added, starts, ends or runs again, and not when Slurm bookkeeping or a moved sweep's paths do."""
    rows = [(j.get("num"), "\t".join(str(j.get(k)) for k in ("num", "state", "started_at", "ended_at"))) for j in jobs]
    rows.sort(key=lambda row: row[0] if isinstance(row[0], int) else -1)
    return hashlib.sha256("\n".join(line for _, line in rows).encode()).hexdigest()


def write_records(report_dir: Path, digest: str) -> None:
    """Record which job records the report in `report_dir` was built from (after its page: a page without it, or
    with an older one, is taken for out of date)."""
    atomic_write(Path(report_dir) / RECORDS_FILE, json.dumps({"records": digest}) + "\n", fsync=False)


def report_shows(sweep_dir: Path, jobs: Iterable[JobEntry]) -> bool:
    """Whether `<sweep>/report/` was built from the job records `jobs` (sweep.json's, brought up to date)."""
    report = SweepPaths(sweep_dir).report
    if not (report / REPORT_PAGE).is_file():
        return False
    try:
        built_from = json.loads((report / RECORDS_FILE).read_text()).get("records")
    except (OSError, ValueError, AttributeError):
        return False  # a report of an older sweepit, or cut short: `sweepit report` writes it again
    return bool(built_from == records_digest(map(job_dict, jobs)))


def reports_at_end(sweep_dir: Path) -> bool | None:
    """Whether the sweep's driver writes its report when the sweep ends: the config Hydra kept (multirun.yaml) has
    sweepit's summary callback, its `report` on. None when there is no multirun.yaml to tell."""
    hydra = saved_hydra(SweepPaths(sweep_dir).multirun)
    if not hydra:
        return None
    return asks_for_report(hydra.get("callbacks"))


def asks_for_report(callbacks: Any) -> bool:
    """Whether a sweep's `hydra.callbacks` (a mapping: a DictConfig, or the dict of its saved multirun.yaml) end it
    with its report: sweepit's summary callback is among them, its `report` true as the callback itself reads it."""
    if not isinstance(callbacks, Mapping):
        return False
    return any(isinstance(c, Mapping) and c.get("_target_") == SUMMARY_CALLBACK and bool(c.get("report", True))
               for c in callbacks.values())
