"""Config schemas of sweepit's plugins, registered in Hydra's ConfigStore (no heavy imports here):

    hydra/launcher=local            LocalLauncherConf    each job in a forked worker process (the default here)
    hydra/launcher=sweepit_slurm    SlurmLauncherConf    each job a Slurm job; the cluster profiles extend it
    hydra/sweeper=optuna            OptunaSweeperConf    adaptive search
    hydra/sweeper/sampler=tpe ...   TPESamplerConf ...   its sampler (every keyword of the Optuna class)
    hydra/sweeper/pruner=none ...   NopPrunerConf ...    its pruner

Every field is commented with its unit; risky defaults say why they are what they are.
"""

# No `from __future__ import annotations` here: Hydra's plugin scan executes this module before it is in
# sys.modules, and dataclasses then cannot resolve string annotations.
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

# Imported once in the driver before any job is forked, so each job starts warm. `module:function` also
# calls a function with no arguments; `package.*` imports the package's modules too. Nothing here may run
# torch compute: OpenMP thread pools do not survive fork. torch._dynamo is what torch's optimizers import
# on first use (about 2 s here); the private torch modules and sweepit's data modules are imported lazily
# by a first training step, which each job would otherwise pay for (and compile, where Python writes no
# bytecode cache). An entry missing from this environment is skipped.
DEFAULT_PRELOAD = [
    "torch", "torch.optim", "torch._dynamo", "torch.profiler._cupti_monitor", "torch.utils.serialization.config",
    "sweepit.train._loop", "sweepit.train.data.*", "sweepit.train._job:code_version",
]


@dataclass
class LocalLauncherConf:
    _target_: str = "hydra_plugins.sweepit.local_launcher.LocalLauncher"
    # Worker processes at once. 0 = auto: one per GPU when there are GPUs, else CPU cores // threads_per_job
    # (every core with auto threads), and on CPU at most the launch's job count. A job with gpus_key=N takes
    # N GPUs (through CUDA_VISIBLE_DEVICES), or on CPU N workers (its N ranks).
    n_workers: int = 0
    # torch CPU threads per job (torch.set_num_threads). 0 = auto: CPU cores // workers, so that 32 jobs on
    # 16 cores get 1 thread each and 2 jobs get 8. A job's own trainer.threads > 0 wins.
    threads_per_job: int = 0
    # true: the sweep exits with status 1 when any job failed or was interrupted. false: exit 0; such
    # jobs reach the sweeper as COMPLETED with return value None (result.json keeps the real status).
    fail_on_error: bool = True
    # Skip jobs whose result.json in hydra.sweep.dir says completed (or diverged); rerun the others.
    # Set hydra.sweep.dir to the sweep to resume; job numbers and directories stay the same.
    resume: bool = False
    # Modules imported in the driver before forking (see DEFAULT_PRELOAD).
    preload: list[str] = field(default_factory=lambda: list(DEFAULT_PRELOAD))
    # Last lines of a failed job's stderr.log copied into its result.json (a segfault's Python stack
    # from faulthandler takes about 30).
    stderr_tail_lines: int = 50
    # Seconds between SIGTERM and SIGKILL when running jobs are stopped (Ctrl-C, SIGTERM to the driver).
    term_grace_s: float = 5.0
    # Config key holding the devices (ranks) of one job: GPUs to give it, or workers it occupies on CPU.
    gpus_key: str = "trainer.gpus"
    # Print the results table after the jobs of each launch; sweepers launching many small batches may
    # turn it off.
    print_summary: bool = True



