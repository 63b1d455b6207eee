"""sweepit's Optuna sweeper (`hydra/sweeper=optuna`): the search itself is `sweepit.search.Search`; this class holds
what is Hydra's (the space in Hydra's override grammar, the check that a job's overrides compose, the launcher, the
single-run command, a job's trial as its environment). optuna is imported in `sweep()` only, so that Hydra's plugin
scan stays fast.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra.errors import CompactHydraException
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.sweepit._launcher import SweepitLauncher, compact_errors, plain_options
from hydra_plugins.sweepit._space import parse_space, space_params
from sweepit._targets import locate
from sweepit.errors import ConfigError
from sweepit.results import SweepPaths, app_command, config_of, driver_argv, driver_env, hydra_quote, rerun_command
from sweepit.search import JobDefaults, Search, SearchOptions
from sweepit.slurm import SlurmOptions, check_one_by_one

_ENV_SET = "++hydra.job.env_set."


class OptunaInputError(ConfigError, CompactHydraException):
    """Bad sweeper input; Hydra prints the message alone, without a traceback."""


class OptunaSweeper(Sweeper):
    def __init__(self, params: dict[str, str] | None = None, search_space: Any = None,
                 custom_search_space: str | None = None, **options: Any) -> None:
        # The other keys are the search engine's (SearchOptions itself), which Hydra's schema has checked; the sampler
        # and pruner are nodes of their schemas, never null, which plain_options turns into dicts.
        try:
            self.options = SearchOptions(**plain_options(options))
        except ConfigError as e:
            raise OptunaInputError(str(e)) from None
        self.params = None if params is None else dict(params)
        self.search_space = None if search_space is None else _plain(search_space)
        self.custom_search_space = custom_search_space
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)
        # sweepit's launchers: failed trials are the search's business (max_failure_rate), and it prints
        # one summary at the end instead of one per batch.
        if isinstance(self.launcher, SweepitLauncher):
            self.launcher.options.fail_on_error = self.launcher.options.print_summary = False

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.hydra_context is not None and self.launcher is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        with compact_errors():  # bad input, and a stopped search (Ctrl-C), end with sweepit's message alone
            params = space_params(self.params, self.search_space)
            space = parse_space(params, list(arguments), self.hydra_context.config_loader)
            if space.params:
                self.validate_batch_is_legal([space.overrides(space.first_point())])  # unknown keys, bad values
            launcher_options = getattr(self.launcher, "options", None)
            if isinstance(launcher_options, SlurmOptions) and not self.options.workers:
                try:
                    check_one_by_one(launcher_options)  # before the study is opened: nothing is written
                except ConfigError:
                    self.launcher.end_dry_run()  # nor is the folder the sweep's lock made kept
                    raise
            try:
                search = Search(self.options, space, sweep_dir, _job_defaults(self.config), command=self._command(),
                                env_overrides=self._job_env, extend=self._extend())
            except ConfigError:
                if isinstance(self.launcher, SweepitLauncher):
                    self.launcher.end_dry_run()  # refused before any trial: no empty sweep folder is left
                raise
            search.open()
            OmegaConf.save(self.config, SweepPaths(sweep_dir).multirun)
            if self.options.workers:
                self._run_workers(search, space.overrides(space.first_point()) if space.params else [])
                return [[]]
            # Each trial's config is composed before its job starts (and kept for the launcher): a value that does
            # not compose fails that trial alone.
            returns: list[JobReturn] = search.run(
                self.launcher, check=lambda overrides: self.validate_batch_is_legal([overrides]))
        return [returns]

    def _run_workers(self, search: Search, first: list[str]) -> None:
        """Worker mode (`hydra.sweeper.workers=N`): N Slurm workers run the study against its storage; this process
        submits them and follows (sweepit.search.drive)."""
        from hydra_plugins.sweepit.slurm_launcher import SlurmLauncher
        from sweepit.search import drive

        if not isinstance(self.launcher, SlurmLauncher):
            raise OptunaInputError(
                "hydra.sweeper.workers runs the study in long-lived Slurm jobs, so it needs hydra/launcher=slurm (or "
                f"a cluster profile), but the launcher is {type(self.launcher).__name__}; add hydra/launcher=slurm, or "
                f"set hydra.sweeper.workers=0 (n_jobs={self.options.n_jobs} trials in flight on this launcher).")
        launcher = self.launcher
        array = launcher.worker_sweep(first)
        if launcher.options.dry_run:
            print(array.dry_run(self.options.workers), flush=True)
            launcher.end_dry_run()
            return
        job_base = search.next_free_job()
        drive(search, array, self.options.workers, lambda i: launcher.worker_task(search, i, job_base))

    def _extend(self) -> Any:
        """`hydra.sweeper.custom_search_space`: the user's `fn(cfg, trial)`, called with the sweep's config."""
        if not self.custom_search_space:
            return None
        fn = locate(self.custom_search_space, "hydra.sweeper.custom_search_space")
        config = self.config
        return lambda trial: fn(config, trial)

    def _job_env(self, job_num: int, env: Mapping[str, str]) -> list[str]:
        """The job's environment (its trial): beside its overrides for sweepit's launchers, else as overrides
        (Hydra's own launchers then keep them among the hydra overrides, out of the JobReturn)."""
        if isinstance(self.launcher, SweepitLauncher):
            self.launcher.job_env[job_num] = dict(env)
            return []
        return [f"{_ENV_SET}{k}={hydra_quote(v)}" for k, v in env.items()]

    def _command(self) -> str:
        """The single-run command's first words, as the end-of-sweep `reproduce:` line has them: the environment and
        Python the jobs needed, the script, the sweep's --config-dir/--config-name and what makes it one run."""
        assert self.config is not None
        hydra = OmegaConf.to_container(self.config.hydra, resolve=False)
        assert isinstance(hydra, dict)
        hydra.setdefault("runtime", {})["cwd"] = os.getcwd()
        app = app_command({"argv": driver_argv(), "cwd": os.getcwd(), "env": driver_env()})
        return rerun_command(app, config_of(hydra), [], [])


def _job_defaults(config: DictConfig) -> JobDefaults:
    """The top-level keys of the job's config that the search falls back on (any app may lack them)."""
    metric = OmegaConf.select(config, "metric", default=None)
    return JobDefaults(metric=None if metric is None else str(metric),
                       direction=OmegaConf.select(config, "direction", default=None),
                       epochs=OmegaConf.select(config, "epochs", default=None),
                       study=OmegaConf.select(config, "study", default=None))


def _plain(node: Any) -> dict[str, Any]:
    """A sub-config (DictConfig or dict) as a plain dict; {} for anything else (the schema types search_space Any)."""
    data = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    return {str(k): v for k, v in data.items()} if isinstance(data, dict) else {}
