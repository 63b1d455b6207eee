"""The job side of sweepit's Hydra plugins: `JobRunner`, the one runner of a job in the process it runs in, which
records how the job ended; the task every Slurm task of a job runs; and what a job saves of its config, read back
for the driver's JobReturn.
"""

from __future__ import annotations

import copy
import functools
import os
import pickle
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus, configure_log
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from hydra_plugins.sweepit._job_steps import SAVED, hydra_view, task_config
from sweepit._files import atomic_write
from sweepit._signals import SLURM_STOP, interrupt_on_stop_signals
from sweepit.errors import RankFailedError
from sweepit.local import failure, picklable
from sweepit.results import (
    JobOutcome,
    JobPaths,
    JobState,
    read_record,
    sweeper_value,
)
from sweepit.slurm import failed_task, rank_failure, record_task, record_task_error
from sweepit.train import Session, begin_session, end_session, leave_process_group, status_of


class JobRunner:
    """Begin the job's session, run Hydra's job steps around the task, record how the job ended, end the session.
    `rank`: a task of a Slurm job (rank 0 writes the job's files, the others leave their error for it); None: a
    process of the job's own. A job of another launcher is recorded by `record`, through sweepit's callback."""

    def __init__(self, hydra_context: HydraContext, task_function: TaskFunction, rank: int | None = None) -> None:
        self.hydra_context, self.task_function, self.rank = hydra_context, task_function, rank
        self.requeueing = False  # stopped by submitit to be requeued: what the job leaves now is not its end
        self.finished = False    # the task has returned: a stop signal no longer stops the job

    def __call__(self, config: DictConfig, job_dir: Path) -> JobOutcome:
        session = begin_session(job_dir, config)
        try:
            # A Slurm job's other ranks leave `.hydra/` and the job's log file to rank 0: one copy of each.
            ret = run_forked_job(self.hydra_context, self.task_function, config, primary=not self.rank)
        except BaseException as e:  # KeyboardInterrupt (the job was stopped), SystemExit (submitit's requeue)
            stopped = JobReturn(status=JobStatus.FAILED, _return_value=e)
            record(session, stopped, self.rank, requeued=self.requeueing)
            raise
        self.finished = True
        return record(session, ret, self.rank)

    def reply(self, config: DictConfig, job_dir: Path) -> JobOutcome:
        """The job run in a process forked for it, and what that process sends back to the one that forked it."""
        outcome = self(config, job_dir)
        error, outcome.raised = outcome.raised, None
        if error is None:
            outcome.returned = picklable(outcome.returned)
        elif outcome.status in (JobState.PRUNED, JobState.PAUSED):  # a verdict, not an error
            outcome.error = f"{type(error).__name__}: {error}"
        else:
            told = failure(JobState(outcome.status), error)
            outcome.error, outcome.traceback = told.error, told.traceback
        return outcome


def record(session: Session, ret: JobReturn, rank: int | None = None, requeued: bool = False) -> JobOutcome:
    """How the job ended (Hydra's JobReturn of its task, or of what the job raised), recorded in result.json when the
    task wrote none; the session ends after that, so that its trackers close with the job's status. Rank 0 of a Slurm
    job whose other task failed first records that task's error; another rank leaves its own for rank 0 to tell."""
    try:
        if ret.status == JobStatus.COMPLETED:
            session.finish(JobState.COMPLETED, returned=ret.return_value)
            return JobOutcome(JobState.COMPLETED, ret.return_value, True, working_dir=ret.working_dir,
                              task_name=ret.task_name)
        value = ret._return_value
        error = value if isinstance(value, BaseException) else RuntimeError(repr(value))
        leave_process_group()  # the task's own process group (sweepit.context().init_process_group())
        task_dir = session.job_dir if rank is not None else None  # a Slurm task's job: where its tasks leave errors
        if requeued and task_dir is not None:
            # The job carries on when requeued: the SystemExit that stops this run is not its end, nor is the result
            # the task wrote as it stopped.
            JobPaths(task_dir).result.unlink(missing_ok=True)
            return JobOutcome(status_of(error), raised=error)
        failed = failed_task(task_dir, but=0) if task_dir is not None and rank == 0 else None
        if failed is not None:  # its error came from a peer that failed first (a collective's lost connection)
            error = RankFailedError(rank_failure(failed))
        status = status_of(error)
        session.finish(status, error=error)
        if task_dir is not None and rank and status == JobState.FAILED:
            record_task_error(task_dir, rank, error)  # before this task exits: the cause, for the others
        return JobOutcome(status, raised=error, working_dir=ret.working_dir, task_name=ret.task_name)
    finally:
        end_session(session)


