"""The Optuna search, Hydra-free: open (or resume) the study, then ask -> start -> wait_any -> tell over a launcher.
Trials are numbered by the study and jobs by the sweep directory, so the same search run again resumes: numbers go on
and nothing is overwritten. optuna is imported when the study opens, so importing this module stays fast."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sweepit.errors import SweepFailedError, SweepStoppedError, require
from sweepit.results import (
    DIRECTIONS,
    JobRecord,
    JobState,
    SweepPaths,
    default_direction_line,
    error_line,
    job_folders,
    objective_direction,
    record_end,
    summarize,
    write_study_file,
)
from sweepit.search._options import JobDefaults, SearchOptions
from sweepit.search._pruning import (
    PRUNER_ATTR,
    PRUNER_CLASSES,
    build_pruner,
    open_storage,
    require_metric,
    resolve_pruner,
    trial_env,
)
from sweepit.search._results import best_trial, write_results
from sweepit.search._samplers import build_sampler, grid_size, is_grid, resolve_sampler, short_name
from sweepit.search._space import SearchSpace
from sweepit.search._study import failure_rate, interrupt, is_counted, recover, tell
from sweepit.search._trials import as_runner, find_job_dir, read_trial

log = logging.getLogger(__name__)
SEED_STRIDE = 100_003  # seeded samplers: each worker its own stream, or they would ask the same points


class Search:
    """One Optuna search over `space` in `sweep_dir`. Everything is checked in `__init__` and `open()`, before
    any trial starts; `run()` then starts trials until `n_trials` count in the study."""

    def __init__(self, options: SearchOptions, space: SearchSpace, sweep_dir: Path, job: JobDefaults,
                 command: str = "python train.py",
                 env_overrides: Callable[[int, Mapping[str, str]], list[str]] | None = None,
                 extend: Callable[[Any], None] | None = None) -> None:
        """`env_overrides(job_num, env)` hands a job the variables that name its trial to the launcher, and returns
        the overrides that carry them, if any (None: a launcher that cannot pass them; jobs then train without pruning).
        `extend(trial)` may draw more parameters (conditional ones)."""
        require(bool(space.params) or extend is not None,
                "the Optuna sweeper needs a search space, but none was given; add one to hydra.sweeper.params or the "
                "command line, e.g. 'lr=tag(log, interval(1e-4, 1))'.")
        self.extend = extend
        self.options, self.space, self.job = options, space, job
        self.sweep_dir = Path(sweep_dir).absolute()
        self.command, self.env_overrides = command, env_overrides
        self.metric = job.metric or "objective"
        if options.metrics and not isinstance(options.direction, list | tuple):
            self.metric = options.metrics[0]
        self.pruner = self._pruner_spec()
        self.directions = self._directions()
        self.direction = self.directions[0]
        self.multi = len(self.directions) > 1
        # Whether anyone chose the direction; if not, Optuna's (and Hydra's) default is in force, and "best" says so.
        self.direction_set = self.multi or any(d not in (None, "") for d in (options.direction, job.direction))
        require_metric(self.pruner, job.metric)
        self._unreported_warned = False
        self.sampler = resolve_sampler(options.sampler)  # {_target_, keywords}: refused now when unknown
        self.grid = is_grid(self.sampler)
        if self.grid:
            space.grid()  # refuses a continuous space now rather than at the first ask
        self.study: Any = None
        self.info: dict[str, Any] = {}

    def _directions(self) -> list[str]:
        """One direction per objective: a list in hydra.sweeper.direction searches several (a Pareto front)."""
        ours, metrics = self.options.direction, self.options.metrics
        if isinstance(ours, list | tuple) and len(ours) == 1:
            ours = self.options.direction = ours[0]
        if not isinstance(ours, list | tuple):
            require(not metrics or len(metrics) == 1,
                    f"hydra.sweeper.metrics names one objective per direction, but it names {len(metrics or [])} "
                    f"({metrics}) and hydra.sweeper.direction={ours!r} is one; give as many directions, e.g. "
                    f"hydra.sweeper.direction=[{','.join(['minimize'] * len(metrics or []))}].")
            return [self._direction()]
        bad = [d for d in ours if d not in DIRECTIONS]
        require(bool(ours) and not bad, f"each of hydra.sweeper.direction must be maximize or minimize, but it is "
                                        f"{list(ours)}; e.g. hydra.sweeper.direction=[maximize,minimize].")
        require(not metrics or len(metrics) == len(ours),
                f"hydra.sweeper.metrics names one objective per direction, but hydra.sweeper.direction={list(ours)} "
                f"has {len(ours)} and hydra.sweeper.metrics={list(metrics or [])} {len(metrics or [])}; give both "
                "the same length.")
        pruner = short_name(self.pruner, PRUNER_CLASSES)
        require(pruner == "none", f"Optuna prunes single-objective studies only, but hydra.sweeper.direction="
                                  f"{list(ours)} has {len(ours)} objectives and the pruner is {pruner}; use "
                                  "hydra/sweeper/pruner=none.")
        return [str(d) for d in ours]

    def _direction(self) -> str:
        """`objective_direction`, checked, naming where it came from."""
        ours, theirs = self.options.direction, self.job.direction
        direction = objective_direction(ours, theirs)
        key = "hydra.sweeper.direction" if ours not in (None, "") else "direction (the job config's)"
        require(direction in DIRECTIONS, f"the objective's direction must be maximize or minimize, but {key} is "
                                         f"{direction!r}; set hydra.sweeper.direction=maximize (or minimize).")
        if ours not in (None, "") and theirs in DIRECTIONS and theirs != direction:
            log.warning(f"hydra.sweeper.direction={direction} and the job config's direction={theirs} differ: the "
                        f"study, the summary and the report use {direction} (the sweeper's wins), while each job "
                        f"still sees direction={theirs}; set direction={direction} too to make them agree.")
        return direction

    def _warn_unreported(self, trial: Any, record: JobRecord) -> None:
        """Once a search: a pruner is set, yet a job completed without reporting the metric at any epoch (its loop
        calls sweepit.report with other keys, or not at all), so the pruner could not judge it."""
        if self._unreported_warned or short_name(self.pruner, PRUNER_CLASSES) == "none" or self.multi:
            return
        if record.status != JobState.COMPLETED or self.study._storage.get_trial(trial._trial_id).intermediate_values:
            return
        self._unreported_warned = True
        keys = sorted(k for k in (record.result.get("final") or {}) if k != "epoch")
        log.warning(f"trial {trial.number} completed without reporting {self.metric} at any epoch, so the pruner "
                    f"could not judge it (its last report had {', '.join(keys) if keys else 'nothing'}).\n"
                    f"Call sweepit.report({{'{self.metric}': value}}, epoch=epoch) after each epoch, or set the "
                    "config's `metric` to a key the loop reports.")

    def _pruner_spec(self) -> dict[str, Any]:
        """The pruner, resolved; hyperband's max_resource is the job config's `epochs` when unset (and not searched)."""
        spec = resolve_pruner(self.options.pruner)
        epochs = self.job.epochs
        if (spec["_target_"] == PRUNER_CLASSES["hyperband"] and spec.get("max_resource") is None
                and isinstance(epochs, int) and "epochs" not in self.space.distributions):
            spec["max_resource"] = epochs
        build_pruner(spec)  # its arguments are checked now, not in the first job
        return spec

    # -- the study, opened before any trial starts ----------------------------------------------------------
    def open(self) -> None:
        """Create or resume the study (its direction must not change) and record it in optuna_study.yaml."""
        import optuna

        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        storage_url = self.options.storage or str(SweepPaths(self.sweep_dir).study_journal)
        storage = open_storage(storage_url)
        name = str(self.options.study_name or self.job.study or "sweepit")
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the search logs each trial itself
        study = optuna.create_study(storage=storage, study_name=name, directions=self.directions,  # type: ignore[arg-type]
                                    load_if_exists=True, pruner=build_pruner(self.pruner))
        kept = [d.name.lower() for d in study.directions]
        shown = kept[0] if len(kept) == 1 else f"[{','.join(kept)}]"
        require(kept == self.directions, f"study {name!r} in {storage_url} must keep its direction, but it is "
                                         f"{' '.join(kept)} and the sweep asks {' '.join(self.directions)}; use "
                                         f"another hydra.sweeper.study_name, or hydra.sweeper.direction={shown}.")
        self.seed_sampler(study)
        study.set_user_attr(PRUNER_ATTR, self.pruner)
        self.info = {"storage": storage_url, "study_name": name, "metric": self.job.metric,
                     "direction": None if self.multi else self.direction, "direction_set": self.direction_set,
                     "sampler": self.sampler, "pruner": self.pruner,
                     "space": {p.name: p.spelled for p in self.space.params}, "fixed": list(self.space.fixed),
                     "command": self.command}
        if self.multi:  # a Pareto front, no single "best": the summary and the report show the front
            self.info.update(directions=self.directions, metrics=list(self.options.metrics or []))
            study.set_user_attr("sweepit_metrics", list(self.options.metrics or []))
        study.set_user_attr("sweepit_space", self.info["space"])
        # Where the summary, the report and `sweepit ls` find the study and the direction of its "best".
        write_study_file(self.sweep_dir, self.info)
        self.study = study
        if not self.direction_set:  # before any trial runs: Ctrl-C now costs nothing
            log.warning(default_direction_line(self.metric).removeprefix("warning: "))

    def attach(self, worker_index: int) -> None:
        """The study the driver opened, loaded again in a worker, whose seeded sampler draws a stream of its own."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.load_study(study_name=str(self.info["study_name"]), pruner=build_pruner(self.pruner),
                                       storage=open_storage(str(self.info["storage"])))
        self.seed_sampler(self.study, SEED_STRIDE * (worker_index + 1))

    def seed_sampler(self, study: Any, stride: int = 0) -> None:
        """A resumed study reseeds, or a seeded sampler would draw the points of the first run again."""
        seed = self.sampler.get("seed")
        if seed is not None:
            seed = int(seed) + len(study.get_trials(deepcopy=False)) + stride
        study.sampler = build_sampler(self.sampler, seed, self.space)

    def total_trials(self) -> int:
        total = self.options.n_trials
        return min(total, grid_size(self.space)) if self.grid else total

    def n_counted(self) -> int:
        return sum(is_counted(t) for t in self.study.get_trials(deepcopy=False))

    def nothing_left(self) -> str | None:
        """Why a run of this study has no trial to start (its `n_trials` count already), with how to search on;
        None while trials are left."""
        n_counted, total = self.n_counted(), self.total_trials()
        if n_counted < total:
            return None
        if self.grid and grid_size(self.space) <= self.options.n_trials:  # more trials would find no new point
            return (f"the study {self.info['study_name']!r} has tried every point of its grid ({total}): nothing to "
                    "run. To search further, widen the space in a new sweep.")
        more = self.options.n_trials * 2
        return (f"the study {self.info['study_name']!r} has its hydra.sweeper.n_trials={total} trials already "
                f"({n_counted}, pruned and failed ones included): nothing to run. To search on, raise n_trials, "
                f"which counts the whole study: `sweepit resume {self.sweep_dir} hydra.sweeper.n_trials={more}`.")

    def opening(self, n_recovered: int, how: str) -> str:
        return (f"Optuna study {self.info['study_name']!r} ({self.objectives()}) in {self.info['storage']}: "
                f"{self.n_counted()} of {self.total_trials()} trials done before"
                + (f", {n_recovered} recovered" if n_recovered else "") + f"; sampler {short_name(self.sampler)}, "
                f"pruner {short_name(self.pruner, PRUNER_CLASSES)}; {how}; space {self.space.describe()}")

    # -- the search -------------------------------------------------------------------------------------------
    def run(self, launcher: Any, check: Callable[[list[str]], None] | None = None) -> list[Any]:
        """Trials until `n_trials` count in the study; what the launcher returned for each job. A trial whose job's
        config `check(overrides)` refuses fails alone: a bad value among the choices must not end the search. Raises
        SweepFailedError when the search stopped early; whatever ends it, trials in flight are told as interrupted
        (retried by the next run) and the result files are written."""
        assert self.study is not None, "open() the search before run()"
        study, n_jobs = self.study, self.options.n_jobs
        n_recovered = recover(study, self.sweep_dir, self.options.diverged_value, self.options.metrics)
        total, n_counted = self.total_trials(), self.n_counted()
        log.info(self.opening(n_recovered, f"{n_jobs} in flight"))
        if (done := self.nothing_left()) is not None:
            log.info(done)
        runner = as_runner(launcher, n_jobs)
        returns: list[Any] = []
        in_flight: dict[int, Any] = {}   # job number -> trial
        next_job = self.next_free_job()
        stop: str | None = None
        interrupted = False  # the stop is a trial interrupted (Ctrl-C, SIGTERM, scancel): no failure of the search
        try:
            while True:
                while stop is None and len(in_flight) < n_jobs and n_counted < total:
                    trial = study.ask(self.space.distributions)
                    job = max(trial.number, next_job)
                    next_job = job + 1
                    n_counted += 1
                    overrides = self.prepare(trial, job, check)
                    if overrides is None:
                        stop = stop or self.failure_stop()
                        continue
                    env = trial_env(self.info, trial.number)
                    job_overrides = [*overrides, *(self.env_overrides(job, env) if self.env_overrides else [])]
                    log.info(f"trial {trial.number} -> job {job}: {' '.join(overrides)}")
                    runner.start(job_overrides, job)
                    in_flight[job] = trial
                if not in_flight:
                    break
                for job, ret in runner.wait_any():
                    if job not in in_flight:
                        log.warning(f"the launcher returned job {job}, which this search did not start; ignored")
                        continue
                    trial = in_flight.pop(job)
                    why = self.tell_job(trial, find_job_dir(self.sweep_dir, job, ret), ret)
                    if why is not None:  # interrupted: Ctrl-C, SIGTERM, scancel stop the sweep
                        n_counted -= 1
                        interrupted = interrupted or stop is None
                        stop = stop or (f"trial {trial.number} (job {job}) was interrupted, so the search stops "
                                        f"({why}); its parameters are tried again when the same command runs again "
                                        f"on hydra.sweep.dir={self.sweep_dir}.")
                    if ret is not None:
                        returns.append(ret)
                stop = stop or self.failure_stop()
        except BaseException:
            for trial in in_flight.values():
                interrupt(study, trial.number, trial._trial_id)
            raise
        finally:
            runner.close()
            write_results(self.sweep_dir, study, self.info)
        self.print_end()
        if stop is not None:
            raise (SweepStoppedError if interrupted else SweepFailedError)(stop)
        return returns

    def prepare(self, trial: Any, job: int, check: Callable[[list[str]], None] | None = None) -> list[str] | None:
        """The overrides of the trial's job `job`; None, the trial told FAIL, when `extend` or `check` raised."""
        trial.set_user_attr("job_num", job)
        if self.extend is not None and not self.before_start(self.extend, trial, "custom_search_space"):
            return None
        overrides = self.space.overrides(trial.params)
        trial.set_user_attr("overrides", overrides)
        if check is not None and not self.before_start(lambda _: check(overrides), trial, "config"):
            return None
        return overrides

    def before_start(self, step: Callable[[Any], None], trial: Any, what: str) -> bool:
        """False, the trial told FAIL with the reason, when `step(trial)` raised."""
        try:
            step(trial)
        except Exception as e:
            error = " ".join(str(e).split()) or type(e).__name__
            if what == "custom_search_space":
                error = f"custom_search_space raised {type(e).__name__}: {error}"
            failed = record_end(None, JobState.FAILED, None, error=error)
            tell(self.study, trial, failed, None, self.options.diverged_value)
            reason = "its job's config cannot be made" if what == "config" else "the custom search space raised"
            log.warning(f"trial {trial.number} failed before it started: {reason} ({error[:300]}); the search goes on")
            return False
        return True

    def tell_job(self, trial: Any, job_dir: Path | None, ret: Any) -> str | None:
        """Tell Optuna what became of the trial's job; what stopped it when it was interrupted."""
        record, values = read_trial(job_dir, ret, self.options.metrics, len(self.directions))
        state = tell(self.study, trial, record, values, self.options.diverged_value, job_dir)
        self._warn_unreported(trial, record)
        best = None if self.multi else best_trial(self.study)
        log.info(f"trial {trial.number} {record.status} -> {state}"
                 + (f", {self.metric}={values[0]:.4g}" if values is not None and not self.multi else "")
                 + (f", values {values}" if self.multi and values is not None else "")
                 + (f": {error_line(record.error)}" if record.error else "")
                 + ("" if best is None else f" (best {best.value:.4g}, trial {best.number})"))
        if record.status != JobState.INTERRUPTED:
            return None
        return record.error.splitlines()[0][:200] if record.error else "no error recorded"

    def next_free_job(self) -> int:
        return max(job_folders(self.sweep_dir), default=-1) + 1

    def failure_stop(self) -> str | None:
        failed, finished = failure_rate(self.study)
        rate, min_trials = self.options.max_failure_rate, self.options.failure_rate_min_trials
        if finished < max(1, min_trials) or failed <= rate * finished:
            return None
        return (f"the Optuna search stops when more than max_failure_rate={rate:g} of its finished trials fail "
                f"(from {min_trials} trials on), but {failed} of {finished} failed (diverged and pruned trials do "
                "not count). Read the `error` column of trials.csv and the jobs' stderr.log, fix the cause, and run "
                "the same command again to resume; or raise hydra.sweeper.max_failure_rate.")

    def objectives(self) -> str:
        names = self.options.metrics or ([self.metric] if not self.multi else
                                         [f"returned[{i}]" for i in range(len(self.directions))])
        return ", ".join(f"{d} {n}" for d, n in zip(self.directions, names, strict=False))

    def print_end(self) -> None:
        """The sweep's table (its "best" in the study's direction) and the study's best."""
        paths = SweepPaths(self.sweep_dir)
        print(summarize(self.sweep_dir), flush=True)
        if self.multi:
            front = self.study.best_trials
            print(f"Optuna: {len(front)} trial(s) on the Pareto front ({self.objectives()}): "
                  + ", ".join(f"trial {t.number} (job {t.user_attrs.get('job_num')})" for t in front)
                  + f"; in {paths.optimization_results} and {paths.best_params}",
                  flush=True)
            return
        best = best_trial(self.study)
        head = "no trial completed" if best is None else (
            f"best trial {best.number} (job {best.user_attrs.get('job_num')}): {self.direction} {self.metric} = "
            f"{best.value:.4g}")
        print(f"Optuna: {head}; best parameters in {paths.best_params}, all trials in {paths.trials}", flush=True)
