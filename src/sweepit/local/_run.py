"""The driver's records around each job, shared by the local and the Slurm launcher: each job's directory,
manifest states, the progress line, `result.json` for a job that died without writing one, and the report
of failed jobs at the end (raised as `SweepFailed`)."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.errors import CompactHydraException
from omegaconf import DictConfig, OmegaConf

from sweepit.errors import ConfigError, SweepFailedError
from sweepit.local._capture import STDERR_LOG, tail_lines
from sweepit.local._pool import Job
from sweepit.results._job_files import METRICS_FILE, RESULT_FILE, read_result, write_result
from sweepit.results._manifest import (
    FAILED_STATUSES,
    Manifest,
    command_line,
    is_finished,
    now_iso,
    rerun_argv,
    result_status,
    write_manifest,
)
from sweepit.results._progress import Progress

_MAX_LISTED = 10  # failed jobs named one by one in the final error


class SweepFailed(SweepFailedError, CompactHydraException):
    """A compact Hydra exception: Hydra prints the message alone, without a traceback, and exits with 1."""


def job_dir(config: DictConfig, sweep_dir: Path) -> Path:
    """`hydra.sweep.dir/hydra.sweep.subdir` as Hydra's run_job resolves it (the subdir may use hydra.job.*);
    `sweep_dir` is the sweep's, resolved once (its `${now:}` is cached, so every job's is the same)."""
    from hydra.core.hydra_config import HydraConfig

    raw = OmegaConf.to_container(config.hydra.sweep, resolve=False)
    if "${hydra:" not in str(raw):
        return sweep_dir / str(OmegaConf.select(config, "hydra.sweep.subdir"))  # no HydraConfig (a 20 ms copy)
    hydra_config = HydraConfig.instance()
    saved = hydra_config.cfg
    hydra_config.set_config(config)
    try:
        return sweep_dir / str(OmegaConf.select(config, "hydra.sweep.subdir"))
    finally:
        hydra_config.cfg = saved


def describe_exit(exit_code: int | None, stopped: bool) -> str:
    """How a job process ended, for a job that did not report a result."""
    if exit_code is None:
        return "ended without an exit status"
    if exit_code < 0:
        name = signal.Signals(-exit_code).name
        hint = ""
        if name == "SIGKILL" and not stopped:
            hint = " (the kernel's out-of-memory killer sends SIGKILL: check the job's memory)"
        return f"died from signal {name}{hint}"
    return f"exited with code {exit_code} before reporting a result (os._exit, or a crash in native code)"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class SweepRun:
    """Implements the pool's hooks for one `launch()`; `statuses` holds the outcome of each job it ran."""

    def __init__(self, manifest: Manifest, progress: Progress, compose: Callable[[Job], None], resume: bool,
                 check: Callable[[Job], None], stderr_tail_lines: int) -> None:
        self.manifest = manifest
        self.progress = progress
        self.compose = compose            # fills in the job's config, job_dir and n_gpus
        self.resume = resume
        self.check = check                # raises ConfigError for a job that cannot run here
        self.stderr_tail_lines = stderr_tail_lines
        self.statuses: dict[int, str] = {}
        self.skipped: set[int] = set()
        self._started_at: dict[int, str] = {}

    def prepare(self, job: Job) -> bool:
        self.compose(job)
        entry = self.manifest.jobs[job.num]
        entry.job_dir = str(job.job_dir)
        if self.resume and is_finished(job.job_dir):
            entry.state = result_status(job.job_dir) or "completed"
            self.skipped.add(job.num)
            self.progress.skip()
            return False
        try:
            self.check(job)
        except ConfigError as e:
            write_result(job.job_dir, {"status": "failed", "objective": None, "error": str(e),
                                       "recorded_by": "sweepit local launcher", "ended_at": now_iso()})
            self.statuses[job.num] = entry.state = "failed"
            self.progress.start()
            self.progress.finish(job.num, "failed", None)
            return False
        return True

    def before_fork(self, job: Job) -> None:
        # A rerun (resume) starts clean: a stale failed result must not stand for this attempt.
        for name in (RESULT_FILE, METRICS_FILE):
            (job.job_dir / name).unlink(missing_ok=True)

    def started(self, job: Job) -> None:
        entry = self.manifest.jobs[job.num]
        entry.state, entry.pid = "running", job.pid
        entry.started_at = self._started_at[job.num] = now_iso()
        entry.ended_at = None
        entry.extra = {"gpus": job.gpus} if job.gpus else {}
        write_manifest(self.manifest)
        self.progress.start()

    def ended(self, job: Job) -> None:
        status = self.record(job)
        self.statuses[job.num] = status
        entry = self.manifest.jobs[job.num]
        entry.state, entry.ended_at = status, now_iso()
        entry.extra["exit_code"] = job.exit_code
        write_manifest(self.manifest)
        self.progress.finish(job.num, status, job.wall_time_s)

    def tick(self) -> None:
        self.progress.draw()

    def before_echo(self) -> None:
        self.progress.clear()

    def record(self, job: Job) -> str:
        """The job's status; writes `result.json` when the job left none (its own one is kept as it is)."""
        try:
            own = read_result(job.job_dir)
        except ValueError:
            own = None
        if own is not None and "status" in own:
            return str(own["status"])
        reply = job.reply
        result: dict[str, Any] = {
            "objective": None, "hostname": socket.gethostname(), "pid": job.pid, "wall_time_s": job.wall_time_s,
            "started_at": self._started_at.get(job.num), "ended_at": now_iso(), "recorded_by": "sweepit local launcher",
        }
        for key in ("metric", "direction"):
            value = OmegaConf.select(job.config, key, default=None)
            if value is not None:
                result[key] = str(value)
        if reply is not None and reply.status == "completed":
            # An app that does not write result.json itself (not sweepit's train.py): record its return value.
            result.update(status="completed", objective=_number(reply.value))
            write_result(job.job_dir, result)
            return "completed"
        if job.stopped or (reply is not None and reply.status == "interrupted"):
            result.update(status="interrupted", error=reply.error if reply else "stopped by the sweep driver")
        elif reply is not None:
            result.update(status="failed", error=reply.error, traceback=reply.traceback)
        else:
            result.update(status="failed", error=describe_exit(job.exit_code, job.stopped))
        if reply is None and job.exit_code is not None and job.exit_code < 0:
            result["exit_signal"] = signal.Signals(-job.exit_code).name
        elif reply is None:
            result["exit_code"] = job.exit_code
        result["stderr_tail"] = tail_lines(job.job_dir / STDERR_LOG, self.stderr_tail_lines)
        write_result(job.job_dir, result)
        return str(result["status"])

    def failure_report(self, jobs: list[Job], stop_signal: int | None, fail_on_error: bool) -> str | None:
        """The message of the error that ends a sweep with failures, or None when it ends cleanly."""
        bad = [j for j in jobs if self.statuses.get(j.num) in FAILED_STATUSES]
        if stop_signal is None and (not bad or not fail_on_error):
            return None
        counts: dict[str, int] = {}
        for j in jobs:
            status = "finished before" if j.num in self.skipped else self.statuses.get(j.num, "not started")
            counts[status] = counts.get(status, 0) + 1
        tally = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        if stop_signal is not None:
            lines = [f"sweep stopped by {signal.Signals(stop_signal).name}: {tally} (of {len(jobs)} jobs launched)."]
        else:
            lines = [f"{len(bad)} of {len(jobs)} jobs failed or were interrupted ({tally}):"]
        for j in bad[:_MAX_LISTED]:
            result = read_result(j.job_dir) or {}
            error = str(result.get("error") or "").splitlines()
            what = error[0][:200] if error else "no error recorded"
            lines.append(f"  job {j.num} [{' '.join(j.overrides)}]: {self.statuses[j.num]}: {what}")
            lines.append(f"    logs: {j.job_dir / STDERR_LOG}")
        if len(bad) > _MAX_LISTED:
            lines.append(f"  ... and {len(bad) - _MAX_LISTED} more (see the table above).")
        sweep_dir = Path(self.manifest.sweep_dir)
        lines += [
            f"Resume (finished jobs are skipped): sweepit resume {sweep_dir}",
            f"  which runs: {command_line(rerun_argv(self.manifest.argv, sweep_dir), self.manifest.cwd)}",
        ]
        if stop_signal is None:
            lines.append("Set hydra.launcher.fail_on_error=false to end with exit status 0 despite failed jobs.")
        return "\n".join(lines)
