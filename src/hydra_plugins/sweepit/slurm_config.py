"""Config schema of sweepit's Slurm launcher, registered as `hydra/launcher=sweepit_slurm` (no heavy imports here).

The cluster profiles in conf/hydra/launcher/ (slurm, marenostrum5, juwels_booster, cte_power) extend it.
A job's own config sets what it needs: `trainer.gpus` (tasks, one GPU each) and `timeout_min` (time limit).
"""

# No `from __future__ import annotations` here: Hydra's plugin scan executes this module before it is in
# sys.modules, and dataclasses then cannot resolve string annotations.
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class SlurmLauncherConf:
    _target_: str = "hydra_plugins.sweepit.slurm_launcher.SlurmLauncher"

    # -- where the jobs run ------------------------------------------------------------------------------
    # Slurm partition (sbatch --partition); null: the cluster's default partition.
    partition: str | None = None
    # Project account charged for the GPU hours (sbatch --account); null: your default account.
    account: str | None = None
    # Quality of service (sbatch --qos); null: the partition's default.
    qos: str | None = None
    # Keys of this launcher that the cluster refuses jobs without (e.g. [account, qos]): when one is null the
    # sweep stops before submitting anything and says how to set it. Profiles use this rather than `???`,
    # which makes Hydra stop with a long traceback before the launcher can explain.
    required: list[str] = field(default_factory=list)
    # GPUs on one node of the partition; null: read from `sinfo` at launch. trainer.gpus=N asks for
    # min(N, gpus_per_node) GPUs on each of ceil(N / gpus_per_node) nodes, one task per GPU.
    gpus_per_node: int | None = None
    # Most nodes one job may span (a job with more GPUs than max_nodes x gpus_per_node is refused).
    max_nodes: int = 1
    # CPU cores per task, i.e. per GPU (sbatch --cpus-per-task); also the job's torch threads (OMP_NUM_THREADS).
    cpus_per_task: int = 1
    # Memory per node in GB (sbatch --mem); null: the partition's default (often proportional to the cores).
    mem_gb: int | None = None
    # Node features (sbatch --constraint), e.g. "a100"; null: any node of the partition.
    constraint: str | None = None
    # Shell lines run in the sbatch script before the job starts, e.g. ["module load CUDA/12.1"].
    setup: list[str] = field(default_factory=list)
    # Further sbatch options, without the dashes: {"mail-type": "FAIL", "exclusive": true}.
    additional_parameters: dict[str, Any] = field(default_factory=dict)
    # Extra arguments of the srun that starts the tasks, e.g. ["--cpu-bind=none"].
    srun_args: list[str] = field(default_factory=list)
    # Command that runs Python on the nodes; null: this interpreter (the nodes must see the same path).
    python: str | None = None
    # Slurm job name (squeue shows it); a per-submission suffix is added to tell sweeps apart.
    job_name: str = "${hydra.job.name}"

    # -- how jobs are grouped ------------------------------------------------------------------------------
    # Array tasks of one job array running at once (sbatch --array=...%N); jobs with the same resources form
    # one array.
    array_parallelism: int = 64
    # Most tasks in one job array; null: the cluster's MaxArraySize (`scontrol show config`). Larger groups
    # are split into several arrays.
    max_array_size: int | None = None

    # -- time limits and preemption ------------------------------------------------------------------------
    # Seconds before the time limit at which Slurm sends USR2: the job is then requeued and resumes from its
    # last epoch checkpoint (trainer.checkpoint=true). Slurm may send it up to 60 s early, so each job's
    # timeout_min must be at least (signal_delay_s + 60) / 60 (2.5 min for 90 s).
    signal_delay_s: int = 90
    # Requeues after reaching the time limit (preemptions do not count); then the job ends as failed.
    max_num_timeout: int = 3

    # -- following ------------------------------------------------------------------------------------------
    # true: follow the jobs with a progress line and end with the results table. false: submit, write
    # sweep.json, print the job ids and exit 0; follow later with `sweepit status DIR`.
    wait: bool = True
    # Print each resource group's sbatch script, the job count and the estimated GPU-hours; submit nothing.
    dry_run: bool = False
    # Set by `sweepit resume DIR`: skip completed jobs, follow jobs still queued or running in Slurm, and
    # submit the others again (same job numbers and directories).
    resume: bool = False
    # true: exit with status 1 when any job failed or was interrupted (cancelled, timed out, node failure).
    fail_on_error: bool = True
    # Seconds between two looks at squeue/sacct and the jobs' result.json files.
    poll_interval_s: float = 2.0
    # Seconds a job may stay without result.json after Slurm says it ended, before the driver records it as
    # failed (a shared file system may show a file a moment late).
    result_grace_s: float = 2.0
    # Last lines of a dead job's stderr log copied into the result.json the driver writes for it.
    stderr_tail_lines: int = 50
    # Config key holding a job's GPUs (its tasks), and the one holding its time limit in minutes.
    gpus_key: str = "trainer.gpus"
    timeout_key: str = "timeout_min"
    # Print the results table when the jobs end; sweepers launching many small batches may turn it off.
    print_summary: bool = True


ConfigStore.instance().store(group="hydra/launcher", name="sweepit_slurm", node=SlurmLauncherConf, provider="sweepit")