def run_forked_job(hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig,
                   primary: bool = True) -> JobReturn:
    """Hydra 1.3's `run_job` for a job in a process of its own (forked for it, or a Slurm task), which owns `config`
    and sends no JobReturn back: the same steps in the same order, with less copying (`_job_steps`). HydraConfig
    holds the job's own hydra node, the task's config is copied without it, the JobReturn's `hydra_cfg` is
    HydraConfig's, and the `.hydra/` files reuse the blocks of YAML the jobs share (`bench/bench_job_overhead.py`).
    `primary`: false for a task that neither writes `.hydra/` nor sets up logging (Hydra's `configure_logging`)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import JobRuntime, _flush_loggers, env_override

    callbacks = hydra_context.callbacks
    old_cwd = os.getcwd()
    hydra_config = HydraConfig.instance()
    saved = hydra_config.cfg
    hydra_cfg = hydra_view(config)
    hydra_config.cfg = hydra_cfg  # type: ignore[assignment]  # what set_config sets; the directory may read it
    output_dir = str(OmegaConf.select(config, "hydra.sweep.dir"))
    output_dir = os.path.join(output_dir, str(OmegaConf.select(config, "hydra.sweep.subdir")))
    with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):
        config.hydra.runtime.output_dir = os.path.abspath(output_dir)
    chdir = False
    try:
        ret = JobReturn()
        task_cfg = task_config(config)
        ret.cfg = task_cfg
        ret.hydra_cfg = hydra_cfg
        overrides = OmegaConf.to_container(config.hydra.overrides.task)
        assert isinstance(overrides, list)
        ret.overrides = overrides
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        chdir = bool(_chdir(hydra_cfg))
        if chdir and hydra_cfg.hydra.job.chdir is None:  # chdir by default: a version base before 1.2
            from hydra.core.utils import deprecation_warning

            deprecation_warning("Future Hydra versions will no longer change working directory at job runtime by "
                                "default.\nSee https://hydra.cc/docs/1.2/upgrades/1.1_to_1.2/changes_to_job_working_dir/"
                                " for more information.", stacklevel=2)
        if chdir:
            os.chdir(output_dir)
        ret.working_dir = output_dir if chdir else os.getcwd()
        if primary:
            configure_log(config.hydra.job_logging, config.hydra.verbose)
        if primary and config.hydra.output_subdir is not None:
            saved_dir = Path(config.hydra.runtime.output_dir) / str(config.hydra.output_subdir)
            for file, node in ((JobPaths.config, task_cfg), (JobPaths.hydra_config, hydra_cfg),
                               (JobPaths.overrides, config.hydra.overrides.task)):
                atomic_write(saved_dir / file.name, SAVED[file.name].to_yaml(node), fsync=False)
        with env_override(hydra_cfg.hydra.job.env_set):
            callbacks.on_job_start(config=config, task_function=task_function)
            try:
                ret.return_value = task_function(task_cfg)
                ret.status = JobStatus.COMPLETED
            except Exception as e:
                ret.return_value = e
                ret.status = JobStatus.FAILED
        ret.task_name = JobRuntime.instance().get("name")
        _flush_loggers()
        callbacks.on_job_end(config=config, job_return=ret)
        return ret
    finally:
        hydra_config.cfg = saved
        if chdir:
            os.chdir(old_cwd)


def uses_hydra_resolver(sweep: DictConfig) -> bool:
    """Whether `hydra.sweep.dir` or `.subdir` may call Hydra's `${hydra:...}` resolver, which reads HydraConfig:
    any interpolation but `${now:...}` and `${hydra.<key>}` (another key may call it)."""
    for key in sweep:
        raw = str(sweep._get_node(key)._value())  # type: ignore[union-attr]
        if "${hydra:" in raw or raw.count("${") > raw.count("${now:") + raw.count("${hydra."):
            return True
    return False


class SavedConfig:
    """What the driver keeps of a job's config once the job saved it (`<job dir>/<hydra.output_subdir>/`): a sweep of
    100,000 jobs cannot hold 100,000 composed configs. A sweeper that asks its JobReturn for `cfg` or `hydra_cfg`
    gets them read back from those files."""

    __slots__ = ("_saved_dir", "chdir", "task_name")

    def __init__(self, saved_dir: Path, task_name: str, chdir: bool) -> None:
        self._saved_dir, self.task_name, self.chdir = str(saved_dir), sys.intern(task_name), chdir

    @property
    def saved_dir(self) -> Path:
        return Path(self._saved_dir)

    def saved(self) -> bool:
        """Whether the job's saved files are there to read back."""
        return all((self.saved_dir / f.name).is_file() for f in (JobPaths.config, JobPaths.hydra_config))


