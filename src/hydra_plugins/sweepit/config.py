"""Config schemas of sweepit's plugins, registered in Hydra's ConfigStore. The launchers' and the sweeper's keys are
their engines' option dataclasses (LocalOptions, SlurmOptions, SearchOptions: Hydra-free, each in its room), which
these schemas extend with `_target_` and the keys only Hydra has; the samplers and pruners are Hydra's alone and
live here. docs/configuration.md is generated from the comments on the fields (`make config-reference`).
"""

# No `from __future__ import annotations` here: Hydra's plugin scan executes this module before it is in
# sys.modules, and dataclasses then cannot resolve string annotations.
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from sweepit.local import LocalOptions
from sweepit.search import HalvingOptions, SearchOptions
from sweepit.slurm import SlurmOptions


@dataclass
class LocalLauncherConf(LocalOptions):
    _target_: str = "hydra_plugins.sweepit.local_launcher.LocalLauncher"


@dataclass
class SlurmLauncherConf(SlurmOptions):
    _target_: str = "hydra_plugins.sweepit.slurm_launcher.SlurmLauncher"
    job_name: str = "${hydra.job.name}"  # the app's name (squeue's NAME column), with a per-submission suffix


# Samplers and pruners are config groups of `_target_` nodes, as in Hydra's released Optuna plugin (SAMPLER_CONFS,
# PRUNER_CONFS). Each holds every keyword of its Optuna class, those of Optuna 4 and 5 (null: Optuna's default; a null
# keyword the installed Optuna lacks is left out); a keyword that takes an object takes a node with its own `_target_`.
@dataclass
class SamplerConf:
    _target_: str = MISSING
    # Seeds the sampler. A resumed study reseeds with seed + its number of trials, so it does not draw the
    # same points again.
    seed: int | None = None


@dataclass
class TPESamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.TPESampler"
    # Trials drawn at random before TPE starts to model.
    n_startup_trials: int = 10
    # sweepit's default true (Optuna 4's: false): models optimizer and lr jointly, the best lr depending on the
    # optimizer.
    multivariate: bool = True
    # sweepit's default true: trials in flight count as bad, so that n_jobs parallel asks spread out.
    constant_liar: bool = True
    n_ei_candidates: int = 24
    group: bool = False
    consider_prior: bool | None = None
    prior_weight: float | None = None
    consider_magic_clip: bool | None = None
    consider_endpoints: bool | None = None
    gamma: Any = None
    weights: Any = None
    warn_independent_sampling: bool | None = None
    constraints_func: Any = None
    categorical_distance_func: Any = None  # Optuna 4 only


@dataclass
class RandomSamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.RandomSampler"


@dataclass
class CmaEsSamplerConf(SamplerConf):
    """Needs the `cmaes` package (pip install -e '.[search]')."""

    _target_: str = "optuna.samplers.CmaEsSampler"
    n_startup_trials: int = 1
    x0: Any = None
    sigma0: float | None = None
    independent_sampler: Any = None
    warn_independent_sampling: bool = True
    consider_pruned_trials: bool = False
    restart_strategy: str | None = None
    popsize: int | None = None
    inc_popsize: int = -1
    use_separable_cma: bool = False
    with_margin: bool = False
    lr_adapt: bool = False
    source_trials: Any = None


@dataclass
class GPSamplerConf(SamplerConf):
    """Needs scipy (pip install -e '.[search]')."""

    _target_: str = "optuna.samplers.GPSampler"
    n_startup_trials: int = 10
    independent_sampler: Any = None
    deterministic_objective: bool = False
    constraints_func: Any = None
    warn_independent_sampling: bool | None = None  # not in Optuna 4.0


@dataclass
class QMCSamplerConf(SamplerConf):
    """Needs scipy (pip install -e '.[search]')."""

    _target_: str = "optuna.samplers.QMCSampler"
    qmc_type: str = "sobol"
    scramble: bool = False
    independent_sampler: Any = None
    warn_asynchronous_seeding: bool = True
    warn_independent_sampling: bool = True