# -- Slurm -------------------------------------------------------------------------------------------------
# The cluster profiles in conf/hydra/launcher/ inside this package (slurm, marenostrum5, juwels_booster,
# cte_power; every Hydra app finds them through sweepit's SearchPathPlugin) extend this schema.
#
# Keys shared with hydra-submitit-launcher mean what they mean there, so a submitit_slurm config carries over:
# timeout_min, cpus_per_task, gpus_per_node, gpus_per_task, gres, mem_gb, nodes, tasks_per_node, partition,
# account, qos, constraint, setup, additional_parameters (and signal_delay_s, max_num_timeout,
# array_parallelism). They make the request of every job whose config says nothing; a job's own config wins
# where it has `gpus_key` (trainer.gpus=N: N tasks with one GPU each) or `timeout_key` (timeout_min), and the
# launcher warns about the keys this leaves unused. A request with no GPU anywhere is a CPU-only job.
#
# gpus_per_node: earlier sweepit versions used this name for the GPUs a node *has*; it now means, as in submitit,
# the GPUs a job *asks for* on each node. What a node has is `node_gpus`. (A profile written for the old
# meaning now asks for GPUs only in jobs without trainer.gpus, and the launcher says so at launch.)
@dataclass
class SlurmLauncherConf:
    _target_: str = "hydra_plugins.sweepit.slurm_launcher.SlurmLauncher"

    # -- where the jobs run ------------------------------------------------------------------------------
    # Slurm partition (sbatch --partition); null: the cluster's default partition.
    partition: str | None = None
    # Project account charged for the hours (sbatch --account); null: your default account.
    account: str | None = None
    # Quality of service (sbatch --qos); null: the partition's default.
    qos: str | None = None
    # Keys of this launcher that the cluster refuses jobs without (e.g. [account, qos]): when one is null the
    # sweep stops before submitting anything and says how to set it. Profiles use this rather than `???`,
    # which makes Hydra stop with a long traceback before the launcher can explain.
    required: list[str] = field(default_factory=list)

    # -- what a job asks for, unless its own config says (submitit's names and meanings) --------------------
    # Time limit in minutes (sbatch --time), for jobs whose config has no `timeout_key`.
    timeout_min: int = 60
    # Nodes per job (sbatch --nodes), for jobs without `gpus_key`.
    nodes: int = 1
    # Tasks (processes, ranks) per node (sbatch --ntasks-per-node), for jobs without `gpus_key`.
    tasks_per_node: int = 1
    # GPUs to ask for on each node (sbatch --gpus-per-node), for jobs without `gpus_key`; null or 0: none.
    gpus_per_node: int | None = None
    # GPUs to ask for per task (sbatch --gpus-per-task), for jobs without `gpus_key`; null or 0: none.
    gpus_per_task: int | None = None
    # Generic resources per node (sbatch --gres), e.g. "gpu:4" or "gpu:a100:4", for jobs without `gpus_key`.
    gres: str | None = None
    # CPU cores per task (sbatch --cpus-per-task); also each task's torch threads (OMP_NUM_THREADS).
    # null: Slurm's default (one) and no OMP_NUM_THREADS. submitit's default is null; 1 here keeps the threads
    # of a task to its cores.
    cpus_per_task: int | None = 1
    # Memory per node in GB (sbatch --mem); null: the partition's default (often proportional to the cores).
    mem_gb: int | None = None
    # Node features (sbatch --constraint), e.g. "a100"; null: any node of the partition.
    constraint: str | None = None
    # Shell lines run in the sbatch script before the job starts, e.g. ["module load CUDA/12.1"].
    setup: list[str] | None = field(default_factory=list)
    # Further sbatch options, without the dashes: {"mail-type": "FAIL", "exclusive": true}.
    additional_parameters: dict[str, Any] = field(default_factory=dict)

    # -- how a job's own GPU count becomes a request ------------------------------------------------------------
    # GPUs one node of the partition has (a fact about the cluster, not a request); null: read from `sinfo`
    # at launch. A job with gpus_key=N gets min(N, node_gpus) GPUs on each of ceil(N / node_gpus) nodes.
    node_gpus: int | None = None
    # Most nodes a job's gpus_key may spread over (a job with more GPUs than max_nodes x node_gpus is refused).
    max_nodes: int = 1
    # Config key holding a job's GPUs (its tasks, one GPU each); null: never read (every job takes the request
    # above, e.g. CPU-only jobs of an app that has trainer.gpus).
    gpus_key: str | None = "trainer.gpus"
    # Config key holding a job's time limit in minutes; null: never read (hydra.launcher.timeout_min for all).
    timeout_key: str | None = "timeout_min"

    # -- how jobs start ------------------------------------------------------------------------------------
    # Extra arguments of the srun that starts the tasks, e.g. ["--cpu-bind=none"].
    srun_args: list[str] = field(default_factory=list)
    # Command that runs Python on the nodes; null: this interpreter (the nodes must see the same path).
    python: str | None = None
    # Slurm job name (squeue shows it); a per-submission suffix is added to tell sweeps apart.
    job_name: str = "${hydra.job.name}"

    # -- how jobs are grouped ------------------------------------------------------------------------------
    # Array tasks of one job array running at once (sbatch --array=...%N); jobs with the same request form
    # one array. (submitit's default: 256.)
    array_parallelism: int = 64
    # Most tasks in one job array; null: the cluster's MaxArraySize (`scontrol show config`). Larger groups
    # are split into several arrays.
    max_array_size: int | None = None

    # -- time limits and preemption ------------------------------------------------------------------------
    # Seconds before the time limit at which Slurm sends USR2: the job is then requeued and resumes from its
    # last epoch checkpoint (trainer.checkpoint=true). Slurm may send it up to 60 s early, so each job's
    # time limit must be at least (signal_delay_s + 60) / 60 min (2.5 min for 90 s). (submitit's default: 120.)
    signal_delay_s: int = 90
    # Requeues after reaching the time limit (preemptions do not count); then the job ends as failed.
    # (submitit's default is 0; sweepit's training resumes from its checkpoint, so it may go on.)
    max_num_timeout: int = 3

    # -- following ------------------------------------------------------------------------------------------
    # true: follow the jobs with a progress line and end with the results table. false: submit, write
    # sweep.json, print the job ids and exit 0; follow later with `sweepit status DIR`.
    wait: bool = True
    # Print each request's sbatch script, the job count and the estimated GPU-hours; submit nothing.
    dry_run: bool = False
    # Set by `sweepit resume DIR`: skip completed jobs, follow jobs still queued or running in Slurm, and
    # submit the others again (same job numbers and directories).
    resume: bool = False
    # true: exit with status 1 when any job failed or was interrupted (cancelled, timed out, node failure).
    fail_on_error: bool = True
    # Seconds between two looks at squeue/sacct and the jobs' result.json files.
    poll_interval_s: float = 2.0
    # Seconds a job may stay without result.json after Slurm says it ended (or without its return value
    # after its result.json), before the driver records it as it is (a shared file system may show a file a
    # moment late).
    result_grace_s: float = 2.0
    # Last lines of a dead job's stderr log copied into the result.json the driver writes for it.
    stderr_tail_lines: int = 50
    # Print the results table when the jobs end; sweepers launching many small batches may turn it off.
    print_summary: bool = True



