"""What sweepit's two launchers share in the driver (`SweepitLauncher`), and sweepit's errors as compact Hydra ones."""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from hydra.core.utils import JobReturn, configure_log, setup_globals
from hydra.errors import CompactHydraException
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from hydra_plugins.sweepit._compose import MAX_BASES, ComposedConfigs
from hydra_plugins.sweepit._plan_job import JobPlans, job_dir, selected
from sweepit.errors import SweepFailedError, SweepitError, SweepStoppedError
from sweepit.results import SweepLock, SweepPaths, hydra_quote, own_folder

log = logging.getLogger(__name__)


class SweepFailed(SweepFailedError, CompactHydraException):
    """A compact Hydra exception: Hydra prints the message alone, without a traceback, and exits with 1."""


class LaunchError(SweepitError, CompactHydraException):
    """Bad input, an unreachable Slurm, another driver on the sweep directory: found before a job runs; Hydra
    prints the message alone."""


def plain_options(params: Mapping[str, Any]) -> dict[str, Any]:
    """A plugin's keys as its engine's option dataclass takes them: Hydra hands lists and dicts over as config
    nodes, which become plain (resolved) containers; everything else is passed as it is."""
    return {str(k): OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
            for k, v in params.items()}


@contextlib.contextmanager
def compact_errors() -> Iterator[None]:
    """sweepit's errors as compact Hydra exceptions: Hydra prints the message alone, without a traceback
    (HYDRA_FULL_ERROR=1 shows it). Where Hydra's command line would print one (`run_and_report`), sweepit prints it
    and exits with Hydra's status 1 itself: Hydra would add its hint to set HYDRA_FULL_ERROR=1 for a stack trace,
    which says nothing more of a plain-language error. A sweep stopped by a signal is no error either."""
    try:
        yield
    except SweepStoppedError as e:
        sys.stdout.flush()
        print(e, file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    except SweepitError as e:
        compact = e if isinstance(e, SweepFailed | LaunchError) else (
            SweepFailed(str(e)) if isinstance(e, SweepFailedError) else LaunchError(str(e)))
        if os.environ.get("HYDRA_FULL_ERROR") != "1" and reported_by_hydra():
            sys.stdout.flush()
            print(compact, file=sys.stderr, flush=True)
            raise SystemExit(1) from None
        if compact is e:
            raise
        raise compact from None


def reported_by_hydra() -> bool:
    """Whether an error raised here ends in Hydra's `run_and_report` (an app's command line), not in a caller of
    Hydra's API (a test, a notebook), which is to get the exception."""
    from hydra._internal.utils import run_and_report

    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code is not run_and_report.__code__:
        frame = frame.f_back
    return frame is not None


@functools.cache
def light_exit() -> None:
    """Freeze the heap at exit: a final garbage collection over every object torch created is most of what an
    interpreter with torch does to shut down. Registered once, before the other atexit handlers, so it runs last."""
    atexit.register(gc.freeze)


# A task whose module imported sweepit's `run_job` (train.py's) trains with sweepit's loop, which checks its config
# first.
_OWN_LOOP = "sweepit.train._entry"
MAX_CHECKED = 32  # jobs whose values a driver checks before it launches (a compose and a check each)


def runs_sweepits_loop(task_function: Any) -> bool:
    """Whether the app's task trains with sweepit's own loop (its module imported sweepit's `run_job`)."""
    entry = sys.modules.get(_OWN_LOOP)
    task_globals = getattr(task_function, "__globals__", {})
    return entry is not None and any(v is entry.run_job for v in task_globals.values())


class SweepitLauncher(Launcher):
    """What sweepit's two launchers share: the Hydra context and task, the config composer, the driver's logging,
    and the two knobs a sweeper may switch off on `self.options` (sweepit's Optuna sweeper does: failed trials
    are its business, and it prints one table at the end)."""

    options: Any
    job_type: type  # the engine's job (sweepit.local.Job, sweepit.slurm.PlannedJob)
    _new_sweep: Callable[[], Any]  # the engine's run of jobs in the sweep directory (LocalSweep, SlurmSweep)
    _job_return: Callable[[Any, Any], JobReturn]  # what a sweeper gets for a job, from how the engine says it ended
    _sweep: Any = None  # the engine's run of start()/wait_any() (LocalSweep, SlurmSweep), between them and close()

    def __init__(self) -> None:
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None
        # Environment variables a sweeper gives job `num` (the Optuna sweeper: its trial), set through the job's
        # hydra.job.env_set when it is composed: never an override, so they stay out of the job's overrides,
        # its JobReturn, sweep.json and the printed tables.
        self.job_env: dict[int, dict[str, str]] = {}
        self._plans: JobPlans | None = None  # plan_job's working configs, of `self.config`
        self._hydra: bytes | None = None  # what every job run afresh carries of the driver's Hydra, pickled once

    def _context(self) -> tuple[HydraContext, TaskFunction, dict[Any, Any]]:
        """What a job pickled for a process of its own (a Slurm job's tasks, a Slurm worker, a local job in a fresh
        interpreter) carries of the driver's Hydra: the context (the loader without the driver's composer), the task
        function, and Hydra's singletons (its search path, plugins, job runtime)."""
        from hydra.core.singleton import Singleton

        assert self.hydra_context is not None and self.task_function is not None
        context = HydraContext(config_loader=self.composed.loader, callbacks=self.hydra_context.callbacks)
        return context, self.task_function, Singleton.get_state()

    def pickled_hydra(self) -> bytes:
        """`_context`, pickled once for every job of the sweep (`pickle_hydra`)."""
        from hydra_plugins.sweepit._runner import pickle_hydra

        if self._hydra is None:
            self._hydra = pickle_hydra(*self._context())
        return self._hydra

    # -- one job at a time, as a sweeper asks: the Optuna sweeper's AsyncLauncher protocol ---------------------
    def start(self, overrides: Sequence[str], job_num: int) -> None:
        """Start the job `job_num` (queued for a free worker, or submitted); `wait_any` follows it."""
        if self._sweep is None:
            self._sweep = self._new_sweep()
        with compact_errors():
            self._sweep.start(self.job_type(num=job_num, overrides=list(overrides)))

    def wait_any(self) -> list[tuple[int, JobReturn]]:
        """Drive the engine until a started job ends; `(job_num, JobReturn)` of each. On Slurm, Ctrl-C cancels the
        jobs in flight, and a second one stops waiting for Slurm to end them."""
        assert self._sweep is not None, "start() a job before wait_any()"
        return [(job.num, self._job_return(job, end)) for job, end in self._sweep.wait_any()]

    def close(self) -> None:
        """End the run of start()/wait_any() (`self._sweep`, each launcher's engine): jobs still in flight are
        stopped (the local launcher kills them, the Slurm launcher cancels them) and the manifest is written."""
        if self._sweep is None:
            return
        try:
            self._sweep.close()
        finally:
            self._sweep = None
            self.composed.clear()

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function
        light_exit()
        # Hydra's sweepers compose every job of a batch before launch(), then drop the result: the wrapper takes the
        # place of the loader they share with the launcher (once: it duck-types Hydra's) and keeps those configs.
        if not isinstance(hydra_context.config_loader, ComposedConfigs):
            hydra_context.config_loader = ComposedConfigs(hydra_context.config_loader)  # type: ignore[assignment]
        self.composed: ComposedConfigs = hydra_context.config_loader  # type: ignore[assignment]
        # One driver per sweep directory, from now to this process's exit: between a sweeper's batches too.
        self.lock: SweepLock | None = None
        # Hydra makes the sweep directory after this (with multirun.yaml): a dry run, or a sweep refused before any
        # job, takes it away again if it is new. A folder of its own (`_take_folder`) is new.
        named = str(config.hydra.sweep.dir)
        self.new_sweep_dir = not Path(named).exists()
        if not getattr(self.options, "dry_run", False):
            with compact_errors():
                self.lock = _take_folder(config)
            atexit.register(self.lock.release)
            self.new_sweep_dir |= str(config.hydra.sweep.dir) != named

    def check_values(self, job_overrides: Sequence[Sequence[str]], first_num: int) -> None:
        """sweepit's own loop checks its config before it trains (`check_config`): a value that check refuses would
        fail every job that has it, and a resume would run them to fail again. An app that runs sweepit's loop has
        the jobs that bring an override not seen before checked here (MAX_CHECKED at most), and a refused one stops
        the sweep before any job starts. Only ConfigError counts: anything else is the job's to meet."""
        if self.config is None or not runs_sweepits_loop(self.task_function):
            return
        from sweepit.errors import ConfigError
        from sweepit.train import check_config

        seen: set[str] = set()
        n_checked = 0
        for num, overrides in enumerate(job_overrides, start=first_num):
            if n_checked == MAX_CHECKED:
                break
            if set(overrides) <= seen:
                continue
            seen.update(overrides)
            n_checked += 1
            try:
                check_config(self.composed.peek(self.config, list(overrides)), here=False)
            except ConfigError as e:
                raise LaunchError(f"{e}\nNo job was started: job {num} ({' '.join(overrides)}) and every job with "
                                  "its value would fail this check as it started. Fix the value and run the sweep "
                                  "again.") from None
            except Exception:  # a config the driver cannot read as the job will (${hydra:...}): the job checks it
                continue

    def end_dry_run(self) -> None:
        """Remove the sweep directory Hydra made for a dry run, or for a sweep refused before any job (its budget),
        when it holds nothing but Hydra's multirun.yaml and the locks: no sweep is left behind (`sweepit ls` listed
        it as a sweep of 0 jobs)."""
        assert self.config is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        if not self.new_sweep_dir or not sweep_dir.is_dir():
            return
        paths = SweepPaths(sweep_dir)
        made = [paths.multirun, paths.budget_lock]  # the budget's check locks its ledger before it refuses
        if {p.name for p in sweep_dir.iterdir()} <= {p.name for p in made} | {SweepLock(sweep_dir).path.name}:
            if self.lock is not None:
                self.lock.release()
            for path in made:
                path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                sweep_dir.rmdir()

    def sweep_dir(self) -> Path:
        """Hydra's logging in the driver; the sweep's directory (its `${now:}` resolved once)."""
        assert self.config is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return Path(str(self.config.hydra.sweep.dir)).absolute()

    def compose_job(self, num: int, overrides: list[str], sweep_dir: Path) -> tuple[DictConfig, Path]:
        """The job's full config, as Hydra's own launchers compose it, and the directory it will run in."""
        assert self.config is not None
        return numbered(self.composed.take(self.config, overrides), num, self.job_env.pop(num, {}), sweep_dir)

    def plan_job(self, num: int, overrides: Sequence[str], sweep_dir: Path,
                 keys: Sequence[str]) -> tuple[Path, dict[str, Any]]:
        """The job's directory and the values of its config's `keys` (`_plan_job.selected`: None where absent), as
        `compose_job` would give them, at a fraction of its cost: what a driver plans with. The job's config is
        composed where it runs."""
        assert self.config is not None
        keys = tuple(keys)
        if not self.job_env.get(num):  # (a sweeper's environment for the job: set by numbered alone)
            if self._plans is None or self._plans.master is not self.config:
                self._plans = JobPlans(self.composed, self.config, MAX_BASES)
            planned = self._plans.plan(num, overrides, keys, sweep_dir)
            if planned is not None:
                return planned
        config, path = numbered(self.composed.take(self.config, list(overrides)), num, self.job_env.get(num, {}),
                                sweep_dir)
        return path, {key: selected(config, key) for key in keys}


def _take_folder(config: DictConfig) -> SweepLock:
    """The held lock of the sweep's folder. A folder named by the clock (`${now:...}`, as Hydra's default and
    sweepit's are) that another sweep started in the same second has taken is this sweep's no more: it runs in a
    folder of its own (`own_folder`), which the config then names, its jobs' configs too. A folder named otherwise
    (hydra.sweep.dir=DIR, a resume) is one sweep's: a second driver is refused."""
    named = Path(str(config.hydra.sweep.dir))
    pattern = OmegaConf.to_container(config.hydra.sweep, resolve=False)
    if not (isinstance(pattern, dict) and "${now:" in str(pattern.get("dir"))):
        lock = SweepLock(named.absolute())
        lock.acquire()
        return lock
    lock = own_folder(named.absolute())
    if lock.path.parent != named.absolute():
        chosen = str(named.with_name(lock.path.parent.name))
        with open_dict(config):
            config.hydra.sweep.dir = chosen
            config.hydra.overrides.hydra.append(f"hydra.sweep.dir={hydra_quote(chosen)}")  # jobs compose from these
        log.warning(f"{named} is taken by another sweep started in the same second: this sweep runs in {chosen}")
    return lock


def numbered(config: DictConfig, num: int, env: Mapping[str, str], sweep_dir: Path) -> tuple[DictConfig, Path]:
    """A job's composed config numbered `num`, with the environment a sweeper gives it (`hydra.job.env_set`), and the
    directory it runs in: the same in the driver and in a worker that composes the job again."""
    number(config, num, env)
    return config, job_dir(config, sweep_dir)


def number(config: DictConfig, num: int, env: Mapping[str, str]) -> DictConfig:
    """A job's composed config numbered `num`, with the environment a sweeper gives it (`hydra.job.env_set`)."""
    with open_dict(config):
        config.hydra.job.id = num
        config.hydra.job.num = num
        for key, value in env.items():
            config.hydra.job.env_set[key] = value
    return config
