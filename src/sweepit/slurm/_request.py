"""The Slurm launcher's options, and what a job asks Slurm for (`Request`) as submitit's sbatch parameters; jobs with
the same request share a job array. Which request each job gets is `_place`'s."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from sweepit.errors import ConfigError, closest, is_count, require

# hydra-submitit-launcher's keys that this launcher does not take, and what to do instead.
_SUBMITIT_ONLY = {
    "name": "sweepit's key is job_name", "wait_for_completion": "sweepit's key is wait",
    "submitit_folder": "drop it: each submission gets <sweep dir>/.submitit/NNNN",
    "stderr_to_stdout": "drop it: each job keeps stdout.log and stderr.log",
    **{k: f"pass it as additional_parameters: {{{k.replace('_', '-')}: ...}}"
       for k in ("comment", "exclude", "cpus_per_gpu", "mem_per_gpu", "mem_per_cpu")},
}
_LIST_YOURS = {
    "account": "; `sacctmgr -n show assoc user=$USER format=account` lists yours.",
    "qos": "; `sacctmgr -n show assoc user=$USER format=qos` lists yours.",
    "partition": "; `sinfo -s` lists the partitions.",
}


@dataclass
class SlurmOptions:
    """`hydra.launcher.*`: the plugin's Hydra schema and cluster profiles extend this class; docs/configuration.md
    is generated from its field comments and from the paragraphs below.

    Keys shared with hydra-submitit-launcher mean what they mean there, so a submitit_slurm config carries over:
    timeout_min, cpus_per_task, gpus_per_node, gpus_per_task, gres, mem_gb, nodes, tasks_per_node, partition,
    account, qos, constraint, setup, additional_parameters (and signal_delay_s, max_num_timeout,
    array_parallelism). They make the request of every job whose config says nothing. A job's own config wins
    where it has `gpus_key` (see that key) or `timeout_key` (timeout_min), and the launcher warns about the keys
    this leaves unused. A request with no GPU anywhere is a CPU-only job.

    gpus_per_node means, as in submitit, the GPUs a job *asks for* on each node; what a node has is `node_gpus`.
    (A profile that sets it to the GPUs its nodes have asks for them in every job without trainer.gpus, and the
    launcher says so at launch.)
    """

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
    # Config key holding a job's GPUs. N asks for N tasks and N GPUs with --gpus-per-node, not --gpus-per-task:
    # every task sees all of its node's GPUs, and each rank takes the one of its local rank. Null: never read, and
    # every job takes the request above (e.g. CPU-only jobs of an app that has trainer.gpus).
    gpus_key: str | None = "trainer.gpus"
    # Config key holding a job's time limit in minutes; null: never read (hydra.launcher.timeout_min for all).
    timeout_key: str | None = "timeout_min"
    # How a job's gpus_key asks for its GPUs on each node: gpus_per_node (--gpus-per-node, which needs Slurm's
    # select/cons_tres) or gres (--gres=gpu:N, for a site without it: `scontrol show config | grep SelectType`).
    gpus_as: str = "gpus_per_node"

    # -- how jobs start ------------------------------------------------------------------------------------
    # Extra arguments of the srun that starts the tasks, e.g. ["--cpu-bind=none"].
    srun_args: list[str] = field(default_factory=list)
    # Command that runs Python on the nodes; null: this interpreter (the nodes must see the same path).
    python: str | None = None
    # Slurm job name (squeue shows it); a per-submission suffix is added to tell sweeps apart. Under Hydra the
    # default is the app's name, `${hydra.job.name}`.
    job_name: str = "sweepit"

    # -- how jobs are grouped ------------------------------------------------------------------------------
    # Array tasks of one job array running at once (sbatch --array=...%N); jobs with the same request form
    # one array. (submitit's default: 256.)
    array_parallelism: int = 64
    # Most tasks in one job array; null: the cluster's MaxArraySize (`scontrol show config`). Larger groups
    # are split into several arrays.
    max_array_size: int | None = None
    # Most Slurm jobs of yours in the queue (pending or running) at once, each array task and each packed worker
    # counted, other sweeps' jobs too; the driver submits the rest as earlier ones end. null: only the limits
    # accounting shows (QoS MaxSubmitJobsPerUser, association MaxSubmitJobs), read with sacctmgr; set it where the
    # site's limit is not visible to you (sbatch refuses a whole array that would go over).
    max_queued: int | None = None

    # -- GPU-hours and GPUs in use (docs/howto-budgets.md) --------------------------------------------------------
    # Most GPU-hours the sweep may cost (allocated GPUs x elapsed, as sacct bills them), over all its runs and
    # resumes; null: no budget. A job starts only while the GPU-hours billed plus the at-most (GPUs x time limit)
    # of the running jobs and its own stay within it; the jobs that would pass it end `not started`.
    budget_gpu_hours: float | None = None
    # A sweep whose at-most GPU-hours (every job to its time limit, the dry run's figure) pass budget_gpu_hours:
    # `refuse` it before anything is submitted, or `stop`: submit it, start jobs while they fit, leave the rest not
    # started (`sweepit resume DIR hydra.launcher.budget_gpu_hours=<more>` runs them).
    over_budget: str = "refuse"
    # Most GPUs the sweep's jobs hold at once, over all its job arrays (for a group sharing one allocation): each
    # array's throttle (%k) is set so that the arrays' k x GPUs per job add up to at most this; null: no ceiling.
    max_gpus: int | None = None

    # -- packing: many short jobs in a few allocations -------------------------------------------------------
    # Long-lived workers per resource request (0: one Slurm job per job). N > 0 submits, for each distinct request
    # (a GPU-count study has one per count), one array of at most N workers; each worker runs the sweep's jobs of
    # its request one after another, forked from its warm interpreter, until none is left, then ends. Each job
    # keeps its own directory, logs and result.json. Pays off for jobs shorter than the queue wait; a job may take
    # at most one node.
    workers: int = 0
    # Jobs each worker runs at once (packed sweeps only), side by side, each on GPUs of its own: the worker asks for
    # slots x a job's GPUs and slots x cpus_per_task cores (per rank of a job); for small models.
    slots: int = 1
    # Time limit of each worker in minutes (packed sweeps only); null: its share of the jobs at their own time
    # limits (the jobs' timeout x ceil(jobs / (workers x slots))), at most the partition's MaxTime. A worker starts
    # a job only when the job's expected time (the mean of the jobs it ran, else the job's time limit) fits in
    # what is left; the jobs left over go to fresh workers.
    worker_timeout_min: int | None = None

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
    # Set by the launcher, not a config key: the directory the app's modules are imported from in the driver
    # (the script's folder, Python's sys.path[0]); jobs get it on PYTHONPATH, so that a task function that imports
    # its project's own modules (`from mynet import Net` beside train.py) unpickles and runs on the nodes too.
    app_dir: str | None = field(default=None, init=False, metadata={"omegaconf_ignore": True})

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> SlurmOptions:
        """The options from `hydra.launcher`'s keys; an unknown key is refused with the list of valid ones."""
        known = [f.name for f in fields(cls) if f.init]
        unknown = sorted(set(params) - set(known))
        if unknown:
            hints = "; ".join(f"{k}: {_SUBMITIT_ONLY[k]}" if k in _SUBMITIT_ONLY else f"{k}: did you mean {near}?"
                              for k in unknown if k in _SUBMITIT_ONLY or (near := closest(k, known, cutoff=0.8)))
            raise ConfigError(f"hydra.launcher takes only the Slurm launcher's keys ({', '.join(sorted(known))}), but "
                              f"got {', '.join(unknown)}. " + (f"{hints}." if hints else "Remove or rename them."))
        return cls(**params)

    def __post_init__(self) -> None:
        for key in self.required:
            require(key in SlurmOptions.__dataclass_fields__, "hydra.launcher.required must list launcher keys, but "
                    f"got required={self.required}. Remove the unknown names from it.")
            require(getattr(self, key) not in (None, ""), f"hydra.launcher.{key} must be set on this cluster (it "
                    f"refuses jobs without one), but got {key}=null. Add hydra.launcher.{key}=<yours> to the command, "
                    f"or export SBATCH_{key.upper()}=<yours>" + _LIST_YOURS.get(key, "."))
        for key, minimum, nullable in (
                ("timeout_min", 1, False), ("nodes", 1, False), ("tasks_per_node", 1, False),
                ("max_nodes", 1, False), ("array_parallelism", 1, False), ("gpus_per_node", 0, True),
                ("gpus_per_task", 0, True), ("cpus_per_task", 1, True), ("mem_gb", 1, True), ("node_gpus", 1, True),
                ("max_array_size", 1, True), ("max_queued", 1, True), ("signal_delay_s", 0, False),
                ("max_num_timeout", 0, False),
                ("stderr_tail_lines", 0, False), ("workers", 0, False), ("slots", 1, False),
                ("worker_timeout_min", 1, True), ("max_gpus", 1, True)):
            value = getattr(self, key)
            example = "null" if nullable else max(1, minimum)
            require((nullable and value is None) or is_count(value, minimum),
                    f"hydra.launcher.{key} must be {'null or ' if nullable else ''}an integer >= {minimum}, but got "
                    f"{key}={value!r}. Set for example hydra.launcher.{key}={example}.")
        require(self.result_grace_s >= 0, "hydra.launcher.result_grace_s must be >= 0, but got "
                f"result_grace_s={self.result_grace_s!r}. Set for example hydra.launcher.result_grace_s=2.")
        require(self.budget_gpu_hours is None or (isinstance(self.budget_gpu_hours, int | float)
                                                  and self.budget_gpu_hours > 0),
                "hydra.launcher.budget_gpu_hours must be null or a number of GPU-hours > 0, but got "
                f"budget_gpu_hours={self.budget_gpu_hours!r}. Set for example hydra.launcher.budget_gpu_hours=100.")
        require(self.over_budget in ("refuse", "stop"), "hydra.launcher.over_budget must be refuse or stop, but got "
                f"over_budget={self.over_budget!r}. Set hydra.launcher.over_budget=stop to start jobs while they fit.")
        require(not self.workers or self.max_gpus is None,
                "hydra.launcher.max_gpus throttles the arrays of sweeps whose jobs are each a Slurm job, but got "
                f"workers={self.workers}: a packed sweep's GPUs in use are its workers x slots x a job's GPUs. Drop "
                "hydra.launcher.max_gpus and set workers and slots to fit, or drop hydra.launcher.workers.")
        require(self.gpus_as in ("gpus_per_node", "gres"), "hydra.launcher.gpus_as must be gpus_per_node or gres, "
                f"but got gpus_as={self.gpus_as!r}. Set hydra.launcher.gpus_as=gres where Slurm's SelectType is not "
                "select/cons_tres (`scontrol show config | grep SelectType`).")
        require(self.poll_interval_s > 0, "hydra.launcher.poll_interval_s must be > 0, but got "
                f"poll_interval_s={self.poll_interval_s!r}. Set for example hydra.launcher.poll_interval_s=2.")