# -- Optuna ------------------------------------------------------------------------------------------------
#   python train.py -m hydra/sweeper=optuna 'optimizer=choice(adam,sgd,rmsprop)' 'lr=tag(log, interval(1e-4, 1))' \
#       hydra.sweeper.n_trials=40 hydra/sweeper/sampler=tpe hydra.sweeper.sampler.n_startup_trials=5
#
# Samplers and pruners are config groups of `_target_` nodes, as in Hydra's released Optuna plugin:
# hydra/sweeper/sampler=tpe|random|cmaes|gp|qmc|grid|nsgaii|nsgaiii, hydra/sweeper/pruner=none|median|percentile|
# successive_halving|hyperband|threshold|patient|wilcoxon. Each node holds every keyword of its Optuna class (those of
# Optuna 4 and 5; null: Optuna's default, and a null keyword the installed Optuna lacks is left out). A keyword that
# takes an object (independent_sampler, wrapped_pruner, ...) takes a node with its own `_target_`.
#
# `name`, sweepit's first form, still works: a node whose `name` names another sampler (pruner) than its `_target_`
# builds that one, with sweepit's defaults and the keys of this node that it takes: hydra.sweeper.sampler.name=random
# hydra.sweeper.sampler.seed=3; hydra.sweeper.pruner.name=percentile hydra.sweeper.pruner.percentile=90.
@dataclass
class SamplerConf:
    _target_: str = MISSING
    # Short name of the sampler (sweepit's first form; see above). Setting another one switches the sampler.
    name: str | None = None
    # Seeds the sampler. A resumed study reseeds with seed + its number of trials, so it does not draw the
    # same points again.
    seed: int | None = None


@dataclass
class TPESamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.TPESampler"
    name: str | None = "tpe"
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
    name: str | None = "random"


@dataclass
class CmaEsSamplerConf(SamplerConf):
    """Needs the `cmaes` package (pip install -e '.[search]')."""

    _target_: str = "optuna.samplers.CmaEsSampler"
    name: str | None = "cmaes"
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
    name: str | None = "gp"
    n_startup_trials: int = 10
    independent_sampler: Any = None
    deterministic_objective: bool = False
    constraints_func: Any = None
    warn_independent_sampling: bool = True


@dataclass
class QMCSamplerConf(SamplerConf):
    """Needs scipy (pip install -e '.[search]')."""

    _target_: str = "optuna.samplers.QMCSampler"
    name: str | None = "qmc"
    qmc_type: str = "sobol"
    scramble: bool = False
    independent_sampler: Any = None
    warn_asynchronous_seeding: bool = True
    warn_independent_sampling: bool = True


@dataclass
class GridSamplerConf(SamplerConf):
    """The grid is the search space (choice and range only); n_trials is capped at its size."""

    _target_: str = "optuna.samplers.GridSampler"
    name: str | None = "grid"


@dataclass
class NSGAIISamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.NSGAIISampler"
    name: str | None = "nsgaii"
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
    name: str | None = "nsgaiii"
    reference_points: Any = None
    dividing_parameter: int = 3


@dataclass
class MOTPESamplerConf(SamplerConf):
    """The released plugin's motpe: Optuna 4 removed MOTPESampler (tpe searches several objectives); choosing it
    stops the sweep with that advice."""

    _target_: str = "optuna.samplers.MOTPESampler"
    name: str | None = "motpe"


@dataclass
class PrunerConf:
    _target_: str = MISSING
    # Short name of the pruner (sweepit's first form; see above). Setting another one switches the pruner.
    name: str | None = None