@dataclass
class GridSamplerConf(SamplerConf):
    """The grid is the search space (choice and range only); n_trials is capped at its size."""

    _target_: str = "optuna.samplers.GridSampler"


@dataclass
class NSGAIISamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.NSGAIISampler"
    # Individuals per generation.
    population_size: int = 50
    mutation: Any = None  # Optuna 5 only
    mutation_prob: float | None = None
    crossover: Any = None
    crossover_prob: float = 0.9
    swapping_prob: float = 0.5
    constraints_func: Any = None
    elite_population_selection_strategy: Any = None
    child_generation_strategy: Any = None
    after_trial_strategy: Any = None


@dataclass
class NSGAIIISamplerConf(NSGAIISamplerConf):
    _target_: str = "optuna.samplers.NSGAIIISampler"
    reference_points: Any = None
    dividing_parameter: int = 3


@dataclass
class MOTPESamplerConf(SamplerConf):
    """The released plugin's motpe: Optuna 4 removed MOTPESampler (tpe searches several objectives); choosing it
    stops the sweep with that advice."""

    _target_: str = "optuna.samplers.MOTPESampler"


@dataclass
class PrunerConf:
    _target_: str = MISSING


@dataclass
class NopPrunerConf(PrunerConf):
    """No pruning (the default)."""

    _target_: str = "optuna.pruners.NopPruner"


@dataclass
class MedianPrunerConf(PrunerConf):
    _target_: str = "optuna.pruners.MedianPruner"
    # Trials that finish before any pruning happens.
    n_startup_trials: int = 5
    # Epochs a trial trains before it may be pruned.
    n_warmup_steps: int = 0
    # Epochs between pruning checks.
    interval_steps: int = 1
    # Trials reported at an epoch before it is judged.
    n_min_trials: int = 1


@dataclass
class PercentilePrunerConf(MedianPrunerConf):
    _target_: str = "optuna.pruners.PercentilePruner"
    # A trial below this percentile of the others at the same epoch is pruned (0-100).
    percentile: float = 25.0


@dataclass
class SuccessiveHalvingPrunerConf(PrunerConf):
    _target_: str = "optuna.pruners.SuccessiveHalvingPruner"
    # Epochs of the first rung; sweepit's default 1 (Optuna's: "auto"), as hyperband's.
    min_resource: Any = 1
    # 1/reduction_factor of the trials go on at each rung; sweepit's default 3 (Optuna's: 4), as hyperband's.
    reduction_factor: int = 3
    min_early_stopping_rate: int = 0
    bootstrap_count: int = 0


@dataclass
class HyperbandPrunerConf(PrunerConf):
    _target_: str = "optuna.pruners.HyperbandPruner"
    # Epochs of the first rung.
    min_resource: int = 1
    # Epochs of a full trial; null = the job config's `epochs` (else Optuna's "auto": learnt from the first
    # finished trial, as when `epochs` is searched).
    max_resource: Any = None
    reduction_factor: int = 3
    bootstrap_count: int = 0


@dataclass
class ThresholdPrunerConf(PrunerConf):
    """Prunes a trial whose metric leaves [lower, upper]; set at least one."""

    _target_: str = "optuna.pruners.ThresholdPruner"
    lower: float | None = None
    upper: float | None = None
    n_warmup_steps: int = 0
    interval_steps: int = 1


@dataclass
class PatientPrunerConf(PrunerConf):
    """Prunes only after `patience` epochs without improvement by min_delta, and then when the wrapped pruner says."""

    _target_: str = "optuna.pruners.PatientPruner"
    # A node with its own _target_; null: no other pruner (pruned on patience alone).
    wrapped_pruner: Any = field(default_factory=lambda: {"_target_": "optuna.pruners.MedianPruner"})
    # Epochs without improvement (Optuna requires it; 1 as in its documentation).
    patience: int = 1
    min_delta: float = 0.0


@dataclass
class WilcoxonPrunerConf(PrunerConf):
    _target_: str = "optuna.pruners.WilcoxonPruner"
    p_threshold: float = 0.1
    n_startup_steps: int = 2


