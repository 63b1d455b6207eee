"""The Optuna sweeper's options (`hydra.sweeper.*`) and what the search takes from the job's own config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sweepit.errors import is_count, require


@dataclass
class SearchOptions:
    """The Optuna sweeper's options, `hydra.sweeper.*` (the plugin's schema adds the keys only Hydra has);
    docs/configuration.md is generated from the comments on its fields."""

    # The sampler: `_target_` and its keywords (hydra/sweeper/sampler=<name>); without `_target_`, tpe.
    sampler: dict[str, Any] = field(default_factory=dict)
    # The pruner: `_target_` and its keywords (hydra/sweeper/pruner=<name>); without `_target_`, none.
    pruner: dict[str, Any] = field(default_factory=dict)
    # maximize | minimize; null = the job config's `direction` (the objective is its `metric`), else minimize.
    # Recorded in optuna_study.yaml: the printed summary, `sweepit summary` and the report judge "best" by it.
    # A list ([maximize, minimize]) searches several objectives: the study keeps a Pareto front (no pruning).
    direction: Any = None
    # The objectives' names when there are several, one per direction, read from each job's result.json: the
    # config's `metric` (its best epoch), a top-level number (epoch_time_s_mean, wall_time_s), else the last
    # epoch's value. null: each job's task returns the list of values (the released plugin's habit).
    metrics: list[str] | None = None
    # Trials in the study, counting those of earlier runs of it: re-running a finished study does nothing,
    # raise n_trials to search on. Trials cut short by a stopped driver are not counted (they are retried).
    n_trials: int = 20
    # Trials in flight at once; the next trial is asked and started as soon as any trial ends.
    n_jobs: int = 1
    # 0: the driver asks each trial and submits it as its own job (n_jobs in flight). N > 0 (hydra/launcher=slurm
    # only): N long-lived workers in one Slurm job array, each looping ask -> train -> tell against the study's
    # storage until n_trials are done; the driver only submits them (one sbatch) and follows. n_jobs is then unused.
    workers: int = 0
    # Study name in the storage; null = the job config's `study` (else "sweepit").
    study_name: str | None = None
    # null = an Optuna journal file `optuna.journal` in the sweep directory (no database server; works on
    # shared cluster file systems). Else any Optuna storage URL (sqlite:///study.db, postgresql://...,
    # redis://...) or a journal file path. Same storage + study name = the study resumes.
    storage: str | None = None
    # The search stops with an error once more than this fraction of its finished trials failed
    # (diverged and pruned trials are results, not failures) ...
    max_failure_rate: float = 0.5
    # ... checked only from this many finished trials on, so that one early failure does not stop it.
    failure_rate_min_trials: int = 5
    # A diverged trial (non-finite loss) is told to Optuna as FAIL when null (samplers then ignore it);
    # a number tells it as COMPLETE with that value (e.g. 0.0 for accuracy), so samplers avoid the region.
    diverged_value: float | None = None

    def __post_init__(self) -> None:
        require(self.n_trials >= 1, f"hydra.sweeper.n_trials must be >= 1, but got n_trials={self.n_trials}; "
                                    "set for example hydra.sweeper.n_trials=20.")
        require(self.n_jobs >= 1, "hydra.sweeper.n_jobs (trials in flight) must be >= 1, but got "
                                  f"n_jobs={self.n_jobs}; set for example hydra.sweeper.n_jobs=4.")
        require(is_count(self.workers, 0),
                "hydra.sweeper.workers must be an integer >= 0 (0: each trial its own Slurm job), but got "
                f"workers={self.workers!r}; set for example hydra.sweeper.workers=4.")
        require(0.0 <= self.max_failure_rate <= 1.0, "hydra.sweeper.max_failure_rate must be between 0 and 1, "
                f"but got max_failure_rate={self.max_failure_rate}; set for example 0.5 (1 never stops).")


@dataclass
class JobDefaults:
    """What the search takes from the job's own config where the sweeper's options say nothing."""

    metric: str | None = None         # `metric`: the objective's name, for messages and the study record
    direction: Any = None             # `direction`: the objective's direction when options.direction is unset
    epochs: Any = None                # `epochs`: the pruner's max_resource when unset (and epochs is not searched)
    study: Any = None                 # `study`: the study name when options.study_name is unset