def release_config(config: Any, job_dir_: Path) -> Any:
    """A SavedConfig in place of `config` when the job saved it (else `config` itself, kept: it did not get as far as
    run_job, killed or refused before it ran, or would not save it: `hydra.output_subdir: null`)."""
    if not isinstance(config, DictConfig) or "hydra" not in config:
        return config
    hydra = config.hydra
    promised = promised_config(job_dir_, hydra.output_subdir, hydra.job.name, hydra.job.chdir)
    return promised if promised is not None and promised.saved() else config


# The keys of a job's config that say where it saves its config (a driver plans them: SweepitLauncher.plan_job).
SAVED_KEYS = ("hydra.output_subdir", "hydra.job.name", "hydra.job.chdir")


def promised_config(job_dir_: Path, output_subdir: Any, task_name: Any, chdir: Any) -> SavedConfig | None:
    """The SavedConfig of a job still to run, from its SAVED_KEYS; None when it saves none (`output_subdir: null`)."""
    if output_subdir is None:
        return None
    return SavedConfig(job_dir_ / str(output_subdir), str(task_name), _chdir_of(chdir))


class SavedJobReturn(JobReturn):
    """A JobReturn whose `cfg` and `hydra_cfg` are read from the job's saved files when first asked for, unless set."""

    def __init__(self, saved: SavedConfig, **fields: Any) -> None:
        self._saved = saved
        super().__init__(**fields)
        del self.cfg, self.hydra_cfg  # the dataclass set them to None: unset, they are read when asked for

    @functools.cached_property
    def cfg(self) -> DictConfig | None:  # type: ignore[override]
        return self._load(JobPaths.config.name)

    @functools.cached_property
    def hydra_cfg(self) -> DictConfig | None:  # type: ignore[override]
        hydra_cfg = self._load(JobPaths.hydra_config.name)
        mode = OmegaConf.select(hydra_cfg, "hydra.mode")
        if isinstance(mode, str):  # the one field of Hydra's schema that YAML does not give back as Hydra had it
            from hydra.types import RunMode

            hydra_cfg.hydra.mode = RunMode[mode]
        return hydra_cfg

    def _load(self, filename: str) -> Any:
        path = self._saved.saved_dir / filename
        try:
            return OmegaConf.load(path)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{path} must exist: it is the saved config of the job, read back for its JobReturn (sweepit's "
                "launchers let go of each ended job's config), but it was removed since the job ran.") from None


def job_return(overrides: list[str], config: DictConfig | SavedConfig, job_dir_: Path, status: str | None,
               returned: dict[str, Any] | None = None, working_dir: str | None = None,
               task_name: str | None = None) -> JobReturn:
    """What Hydra's sweeper gets for a job, as Hydra's own launchers return it. `config` is taken apart, not copied:
    the driver is done with it. Failed jobs come back as COMPLETED with None (reached only with
    fail_on_error=false), because Hydra's BasicSweeper re-raises the error of any FAILED job and would end the sweep.
    `returned`: {"returned": what the task returned}, when it did."""
    record = read_record(job_dir_)
    status = status or str(record.status)
    value = sweeper_value(status, record.result.get("objective"), record.result.get("direction"), **(returned or {}))
    if isinstance(config, SavedConfig):
        saved = SavedJobReturn(config, overrides=list(overrides), working_dir=working_dir or str(
            job_dir_ if config.chdir else Path.cwd()), task_name=task_name or config.task_name,
            status=JobStatus.COMPLETED)
        saved.return_value = value
        return saved
    task_cfg, hydra_cfg = split_hydra(config, job_dir_)
    ret = JobReturn(overrides=list(overrides), cfg=task_cfg, hydra_cfg=hydra_cfg,
                    working_dir=working_dir or str(job_dir_ if _chdir(hydra_cfg) else Path.cwd()),
                    task_name=task_name or str(hydra_cfg.hydra.job.name), status=JobStatus.COMPLETED)
    ret.return_value = value
    return ret


def _chdir(hydra_cfg: DictConfig) -> bool:
    """Whether Hydra's run_job ran the job in its output directory: `hydra.job.chdir`, and when it is unset, the
    version base (before 1.2 it did)."""
    return _chdir_of(hydra_cfg.hydra.job.chdir)


def _chdir_of(chdir: Any) -> bool:
    from hydra import version

    return bool(chdir) if chdir is not None else _chdir_by_default(version.getbase())


@functools.cache
def _chdir_by_default(version_base: Any) -> bool:
    """Whether run_job chdirs when `hydra.job.chdir` is unset, under this version base (Hydra's VersionBase
    singleton, which a process may set again: the cache is keyed on it)."""
    from hydra import version

    return not version.base_at_least("1.2")