@dataclass(frozen=True)
class Request:
    """What one job asks Slurm for (sbatch's options of the same names)."""

    nodes: int
    tasks_per_node: int
    timeout_min: int
    gpus_per_node: int | None = None
    gpus_per_task: int | None = None
    gres: str | None = None

    @property
    def gpus_on_node(self) -> int:
        """GPUs the request takes on each node (0: a CPU-only job)."""
        return max(self.gpus_per_node or 0, (self.gpus_per_task or 0) * self.tasks_per_node, gres_gpus(self.gres))

    @property
    def n_gpus(self) -> int:
        return self.nodes * self.gpus_on_node

    @property
    def at_most_h(self) -> float:
        """GPU-hours if the job runs to its time limit (the dry run's figure)."""
        return self.n_gpus * self.timeout_min / 60

    def describe(self) -> str:
        tasks = self.nodes * self.tasks_per_node
        per_node = f" ({self.nodes} nodes x {self.gpus_on_node})" if self.nodes > 1 and self.n_gpus else ""
        what = f"{self.n_gpus} GPU(s){per_node}" if self.n_gpus else f"CPU only, {tasks} task(s)"
        return f"{what}, {self.timeout_min} min"


def _gres_gpu(item: str) -> tuple[str, int] | None:
    """One --gres item's GPUs, as (`gpu` or `gpu:<type>`, count); None for another resource. A bare `gpu` is one."""
    name, *rest = item.strip().split(":")
    if name != "gpu":
        return None
    if rest and rest[-1].isdigit():
        return ":".join([name, *rest[:-1]]), int(rest[-1])
    return ":".join([name, *rest]), 1