SAMPLER_CONFS: dict[str, type] = {
    "tpe": TPESamplerConf, "random": RandomSamplerConf, "cmaes": CmaEsSamplerConf, "gp": GPSamplerConf,
    "qmc": QMCSamplerConf, "grid": GridSamplerConf, "nsgaii": NSGAIISamplerConf, "nsgaiii": NSGAIIISamplerConf,
    "motpe": MOTPESamplerConf,
}
PRUNER_CONFS: dict[str, type] = {
    "none": NopPrunerConf, "median": MedianPrunerConf, "percentile": PercentilePrunerConf,
    "successive_halving": SuccessiveHalvingPrunerConf, "hyperband": HyperbandPrunerConf,
    "threshold": ThresholdPrunerConf, "patient": PatientPrunerConf, "wilcoxon": WilcoxonPrunerConf,
}


@dataclass
class OptunaSweeperConf(SearchOptions):
    _target_: str = "hydra_plugins.sweepit.optuna_sweeper.OptunaSweeper"
    # The sampler and pruner nodes reach the sweeper as configs: it builds them (seeded again on resume, the
    # grid from the space), in the driver and, for the pruner, in every job.
    _recursive_: bool = False
    defaults: list[Any] = field(default_factory=lambda: [{"sampler": "tpe"}, {"pruner": "none"}])
    # Config groups here (hydra/sweeper/sampler=<name>, default tpe; hydra/sweeper/pruner=<name>, default none);
    # the engine gets them as plain dicts.
    sampler: SamplerConf = MISSING  # type: ignore[assignment]
    pruner: PrunerConf = MISSING  # type: ignore[assignment]
    # Search space, `key: expression` in Hydra's override grammar: choice(a,b) or a,b; range(1,10);
    # interval(0,1); tag(log, interval(1e-4, 1)); int(interval(8, 64)); shuffle(a,b); a plain value is fixed.
    # Command-line sweeps (`lr=tag(log, interval(1e-4, 1))`) are added, and win for the same key.
    params: dict[str, str] | None = None
    # Deprecated (Hydra's Optuna plugin before 1.2): `key: {type: int|float|categorical, low, high, log, step,
    # choices}`. Read as `params` with a UserWarning that shows the `params` to write instead; beside `params`
    # it is left out (a UserWarning too, even for an empty one), as in the released plugin. A mapping, typed Any: a
    # command line sets it, or one key of it, on the null default (OmegaConf merges into no null Dict node).
    search_space: Any = None
    # `module.function` called as fn(cfg, trial) for each trial, after the space's parameters are drawn (cfg: the
    # sweep's config). It may draw conditional ones through trial.suggest_*(name, ...); each becomes the job's
    # override name=value (name a key the config lacks `+key`). When it raises, that trial fails.
    custom_search_space: str | None = None


@dataclass
class HalvingSweeperConf(HalvingOptions):
    _target_: str = "hydra_plugins.sweepit.halving_sweeper.HalvingSweeper"
    # The grid, `key: values` in the basic sweeper's grammar (a,b; range(1,4); choice(a,b)), as Hydra's basic
    # sweeper's `params`; the command line's sweeps are added, and win for the same key.
    params: dict[str, str] | None = None


_store = ConfigStore.instance()
_store.store(group="hydra/launcher", name="local", node=LocalLauncherConf, provider="sweepit")
_store.store(group="hydra/launcher", name="sweepit_slurm", node=SlurmLauncherConf, provider="sweepit")
_store.store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="sweepit")
_store.store(group="hydra/sweeper", name="halving", node=HalvingSweeperConf, provider="sweepit")
for _name, _node in SAMPLER_CONFS.items():
    _store.store(group="hydra/sweeper/sampler", name=_name, node=_node, provider="sweepit")
for _name, _node in PRUNER_CONFS.items():
    _store.store(group="hydra/sweeper/pruner", name=_name, node=_node, provider="sweepit")
