"""sweepit's Optuna sweeper (`hydra/sweeper=optuna`): asynchronous trials, pruning, resumable studies.

The sweeper asks Optuna for a trial, starts its job, and as soon as any job ends tells Optuna the outcome
and starts the next (on launchers with `AsyncLauncher`; others run batches of `n_jobs`). Each job reports
its metric after every epoch to its trial (sweepit.search._pruning) and stops when the pruner says so. Trials are
numbered by the study and jobs by the sweep directory, so re-running the command on the same sweep
directory (or storage and study name) resumes: numbers go on and nothing is overwritten.
optuna is imported in `sweep()` only, so Hydra's plugin scan stays fast.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra.errors import CompactHydraException
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from sweepit.errors import ConfigError, SweepFailedError
from sweepit.search._space import SearchSpace, parse_space
from sweepit.search._study import failure_rate, interrupt, is_counted, recover, tell
from sweepit.search._trials import AsyncLauncher, BatchLauncher, read_outcome

log = logging.getLogger(__name__)
DIRECTIONS = ("maximize", "minimize")
JOURNAL_FILE = "optuna.journal"


class OptunaInputError(ConfigError, CompactHydraException):
    """Bad sweeper input; Hydra prints the message alone, without a traceback."""


class SearchStopped(SweepFailedError, CompactHydraException):
    """The search stopped before n_trials: the failure rate went over `max_failure_rate`, or jobs were interrupted."""


def _fail(ok: bool, message: str) -> None:
    if not ok:
        raise OptunaInputError(message)


class OptunaSweeper(Sweeper):
    def __init__(self, params: dict[str, str] | None = None, sampler: Any = None, pruner: Any = None,
                 direction: str | None = None, n_trials: int = 20, n_jobs: int = 1, study_name: str | None = None,
                 storage: str | None = None, max_failure_rate: float = 0.5, failure_rate_min_trials: int = 5,
                 diverged_value: float | None = None) -> None:
        _fail(n_trials >= 1, f"hydra.sweeper.n_trials must be >= 1, but got n_trials={n_trials}; "
                             "set for example hydra.sweeper.n_trials=20.")
        _fail(n_jobs >= 1, f"hydra.sweeper.n_jobs (trials in flight) must be >= 1, but got n_jobs={n_jobs}; "
                           "set for example hydra.sweeper.n_jobs=4.")
        _fail(0.0 <= max_failure_rate <= 1.0, "hydra.sweeper.max_failure_rate must be between 0 and 1, but got "
                                              f"{max_failure_rate=}; set for example 0.5 (1 never stops).")
        self.params = dict(params or {})
        self.sampler, self.pruner = _plain(sampler), _plain(pruner)
        self.direction = direction
        self.n_trials, self.n_jobs = n_trials, n_jobs
        self.study_name, self.storage = study_name, storage
        self.max_failure_rate, self.failure_rate_min_trials = max_failure_rate, failure_rate_min_trials
        self.diverged_value = diverged_value
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)
        # sweepit's launchers: failed trials are the sweeper's business (max_failure_rate), and it prints
        # one summary at the end instead of one per batch.
        for name in ("fail_on_error", "print_summary"):
            if hasattr(self.launcher, name):
                setattr(self.launcher, name, False)

    # -- set-up, all before any trial starts ----------------------------------------------------------
    def _space(self, arguments: list[str]) -> SearchSpace:
        assert self.hydra_context is not None
        space = parse_space(self.params, arguments, self.hydra_context.config_loader)
        _fail(bool(space.params), "the Optuna sweeper needs a search space, but none was given; add one to "
                                  "hydra.sweeper.params or the command line, e.g. 'lr=tag(log, interval(1e-4, 1))'.")
        return space

    def _pruner_spec(self, space: SearchSpace) -> dict[str, Any]:
        from sweepit.search._pruning import PRUNERS

        assert self.config is not None
        spec = dict(self.pruner)
        spec.setdefault("name", "none")
        _fail(spec["name"] in PRUNERS, f"hydra.sweeper.pruner.name must be one of {', '.join(PRUNERS)}, but got "
                                       f"{spec['name']!r}; set for example hydra.sweeper.pruner.name=median.")
        epochs = OmegaConf.select(self.config, "epochs", default=None)
        if spec.get("max_resource") is None and isinstance(epochs, int) and "epochs" not in space.distributions:
            spec["max_resource"] = epochs
        return spec

    def _command(self) -> str:
        """The single-run command prefix: python, the script, and the sweep's --config-dir/--config-name."""
        assert self.config is not None
        script = sys.argv[0] if sys.argv and sys.argv[0] else "train.py"
        rel = os.path.relpath(os.path.abspath(script))
        args = ["python", script if rel.startswith("..") else rel]
        sources = OmegaConf.select(self.config, "hydra.runtime.config_sources", default=[]) or []
        config_dir = next((str(s.path) for s in sources if s.provider == "command-line"), None)
        if config_dir:
            rel = os.path.relpath(config_dir)
            args += ["--config-dir", config_dir if rel.startswith("..") else rel]
        name = str(OmegaConf.select(self.config, "hydra.job.config_name", default="config"))
        if config_dir or name != "config":
            args += ["--config-name", name]
        return shlex.join(args)

    def _open_study(self, space: SearchSpace, sweep_dir: Path) -> tuple[Any, dict[str, Any]]:
        import optuna

        from sweepit.search._pruning import PRUNER_ATTR, build_pruner, open_storage
        from sweepit.search._samplers import build_sampler, check_sampler

        assert self.config is not None
        sampler_name = str(self.sampler.get("name", "tpe"))
        check_sampler(sampler_name)
        pruner_spec = self._pruner_spec(space)
        direction = str(self.direction or OmegaConf.select(self.config, "direction", default=None) or "minimize")
        _fail(direction in DIRECTIONS, f"the direction must be maximize or minimize, but got {direction!r}; "
                                       "set hydra.sweeper.direction=maximize (or the config's `direction`).")
        if sampler_name == "grid":
            space.grid()  # refuses a continuous space now rather than at the first ask
        storage_url = self.storage or str(sweep_dir / JOURNAL_FILE)
        storage = open_storage(storage_url)
        name = self.study_name or OmegaConf.select(self.config, "study", default=None) or "sweepit"
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweeper logs each trial itself
        study = optuna.create_study(storage=storage, study_name=str(name), direction=direction,  # type: ignore[arg-type]
                                    load_if_exists=True, pruner=build_pruner(pruner_spec))
        _fail(study.direction.name.lower() == direction,
              f"study {name!r} in {storage_url} must keep its direction, but it is "
              f"{study.direction.name.lower()} and the sweep asks {direction}; use another "
              "hydra.sweeper.study_name, or the study's direction.")
        seed = self.sampler.get("seed")
        n_before = len(study.get_trials(deepcopy=False))
        # A resumed study reseeds, or a seeded sampler would draw the points of the first run again.
        study.sampler = build_sampler(sampler_name, None if seed is None else int(seed) + n_before, space,
                                      int(self.sampler.get("n_startup_trials", 10)),
                                      int(self.sampler.get("population_size", 50)))
        study.set_user_attr(PRUNER_ATTR, pruner_spec)
        info = {"storage": storage_url, "study_name": str(name), "metric": OmegaConf.select(self.config, "metric",
                default=None), "direction": direction, "sampler": {**self.sampler, "name": sampler_name},
                "pruner": pruner_spec, "space": {p.name: p.spelled for p in space.params},
                "fixed": list(space.fixed), "command": self._command()}
        study.set_user_attr("sweepit_space", info["space"])
        return study, info

    # -- the search -------------------------------------------------------------------------------------
    def sweep(self, arguments: list[str]) -> Any:
        from sweepit.search._results import write_results, write_study_file

        assert self.config is not None and self.launcher is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        try:
            space = self._space(list(arguments))
            self.validate_batch_is_legal([space.overrides(_first_point(space))])  # unknown keys, bad values
            sweep_dir.mkdir(parents=True, exist_ok=True)
            study, info = self._open_study(space, sweep_dir)
        except ConfigError as e:
            if isinstance(e, CompactHydraException):
                raise
            raise OptunaInputError(str(e)) from None
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        write_study_file(sweep_dir, info)
        n_recovered = recover(study, sweep_dir, self.diverged_value)
        total = self.n_trials
        if info["sampler"]["name"] == "grid":
            from sweepit.search._samplers import grid_size

            total = min(total, grid_size(space))
        n_counted = sum(is_counted(t) for t in study.get_trials(deepcopy=False))
        async_ok = isinstance(self.launcher, AsyncLauncher)
        runner: Any = self.launcher if async_ok else BatchLauncher(self.launcher)
        log.info(f"Optuna study {info['study_name']!r} ({info['direction']} {info['metric']}) in {info['storage']}: "
                 f"{n_counted} of {total} trials done before" + (f", {n_recovered} recovered" if n_recovered else "")
                 + f"; sampler {info['sampler']['name']}, pruner {info['pruner']['name']}, {self.n_jobs} in flight; "
                 f"space {space.describe()}")
        if not async_ok:
            log.info(f"{type(self.launcher).__name__} only offers Hydra's batch launch(): trials run in batches "
                     f"of {self.n_jobs}, each batch waiting for its slowest trial")
        returns: list[JobReturn] = []
        in_flight: dict[int, Any] = {}   # job number -> trial
        next_job = _next_free_job(sweep_dir)
        stop: str | None = None
        try:
            while True:
                while stop is None and len(in_flight) < self.n_jobs and n_counted < total:
                    trial = study.ask(space.distributions)
                    job = max(trial.number, next_job)
                    next_job = job + 1
                    overrides = space.overrides(trial.params)
                    trial.set_user_attr("job_num", job)
                    trial.set_user_attr("overrides", overrides)
                    log.info(f"trial {trial.number} -> job {job}: {' '.join(overrides)}")
                    runner.start([*overrides, *self._job_env(info, trial.number)], job)
                    in_flight[job] = trial
                    n_counted += 1
                if not in_flight:
                    break
                for job, ret in runner.wait_any():
                    if job not in in_flight:
                        log.warning(f"the launcher returned job {job}, which this search did not start; ignored")
                        continue
                    trial = in_flight.pop(job)
                    outcome = read_outcome(sweep_dir, job, ret)
                    state = tell(study, trial.number, trial._trial_id, outcome, self.diverged_value)
                    if outcome.status == "interrupted":  # Ctrl-C, SIGTERM, scancel: the sweep is being stopped
                        n_counted -= 1
                        stop = stop or (f"trial {trial.number} (job {job}) was interrupted, so the search stops; its "
                                        "parameters are tried again when the same command runs again on "
                                        f"hydra.sweep.dir={sweep_dir}.")
                    if ret is not None:
                        returns.append(ret)
                    log.info(f"trial {trial.number} {outcome.status} -> {state}"
                             + (f", {info['metric']}={outcome.value:.4g}" if outcome.value is not None else "")
                             + (f": {outcome.error.splitlines()[0][:200]}" if outcome.error else "")
                             + _best_line(study))
                stop = stop or self._failure_stop(study)
        except BaseException:
            for trial in in_flight.values():
                interrupt(study, trial.number, trial._trial_id)
            raise
        finally:
            runner.close()
            write_results(sweep_dir, study, info)
        self._print_end(sweep_dir)
        if stop is not None:
            raise SearchStopped(stop)
        return [returns]

    def _job_env(self, info: dict[str, Any], number: int) -> list[str]:
        """Hydra overrides that tell the job its trial; they stay out of its overrides and directory name."""
        from sweepit.results._manifest import hydra_quote
        from sweepit.search._pruning import ENV_STORAGE, ENV_STUDY, ENV_TRIAL

        values = {ENV_STORAGE: str(info["storage"]), ENV_STUDY: str(info["study_name"]), ENV_TRIAL: str(number)}
        return [f"++hydra.job.env_set.{k}={hydra_quote(v)}" for k, v in values.items()]

    def _failure_stop(self, study: Any) -> str | None:
        failed, finished = failure_rate(study)
        if finished < max(1, self.failure_rate_min_trials) or failed <= self.max_failure_rate * finished:
            return None
        return (f"the Optuna search stops when more than max_failure_rate={self.max_failure_rate:g} of its finished "
                f"trials fail (from {self.failure_rate_min_trials} trials on), but {failed} of {finished} failed "
                "(diverged and pruned trials do not count). Read the `error` column of trials.csv and the jobs' "
                "stderr.log, fix the cause, and run the same command again to resume; or raise "
                "hydra.sweeper.max_failure_rate.")

    def _print_end(self, sweep_dir: Path) -> None:
        from sweepit.results._summary import summarize
        from sweepit.search._results import BEST_FILE, TRIALS_FILE

        print(summarize(sweep_dir), flush=True)
        print(f"Optuna: best parameters in {sweep_dir / BEST_FILE}, all trials in {sweep_dir / TRIALS_FILE}",
              flush=True)


def _plain(node: Any) -> dict[str, Any]:
    """A sub-config (DictConfig or dict) as a plain dict."""
    data = OmegaConf.to_container(node) if isinstance(node, DictConfig) else node
    return {str(k): v for k, v in data.items()} if isinstance(data, dict) else {}


def _first_point(space: SearchSpace) -> dict[str, Any]:
    """A point of the space, to check before any trial that a job's overrides compose."""
    out: dict[str, Any] = {}
    for p in space.params:
        d = p.distribution
        out[p.name] = p.choices[0] if p.choices else d.low
    return out


def _next_free_job(sweep_dir: Path) -> int:
    from sweepit.results._summary import job_num

    nums = [n for p in sweep_dir.iterdir() if p.is_dir() and (n := job_num(p)) is not None]
    return max(nums, default=-1) + 1


def _best_line(study: Any) -> str:
    from sweepit.search._results import best_trial

    best = best_trial(study)
    return "" if best is None else f" (best {best.value:.4g}, trial {best.number})"