@dataclass
class NopPrunerConf(PrunerConf):
    """No pruning (the default). Its other keys serve sweepit's first form only: with `name` set to another
    pruner they are that pruner's keywords (hydra.sweeper.pruner.name=percentile hydra.sweeper.pruner.percentile=90);
    null: that pruner's default."""

    _target_: str = "optuna.pruners.NopPruner"
    name: str | None = "none"
    n_startup_trials: int | None = None
    n_warmup_steps: int | None = None
    interval_steps: int | None = None
    percentile: float | None = None
    min_resource: Any = None
    max_resource: Any = None
    reduction_factor: int | None = None


@dataclass
class MedianPrunerConf(PrunerConf):
    _target_: str = "optuna.pruners.MedianPruner"
    name: str | None = "median"
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
    name: str | None = "percentile"
    # A trial below this percentile of the others at the same epoch is pruned (0-100).
    percentile: float = 25.0


@dataclass
class SuccessiveHalvingPrunerConf(PrunerConf):
    _target_: str = "optuna.pruners.SuccessiveHalvingPruner"
    name: str | None = "successive_halving"
    # Epochs of the first rung; sweepit's default 1 (Optuna's: "auto"), as hyperband's.
    min_resource: Any = 1
    # 1/reduction_factor of the trials go on at each rung; sweepit's default 3 (Optuna's: 4), as hyperband's.
    reduction_factor: int = 3
    min_early_stopping_rate: int = 0
    bootstrap_count: int = 0


@dataclass
class HyperbandPrunerConf(PrunerConf):
    _target_: str = "optuna.pruners.HyperbandPruner"
    name: str | None = "hyperband"
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
    name: str | None = "threshold"
    lower: float | None = None
    upper: float | None = None
    n_warmup_steps: int = 0
    interval_steps: int = 1


@dataclass
class PatientPrunerConf(PrunerConf):
    """Prunes only after `patience` epochs without improvement by min_delta, and then when the wrapped pruner says."""

    _target_: str = "optuna.pruners.PatientPruner"
    name: str | None = "patient"
    # A node with its own _target_; null: no other pruner (pruned on patience alone).
    wrapped_pruner: Any = field(default_factory=lambda: {"_target_": "optuna.pruners.MedianPruner"})
    # Epochs without improvement (Optuna requires it; 1 as in its documentation).
    patience: int = 1
    min_delta: float = 0.0


@dataclass
class WilcoxonPrunerConf(PrunerConf):
    _target_: str = "optuna.pruners.WilcoxonPruner"
    name: str | None = "wilcoxon"
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
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.sweepit.optuna_sweeper.OptunaSweeper"
    # The sampler and pruner nodes reach the sweeper as configs: it builds them (seeded again on resume, the
    # grid from the space), in the driver and, for the pruner, in every job.
    _recursive_: bool = False
    defaults: list[Any] = field(default_factory=lambda: [{"sampler": "tpe"}, {"pruner": "none"}])
    # Search space, `key: expression` in Hydra's override grammar: choice(a,b) or a,b; range(1,10);
    # interval(0,1); tag(log, interval(1e-4, 1)); int(interval(8, 64)); shuffle(a,b); a plain value is fixed.
    # Command-line sweeps (`lr=tag(log, interval(1e-4, 1))`) are added, and win for the same key.
    params: dict[str, str] | None = None
    # Deprecated (Hydra's Optuna plugin before 1.2): `key: {type: int|float|categorical, low, high, log, step,
    # choices}`. Read as `params` with a UserWarning that shows the `params` to write instead; beside `params`
    # it is left out (a UserWarning too), as in the released plugin.
    search_space: dict[str, Any] = field(default_factory=dict)
    # `module.function` called as fn(cfg, trial) for each trial, after the space's parameters are drawn (cfg: the
    # sweep's config). It may draw conditional ones through trial.suggest_*(name, ...); each becomes the job's
    # override name=value (name a key the config lacks `+key`). When it raises, that trial fails.
    custom_search_space: str | None = None
    sampler: SamplerConf = MISSING   # hydra/sweeper/sampler=<name> (default tpe)
    pruner: PrunerConf = MISSING     # hydra/sweeper/pruner=<name> (default none)
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


_store = ConfigStore.instance()
_store.store(group="hydra/launcher", name="local", node=LocalLauncherConf, provider="sweepit")
_store.store(group="hydra/launcher", name="sweepit_slurm", node=SlurmLauncherConf, provider="sweepit")
_store.store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="sweepit")
for _name, _node in SAMPLER_CONFS.items():
    _store.store(group="hydra/sweeper/sampler", name=_name, node=_node, provider="sweepit")
for _name, _node in PRUNER_CONFS.items():
    _store.store(group="hydra/sweeper/pruner", name=_name, node=_node, provider="sweepit")
