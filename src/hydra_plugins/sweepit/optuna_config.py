"""Config schema of sweepit's Optuna sweeper, registered as `hydra/sweeper=optuna` (no heavy imports here).

    python train.py -m hydra/sweeper=optuna 'optimizer=choice(adam,sgd,rmsprop)' 'lr=tag(log, interval(1e-4, 1))' \
        hydra.sweeper.n_trials=40 hydra.sweeper.n_jobs=4
"""

# No `from __future__ import annotations` here: Hydra's plugin scan executes this module before it is in
# sys.modules, and dataclasses then cannot resolve string annotations.
from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore


@dataclass
class SamplerConf:
    # tpe | random | cmaes | gp | qmc | grid | nsgaii. cmaes needs the `cmaes` package, gp and qmc `scipy`.
    name: str = "tpe"
    # Seeds the sampler. A resumed study reseeds with seed + its number of trials, so it does not draw the
    # same points again.
    seed: int | None = None
    # Trials drawn at random before a model-based sampler (tpe, cmaes, gp) starts to model.
    n_startup_trials: int = 10
    # nsgaii: individuals per generation.
    population_size: int = 50


@dataclass
class PrunerConf:
    # none | median | percentile | successive_halving | hyperband. Steps are epochs.
    name: str = "none"
    # median/percentile: trials that finish before any pruning happens.
    n_startup_trials: int = 5
    # median/percentile: epochs a trial trains before it may be pruned.
    n_warmup_steps: int = 0
    # median/percentile: epochs between pruning checks.
    interval_steps: int = 1
    # percentile: a trial below this percentile of the others at the same epoch is pruned (0-100).
    percentile: float = 25.0
    # successive_halving/hyperband: epochs of the first rung.
    min_resource: int = 1
    # hyperband: epochs of a full trial; null = the job config's `epochs` (or learnt from the first
    # finished trial when `epochs` is searched).
    max_resource: int | None = None
    # successive_halving/hyperband: 1/reduction_factor of the trials go on at each rung.
    reduction_factor: int = 3


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.sweepit.optuna_sweeper.OptunaSweeper"
    # Search space, `key: expression` in Hydra's override grammar: choice(a,b) or a,b; range(1,10);
    # interval(0,1); tag(log, interval(1e-4, 1)); tag(int, interval(8, 64)); a plain value is fixed.
    # Command-line sweeps (`lr=tag(log, interval(1e-4, 1))`) are added, and win for the same key.
    params: dict[str, str] | None = None
    sampler: SamplerConf = field(default_factory=SamplerConf)
    pruner: PrunerConf = field(default_factory=PrunerConf)
    # maximize | minimize; null = the job config's `direction` (the objective is its `metric`).
    direction: str | None = None
    # Trials in the study, counting those of earlier runs of it: re-running a finished study does nothing,
    # raise n_trials to search on. Trials cut short by a stopped driver are not counted (they are retried).
    n_trials: int = 20
    # Trials in flight at once; the next trial is asked and started as soon as any trial ends.
    n_jobs: int = 1
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


ConfigStore.instance().store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="sweepit")
