"""Before anything is submitted: each job's request checked against the profile and the partition, its time
limit against the checkpoint signal, and the dry run's report (sbatch scripts, job count, GPU-hours)."""

from __future__ import annotations

import secrets
from pathlib import Path

from hydra_plugins.sweepit.config import SlurmLauncherConf
from sweepit.errors import ConfigError
from sweepit.slurm import _cluster as slurm_queue
from sweepit.slurm import _submit as submission
from sweepit.slurm._cluster import SlurmError
from sweepit.slurm._shape import Shape, gpu_hours, sbatch_parameters, shape_for
from sweepit.slurm._submit import PlannedJob

SIGNAL_EARLY_S = 60  # sbatch --signal: "may be sent up to 60 seconds earlier than specified"


def check_time_limit(num: int, timeout_min: int, c: SlurmLauncherConf) -> None:
    if timeout_min * 60 < c.signal_delay_s + SIGNAL_EARLY_S:
        raise ConfigError(
            f"{c.timeout_key} must leave room for the checkpoint signal: Slurm sends USR2 hydra.launcher."
            f"signal_delay_s={c.signal_delay_s} s before the limit, up to {SIGNAL_EARLY_S} s early, so the "
            f"limit must be at least {c.signal_delay_s + SIGNAL_EARLY_S} s, but job {num} has "
            f"{c.timeout_key}={timeout_min} ({timeout_min * 60} s) and would be requeued as soon as it starts. "
            f"Raise {c.timeout_key}, or lower hydra.launcher.signal_delay_s.")


def place(jobs: list[PlannedJob], c: SlurmLauncherConf) -> tuple[dict[Shape, list[PlannedJob]], int]:
    """Each job's shape (nodes x tasks), checked against the profile and the partition, grouped by shape; and
    the most jobs one array may hold. A dry run away from the cluster goes by the profile alone."""
    part: slurm_queue.Partition | None = None
    try:
        slurm_queue.check_reachable()
        part = slurm_queue.partition(c.partition)
    except SlurmError:
        if not c.dry_run:
            raise
    gpus_per_node = c.gpus_per_node or (part.gpus_per_node if part else None)
    if gpus_per_node is None:
        raise ConfigError("hydra.launcher.gpus_per_node must be set when Slurm cannot be asked (dry run away from "
                          "the cluster), but it is null. Set for example hydra.launcher.gpus_per_node=4.")
    if part is not None and gpus_per_node > part.gpus_per_node:
        where = f"the nodes of partition {part.name} have" if part.gpus_per_node else f"partition {part.name} has"
        raise ConfigError(f"hydra.launcher.gpus_per_node must be at most the {part.gpus_per_node} GPU(s) {where}, "
                          f"but got gpus_per_node={gpus_per_node}. Lower it, or pick a GPU partition with "
                          "hydra.launcher.partition (`sinfo -o '%P %G'` lists them).")
    node_cap = c.max_nodes
    if part is not None:
        node_cap = min(node_cap, part.n_nodes, part.max_nodes_per_job or part.n_nodes)
    by_shape: dict[Shape, list[PlannedJob]] = {}
    for job in jobs:
        gpus = job.shape.n_gpus
        if part is not None and node_cap < c.max_nodes and gpus > gpus_per_node * node_cap:
            raise ConfigError(
                f"{c.gpus_key} must be at most the {gpus_per_node * node_cap} GPUs partition {part.name} offers "
                f"one job ({node_cap} node(s) of {gpus_per_node}), but job {job.num} sets {c.gpus_key}={gpus}. "
                f"Lower {c.gpus_key}, or pick a larger partition with hydra.launcher.partition.")
        job.shape = shape_for(job.num, gpus, job.shape.timeout_min, gpus_per_node, c.max_nodes, c.gpus_key)
        by_shape.setdefault(job.shape, []).append(job)
    if c.max_array_size is not None:
        return by_shape, c.max_array_size
    return by_shape, slurm_queue.max_array_size() if part is not None else slurm_queue.DEFAULT_MAX_ARRAY_SIZE


def dry_run_text(by_shape: dict[Shape, list[PlannedJob]], sweep_dir: Path, max_array_size: int,
                 c: SlurmLauncherConf) -> str:
    """Each group's sbatch script (its first array's), the job count and the GPU-hours if every job ran to
    its time limit."""
    job_name = f"{c.job_name}-{secrets.token_hex(3)}"
    jobs = [j for group in by_shape.values() for j in group]
    out: list[str] = []
    n_calls = 0
    for shape, group in by_shape.items():
        chunks = submission.arrays(group, max_array_size)
        sizes = ", ".join(str(len(chunk)) for chunk in chunks)
        out.append(f"# {len(group)} job(s) with {shape.describe()}: {len(chunks)} sbatch call(s) "
                   f"(array sizes {sizes}; jobs {', '.join(str(j.num) for j in group)})")
        folder = submission.next_folder(sweep_dir, n_calls)
        out.append(submission.sbatch_script(sbatch_parameters(shape, c, job_name), folder, len(chunks[0]), c.python))
        n_calls += len(chunks)
    hours = gpu_hours([j.shape for j in jobs])
    out.append(f"dry run: {len(jobs)} job(s) in {n_calls} sbatch call(s), at most {hours:.2f} GPU-hours (every job "
               "to its time limit); nothing submitted. Drop hydra.launcher.dry_run=true to submit.")
    return "\n".join(out)
