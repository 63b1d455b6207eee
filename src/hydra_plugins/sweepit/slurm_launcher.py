"""sweepit's Slurm launcher (`hydra/launcher=slurm` or a cluster profile): every job of the sweep as its own
Slurm job, submitted through submitit's executor API and followed by the driver.

Each job's request comes from its own config (`trainer.gpus`, `timeout_min`), so one sweep may mix GPU
counts; jobs with the same request go into one job array. The driver then follows the jobs with its own
poll loop (squeue, sacct, result.json) and ends with the results table, or detaches (`wait=false`) and
leaves `sweep.json` for `sweepit status DIR` and `sweepit resume DIR`. For the Optuna sweeper it also runs
jobs one by one (`start` / `wait_any` / `close`): each trial is submitted the moment it is asked for.
Heavy modules (submitit, torch) are
imported in `launch()` only, so Hydra's plugin scan stays fast.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, configure_log, setup_globals
from hydra.errors import CompactHydraException
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from hydra_plugins.sweepit._hydra import SweepFailed, job_dir, job_return, setup_driver
from hydra_plugins.sweepit.config import SlurmLauncherConf
from sweepit.errors import ConfigError, SweepitError
from sweepit.results._job_files import METRICS_FILE, RESULT_FILE, read_result
from sweepit.results._manifest import (
    JobEntry,
    Manifest,
    failure_report,
    is_finished,
    now_iso,
    open_manifest,
    result_status,
    write_manifest,
)
from sweepit.results._progress import Progress
from sweepit.results._summary import summarize
from sweepit.slurm import _messages as messages
from sweepit.slurm import _submit as submission
from sweepit.slurm._cluster import SlurmError
from sweepit.slurm._follow import Follower
from sweepit.slurm._plan import check_time_limit, dry_run_text, place
from sweepit.slurm._shape import Shape, integer, sbatch_parameters
from sweepit.slurm._states import look
from sweepit.slurm._submit import PlannedJob

log = logging.getLogger(__name__)


class SlurmLaunchError(SweepitError, CompactHydraException):
    """Bad input or an unreachable Slurm, found before anything is submitted; Hydra prints the message alone."""


_LIST_YOURS = {
    "account": "; `sacctmgr -n show assoc user=$USER format=account` lists yours.",
    "qos": "; `sacctmgr -n show assoc user=$USER format=qos` lists yours.",
    "partition": "; `sinfo -s` lists the partitions.",
}


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _check(ok: bool, rule: str, value: str, fix: str) -> None:
    if not ok:
        raise SlurmLaunchError(f"{rule}, but got {value}. {fix}")


class SlurmLauncher(Launcher):
    def __init__(self, **params: Any) -> None:
        # The schema's dataclass holds the settings: an unknown key is refused here as by Hydra's struct check.
        try:
            self.conf = SlurmLauncherConf(**{k: _plain(v) for k, v in params.items()})
        except TypeError as e:
            known = ", ".join(sorted(f for f in SlurmLauncherConf.__dataclass_fields__ if not f.startswith("_")))
            raise SlurmLaunchError(f"hydra.launcher takes only its own keys ({known}), but {e}.") from None
        c = self.conf
        for key in c.required:
            _check(key in SlurmLauncherConf.__dataclass_fields__, "hydra.launcher.required must list launcher keys",
                   f"required={c.required}", "Remove the unknown names from it.")
            _check(getattr(c, key) not in (None, ""), f"hydra.launcher.{key} must be set on this cluster (it refuses "
                   "jobs without one)", f"{key}=null", f"Add hydra.launcher.{key}=<yours> to the command, or export "
                   f"SBATCH_{key.upper()}=<yours>" + _LIST_YOURS.get(key, "."))
        for key in ("max_nodes", "cpus_per_task", "array_parallelism"):
            _check(isinstance(getattr(c, key), int) and getattr(c, key) >= 1, f"hydra.launcher.{key} must be >= 1",
                   f"{key}={getattr(c, key)!r}", f"Set for example hydra.launcher.{key}=1.")
        for key in ("gpus_per_node", "max_array_size", "mem_gb"):
            value = getattr(c, key)
            _check(value is None or value >= 1, f"hydra.launcher.{key} must be null or >= 1", f"{key}={value!r}",
                   f"Set for example hydra.launcher.{key}=null.")
        for key in ("signal_delay_s", "max_num_timeout", "stderr_tail_lines", "result_grace_s"):
            _check(getattr(c, key) >= 0, f"hydra.launcher.{key} must be >= 0", f"{key}={getattr(c, key)!r}",
                   f"Set for example hydra.launcher.{key}=0.")
        _check(c.poll_interval_s > 0, "hydra.launcher.poll_interval_s must be > 0",
               f"poll_interval_s={c.poll_interval_s!r}", "Set for example hydra.launcher.poll_interval_s=2.")
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None
        self._async: tuple[Manifest, Follower, Progress] | None = None  # the run of start()/wait_any()
        self._started: dict[int, PlannedJob] = {}
        self._cancelled = False  # the jobs in flight were cancelled (Ctrl-C): wait for Slurm to end them

    # Attributes as on the local launcher, which a sweeper may switch off (sweepit's Optuna sweeper does).
    @property
    def fail_on_error(self) -> bool:
        return self.conf.fail_on_error

    @fail_on_error.setter
    def fail_on_error(self, value: bool) -> None:
        self.conf.fail_on_error = value

    @property
    def print_summary(self) -> bool:
        return self.conf.print_summary

    @print_summary.setter
    def print_summary(self, value: bool) -> None:
        self.conf.print_summary = value

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function
        # The sweeper shares this context: the configs it composes to validate a batch are kept for launch().
        self.composed = setup_driver(hydra_context)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        sweep_dir = self._begin()
        jobs, jobs_by_shape, max_array_size = self._plan_all(job_overrides, initial_job_idx, sweep_dir)
        if self.conf.dry_run:
            print(dry_run_text(jobs_by_shape, sweep_dir, max_array_size, self.conf), flush=True)
            return []
        return self._run(jobs, sweep_dir, max_array_size)

    def _begin(self) -> Path:
        """Hydra's logging in the driver; the sweep directory."""
        assert self.config is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return Path(str(self.config.hydra.sweep.dir)).absolute()

    # -- before anything is submitted ------------------------------------------------------------------------
    def _plan_all(self, job_overrides: Sequence[Sequence[str]], first_num: int, sweep_dir: Path
                  ) -> tuple[list[PlannedJob], dict[Shape, list[PlannedJob]], int]:
        """Each job's config and request, checked against the profile and the partition (see `place`)."""
        try:
            jobs = [self._plan(first_num + i, list(o), sweep_dir) for i, o in enumerate(job_overrides)]
            jobs_by_shape, max_array_size = place(jobs, self.conf)
        except (ConfigError, SlurmError) as e:
            raise SlurmLaunchError(str(e)) from None
        finally:
            self.composed.clear()
        return jobs, jobs_by_shape, max_array_size

    def _plan(self, num: int, overrides: list[str], sweep_dir: Path) -> PlannedJob:
        assert self.config is not None
        config = self.composed.take(self.config, overrides)
        with open_dict(config):
            config.hydra.job.id = num
            config.hydra.job.num = num
        c = self.conf
        gpus = integer(OmegaConf.select(config, c.gpus_key, default=1), c.gpus_key, num, 1)
        timeout_min = integer(OmegaConf.select(config, c.timeout_key, default=None), c.timeout_key, num, 1)
        check_time_limit(num, timeout_min, c)
        return PlannedJob(num=num, overrides=overrides, config=config, job_dir=job_dir(config, sweep_dir),
                          shape=Shape(nodes=1, tasks_per_node=gpus, timeout_min=timeout_min))

    # -- submission and following ---------------------------------------------------------------------------
    def _run(self, jobs: list[PlannedJob], sweep_dir: Path, max_array_size: int) -> Sequence[JobReturn]:
        c = self.conf
        sweep_dir.mkdir(parents=True, exist_ok=True)
        manifest = open_manifest(sweep_dir, launcher="slurm")
        skipped, adopted, to_submit = self._sort_out(jobs, manifest)
        for job in to_submit:
            manifest.jobs[job.num] = JobEntry(num=job.num, overrides=job.overrides, job_dir=str(job.job_dir),
                                              state="not started")
        write_manifest(manifest)
        submitted = self._submit(to_submit, manifest, sweep_dir, max_array_size)
        following = sorted([j.num for j in adopted] + [j.num for j in to_submit])
        log.info(messages.submitted(len(jobs), submitted, len(skipped), len(adopted), sweep_dir))
        if not c.wait:
            print(messages.detached(manifest, following, sweep_dir), flush=True)
            return [self._job_return(j, None) for j in jobs]
        progress = Progress(len(jobs))
        progress.skip(len(skipped))
        follower = Follower(manifest, following, progress, c.poll_interval_s, c.result_grace_s, c.stderr_tail_lines)
        try:
            progress.draw()
            follower.run()
        finally:
            progress.close()
        if follower.stop_signal is not None:
            raise SweepFailed(messages.stopped(manifest, follower.pending, follower.stop_signal, sweep_dir))
        if c.print_summary:
            print(summarize(sweep_dir), flush=True)
        report = failure_report(manifest, jobs, dict(follower.statuses), {j.num for j in skipped}, None,
                                c.fail_on_error)
        if report is not None:
            raise SweepFailed(report)
        return [self._job_return(j, follower.statuses.get(j.num)) for j in jobs]

    def _sort_out(self, jobs: list[PlannedJob], manifest: Manifest
                  ) -> tuple[list[PlannedJob], list[PlannedJob], list[PlannedJob]]:
        """(finished before, still in Slurm's hands, to submit): only a resume skips or adopts jobs."""
        if not self.conf.resume:
            return [], [], list(jobs)
        known = {j.num: manifest.jobs[j.num] for j in jobs
                 if j.num in manifest.jobs and manifest.jobs[j.num].job_dir == str(j.job_dir)}
        try:
            seen = look(known.values())
        except SlurmError as e:
            raise SlurmLaunchError(str(e)) from None
        skipped, adopted, to_submit = [], [], []
        for job in jobs:
            s = seen.get(job.num)
            if is_finished(job.job_dir):
                skipped.append(job)
                entry = manifest.jobs.setdefault(job.num, JobEntry(job.num, job.overrides, str(job.job_dir)))
                entry.state = result_status(job.job_dir) or "completed"
            elif s is not None and not s.final and not s.dead:
                adopted.append(job)  # queued or running from an earlier submission: follow it, do not submit again
            else:
                to_submit.append(job)
        return skipped, adopted, to_submit

    def _submit(self, jobs: list[PlannedJob], manifest: Manifest, sweep_dir: Path, max_array_size: int
                ) -> list[str]:
        """One sbatch call per array; the manifest is written after each, so a refusal midway leaves a record."""
        from hydra.core.singleton import Singleton

        from hydra_plugins.sweepit._hydra import TASK_DIR, SlurmTask

        assert self.hydra_context is not None and self.task_function is not None
        c = self.conf
        job_name = f"{c.job_name}-{secrets.token_hex(3)}"
        context = HydraContext(config_loader=self.composed.loader, callbacks=self.hydra_context.callbacks)
        state = Singleton.get_state()
        ids: list[str] = []
        for chunk in submission.arrays(jobs, max_array_size):
            tasks = []
            for job in chunk:
                for name in (RESULT_FILE, METRICS_FILE):  # a rerun starts clean; checkpoint.pt is kept to resume
                    (job.job_dir / name).unlink(missing_ok=True)
                shutil.rmtree(job.job_dir / TASK_DIR, ignore_errors=True)
                tasks.append(SlurmTask(context, self.task_function, job.config, state, str(job.job_dir)))
            folder = submission.fresh_folder(sweep_dir)
            try:
                chunk_ids = submission.submit(tasks, sbatch_parameters(chunk[0].shape, c, job_name), folder,
                                              c.max_num_timeout, c.python)
            except SlurmError as e:
                done = (f" {len(ids)} job(s) were submitted before ({', '.join(ids)}): follow them with "
                        f"`sweepit status {sweep_dir}`." if ids else " Nothing was submitted.")
                raise SlurmLaunchError(f"{e}{done}") from None
            submitted_at = now_iso()
            for job, job_id in zip(chunk, chunk_ids, strict=True):
                stdout, stderr = submission.log_paths(folder, job_id)
                submission.link_logs(job.job_dir, stdout, stderr)
                array_id, _, index = job_id.partition("_")
                entry = manifest.jobs[job.num]
                entry.state, entry.pid, entry.started_at, entry.ended_at = "queued", None, None, None
                entry.extra = {
                    "slurm_job_id": job_id, "slurm_array_job_id": array_id,
                    "slurm_array_index": int(index) if index else None, "slurm_job_name": job_name,
                    "submitit_folder": str(folder), "stdout": str(stdout), "stderr": str(stderr),
                    "submitted_at": submitted_at, "gpus": job.shape.n_gpus, "nodes": job.shape.nodes,
                    "timeout_min": job.shape.timeout_min,
                    "metric": _select_str(job.config, "metric"), "direction": _select_str(job.config, "direction"),
                }
            ids.extend(chunk_ids)
            write_manifest(manifest)
        return ids

    # -- one job at a time, as a sweeper asks: the Optuna sweeper's AsyncLauncher protocol ---------------------
    def start(self, overrides: Sequence[str], job_num: int) -> None:
        """Submit the job `job_num` now (one sbatch call); `wait_any` follows it with the others in flight."""
        _check(not self.conf.dry_run, "hydra.launcher.dry_run shows the submission of a fixed list of jobs, so an "
               "adaptive search (whose next trial depends on the last ones) cannot use it", "dry_run=true",
               "Drop hydra.launcher.dry_run, or dry-run a grid of the same space with the basic sweeper.")
        if self._async is None:
            sweep_dir = self._begin()
            sweep_dir.mkdir(parents=True, exist_ok=True)
            manifest = open_manifest(sweep_dir, launcher="slurm")
            progress = Progress(0)
            c = self.conf
            self._async = manifest, Follower(manifest, [], progress, c.poll_interval_s, c.result_grace_s,
                                             c.stderr_tail_lines), progress
        manifest, follower, _ = self._async
        sweep_dir = Path(manifest.sweep_dir)
        (job,), _, max_array_size = self._plan_all([overrides], job_num, sweep_dir)
        manifest.jobs[job.num] = JobEntry(num=job.num, overrides=job.overrides, job_dir=str(job.job_dir),
                                          state="not started")
        self._submit([job], manifest, sweep_dir, max_array_size)
        self._started[job.num] = job
        follower.add(job.num)

    def wait_any(self, timeout_s: float | None = None) -> list[tuple[int, JobReturn]]:
        """Follow the jobs in flight (one squeue call every `poll_interval_s`) until one of them ends or
        `timeout_s` passes; returns `(job_num, JobReturn)` of each job that ended since the last call.

        Ctrl-C (or SIGTERM) cancels every job in flight with scancel; they come back as `interrupted` once
        Slurm has ended them, so the sweeper stops with its message. A second Ctrl-C stops waiting for that."""
        assert self._async is not None, "start() a job before wait_any()"
        manifest, follower, _ = self._async
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        signals: list[int] = []

        def on_signal(signum: int, frame: Any) -> None:
            if signals:
                raise KeyboardInterrupt(f"stopped by a second {signal.Signals(signum).name}")
            signals.append(signum)

        handlers = {}
        if threading.current_thread() is threading.main_thread():
            handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        def ended() -> list[int]:
            return [n for n in self._started if n in follower.statuses]

        try:
            while not ended() and follower.pending and (deadline is None or time.monotonic() < deadline):
                if signals and not self._cancelled:
                    self._cancel_in_flight(manifest, follower, signal.Signals(signals[0]).name)
                next_look = time.monotonic() + self.conf.poll_interval_s
                follower.poll()
                while ((not signals or self._cancelled) and time.monotonic() < min(next_look, deadline or next_look)
                       and not ended()):
                    time.sleep(0.1)
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        return [(n, self._job_return(self._started.pop(n), follower.statuses[n])) for n in ended()]

    def _cancel_in_flight(self, manifest: Manifest, follower: Follower, why: str) -> None:
        from sweepit.slurm._cluster import scancel

        self._cancelled = True
        left = [n for n in follower.pending if n in self._started]
        ids = [str(manifest.jobs[n].extra["slurm_job_id"]) for n in left if manifest.jobs[n].extra.get("slurm_job_id")]
        if ids:
            scancel(ids)
            log.warning(f"{why}: cancelled {len(ids)} Slurm job(s) still in flight: {', '.join(ids)} (jobs "
                        f"{', '.join(map(str, left))})")

    def close(self) -> None:
        """End the run of start()/wait_any(). Jobs still in flight (the sweeper stopped on an error) are
        cancelled with scancel, since no one will read their results; the manifest records them."""
        if self._async is None:
            return
        manifest, follower, progress = self._async
        self._async = None
        left = [n for n in follower.pending if n in self._started]
        try:
            if left and not self._cancelled:
                self._cancel_in_flight(manifest, follower, "the search stopped")
            for n in left:
                manifest.jobs[n].state, manifest.jobs[n].ended_at = "interrupted", now_iso()
        finally:
            progress.close()
            write_manifest(manifest)
            self._started.clear()
            self._cancelled = False

    # -- returns ------------------------------------------------------------------------------------------
    def _job_return(self, job: PlannedJob, status: str | None) -> JobReturn:
        return job_return(job.overrides, job.config, job.job_dir, status)


def _select_str(config: DictConfig, key: str) -> str | None:
    value = OmegaConf.select(config, key, default=None)
    return None if value is None else str(value)


def _read(job_dir: Path) -> dict[str, Any]:
    try:
        return read_result(job_dir) or {}
    except ValueError:
        return {}