def gres_gpus(gres: str | None) -> int:
    """GPUs per node in a --gres value: `gpu:4`, `gpu:a100:4`; a bare `gpu` is one."""
    return sum(gpu[1] for item in (gres or "").split(",") if (gpu := _gres_gpu(item)) is not None)


def gres_times(gres: str, k: int) -> str:
    """A --gres value with its GPUs times `k` (the GPUs of `k` jobs): `gpu:a100:2` -> `gpu:a100:4`."""
    return ",".join(item.strip() if (gpu := _gres_gpu(item)) is None else f"{gpu[0]}:{gpu[1] * k}"
                    for item in gres.split(","))


def sbatch_parameters(r: Request, o: SlurmOptions, job_name: str, parallelism: int | None = None) -> dict[str, Any]:
    """submitit's SlurmExecutor parameters (sbatch's names) for one array of jobs with this request (`parallelism`:
    its throttle under max_gpus, else array_parallelism)."""
    # srun of Slurm 22.05-23.02 does not inherit the job's --cpus-per-task (sbatch's man page): each task would be
    # pinned to one CPU while OMP_NUM_THREADS says more. SRUN_CPUS_PER_TASK is what srun reads instead.
    setup = ([f"export OMP_NUM_THREADS={o.cpus_per_task}", f"export SRUN_CPUS_PER_TASK={o.cpus_per_task}"]
             if o.cpus_per_task else [])
    if o.app_dir:
        setup.append(f"export PYTHONPATH={shlex.quote(o.app_dir)}${{PYTHONPATH:+:$PYTHONPATH}}")
    params: dict[str, Any] = {
        "job_name": job_name, "time": r.timeout_min, "nodes": r.nodes, "ntasks_per_node": r.tasks_per_node,
        "signal_delay_s": o.signal_delay_s, "array_parallelism": parallelism or o.array_parallelism,
        "setup": [*setup, *(o.setup or [])], "stderr_to_stdout": False,
    }
    optional = {"cpus_per_task": o.cpus_per_task, "gpus_per_node": r.gpus_per_node, "gpus_per_task": r.gpus_per_task,
                "gres": r.gres, "partition": o.partition, "account": o.account, "qos": o.qos,
                "constraint": o.constraint, "mem": f"{o.mem_gb}GB" if o.mem_gb else None}
    params.update({k: v for k, v in optional.items() if v is not None})
    # A job of several tasks ends as soon as one fails (its error is its rank's own), instead of its peers waiting in
    # a collective for NCCL's watchdog (minutes) while the cause sits only in that task's log.
    srun_args = ["--kill-on-bad-exit=1"] if r.nodes * r.tasks_per_node > 1 else []
    srun_args += [a for a in o.srun_args or [] if a not in srun_args]
    if srun_args:
        params["srun_args"] = srun_args
    if o.additional_parameters:
        params["additional_parameters"] = dict(o.additional_parameters)
    return params


def gpu_hours(requests: list[Request]) -> float:
    """Upper bound of the sweep's cost: every job runs to its time limit."""
    return sum(r.at_most_h for r in requests)