def split_hydra(config: DictConfig, job_dir_: Path) -> tuple[DictConfig, DictConfig]:
    """(the task's config, `{"hydra": ...}` with the job's output_dir) from a job's composed config, in place."""
    if "hydra" not in config:  # taken apart before (a JobReturn asked for twice)
        return config, OmegaConf.create({"hydra": {"runtime": {"output_dir": str(job_dir_)}}})
    with read_write(config), open_dict(config):
        node = config._get_node("hydra")
        del config["hydra"]
    hydra_cfg = OmegaConf.create({"hydra": node})
    with read_write(hydra_cfg.hydra.runtime), open_dict(hydra_cfg.hydra.runtime):  # whatever flag a parent has
        hydra_cfg.hydra.runtime.output_dir = str(job_dir_)
    OmegaConf.set_readonly(hydra_cfg, True)
    return config, hydra_cfg


def restore_hydra(singleton_state: dict[Any, Any]) -> None:
    """Hydra's singletons as the driver had them, in a process that unpickled a task: `Singleton.set_state` without
    its scan of every installed plugin (an import of each module under `hydra_plugins`, whatever the app uses), which
    a job does not need to run its composed config; whatever does need the plugins (a compose in the job) scans them
    when it first asks for them, as `Plugins.instance()` does in any process. A copy of the instances: the Plugins
    singleton is added to that dict once scanned, and the task is pickled again on requeue, where plugins must not
    go."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import setup_globals
    from omegaconf.basecontainer import BaseContainer

    Singleton._instances = dict(singleton_state["instances"])
    BaseContainer._resolvers = copy.deepcopy(singleton_state["omegaconf_resolvers"])
    setup_globals()


def pickle_hydra(hydra_context: HydraContext, task_function: TaskFunction, singleton_state: dict[Any, Any]) -> bytes:
    """What a Slurm task carries of the driver's Hydra (its context, the task function, Hydra's singletons), pickled
    once for every task of a sweep: submitit pickles each task on its own, and this is most of each (the config
    loader, the config store). cloudpickle, as submitit's: an app's `__main__` function goes by value."""
    import cloudpickle

    return bytes(cloudpickle.dumps((hydra_context, task_function, singleton_state)))


class SlurmTask:
    """What every task of a Slurm job runs (pickled by submitit): the job's runner, on the task's rank. Slurm sends
    USR2 before the time limit (or on preemption); submitit then calls `checkpoint()` on rank 0 and requeues the job,
    which resumes from its last epoch. `hydra`: the driver's Hydra, from `pickle_hydra`."""

    def __init__(self, hydra: bytes, config: DictConfig, job_dir: str, gate: Callable[[], bool] | None = None) -> None:
        self.hydra = hydra
        self.config = config
        self.job_dir = job_dir
        self.gate = gate  # under a GPU budget: False when the job is not to start (it leaves a note why)
        self.runner: JobRunner | None = None  # this run's; a requeued run makes its own

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "runner": None}  # the checkpoint pickle: `hydra` holds the runner's context

    def __call__(self) -> Any:
        hydra_context, task_function, singleton_state = pickle.loads(self.hydra)
        rank = int(os.environ.get("SLURM_PROCID", "0"))
        runner = self.runner = JobRunner(hydra_context, task_function, rank)
        # After submitit's own handlers: submitit ignores SIGTERM, so a cancelled job would train on for Slurm's
        # KillWait and then write a result over what the driver recorded; this way scancel stops it now.
        interrupt_on_stop_signals((signal.SIGTERM,), SLURM_STOP, unless=lambda: runner.requeueing or runner.finished)
        if self.gate is not None and not self.gate():
            return None
        restore_hydra(singleton_state)
        record_task(Path(self.job_dir), rank)
        outcome = runner(self.config, Path(self.job_dir))
        if outcome.raised is None:
            return picklable(outcome.returned)
        if outcome.status in (JobState.PRUNED, JobState.PAUSED):
            return None  # optuna.TrialPruned, or paused at a rung: no error, and the Slurm job ends COMPLETED
        raise outcome.raised

    def reply(self) -> JobOutcome:
        """The job in a fresh interpreter of the local launcher or a Slurm worker (its fork server could not use
        CUDA): what a forked job sends back."""
        hydra_context, task_function, singleton_state = pickle.loads(self.hydra)
        restore_hydra(singleton_state)
        return JobRunner(hydra_context, task_function).reply(self.config, Path(self.job_dir))

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Called by submitit on rank 0 when USR2 arrives: the same job again, unless it has just finished."""
        import submitit

        if self.runner is not None and self.runner.finished:
            return None  # its result is written; submitit then ends it instead of requeuing
        if self.runner is not None:
            self.runner.requeueing = True
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)
