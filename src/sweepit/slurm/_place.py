"""Which request each job gets: its own config's `gpus_key` and `timeout_key`, else the launcher's keys; checked
against the partition before anything is submitted."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any

from sweepit.errors import ConfigError, SlurmError, is_count, require
from sweepit.slurm import _cluster as cluster
from sweepit.slurm._request import Request, SlurmOptions, gres_gpus

log = logging.getLogger(__name__)
SIGNAL_EARLY_S = 60  # sbatch --signal: "may be sent up to 60 seconds earlier than specified"


def integer(value: Any, key: str, num: int, or_else: str = "") -> int:
    if not is_count(value, 1):
        raise ConfigError(f"{key} must be an integer >= 1, but job {num} has {key}={value!r}. "
                          f"Set for example {key}=1{or_else}.")
    return int(value)


@dataclass
class Asked:
    """One job's own words about its request, read from its config: None where it says nothing."""

    num: int
    gpus: int | None                 # its `gpus_key`
    timeout_min: int                 # its `timeout_key`, else the launcher's timeout_min
    own_timeout: bool = False        # the time limit is the job config's


def asked(num: int, gpus: Any, timeout_min: Any, o: SlurmOptions) -> Asked:
    """Job `num`'s values of `gpus_key` and `timeout_key` (None: absent from its config), checked. A key of the user's
    own (not the default) that the config does not have is a mistake: the job would silently take the launcher's
    request instead."""
    for name, key, value, default in (("gpus_key", o.gpus_key, gpus, SlurmOptions.gpus_key),
                                      ("timeout_key", o.timeout_key, timeout_min, SlurmOptions.timeout_key)):
        if key is not None and key != default and value is None:
            what = "the GPUs" if name == "gpus_key" else "the time limit in minutes"
            raise ConfigError(
                f"hydra.launcher.{name} must name a key of the job config that holds {what} each job asks for, but "
                f"got {name}={key}, which job {num}'s config does not have. Set it to the key your config uses "
                f"(sweepit's train.py: {default}), or hydra.launcher.{name}=null to take every job's request from "
                "hydra.launcher.")
    key = str(o.timeout_key) if timeout_min is not None else "hydra.launcher.timeout_min"
    limit = o.timeout_min if timeout_min is None else integer(timeout_min, key, num)
    if limit * 60 < o.signal_delay_s + SIGNAL_EARLY_S:
        raise ConfigError(
            f"{key} must leave room for the checkpoint signal, at least {o.signal_delay_s + SIGNAL_EARLY_S} s, but "
            f"job {num} has {key}={limit} ({limit * 60} s).\n"
            f"Raise {key}, or lower hydra.launcher.signal_delay_s (now {o.signal_delay_s}).\n"
            "See docs/troubleshooting.md#time-limit-below-the-signal")
    cpu_only = ", or hydra.launcher.gpus_key=null for jobs that ask for no GPU (CPU only)"  # after a gpus_key of 0
    return Asked(num, None if gpus is None else integer(gpus, str(o.gpus_key), num, cpu_only), limit,
                 timeout_min is not None)


def spread(num: int, gpus: int, timeout_min: int, node_gpus: int, max_nodes: int, gpus_key: str) -> Request:
    """`gpus_key=N`: N tasks and N GPUs over as few nodes as hold them; ConfigError when no allowed node count
    holds them evenly."""
    if gpus > node_gpus * max_nodes:
        raise ConfigError(
            f"{gpus_key} must be at most {node_gpus * max_nodes} (hydra.launcher.max_nodes={max_nodes} node(s) x "
            f"{node_gpus} GPU(s) per node), but job {num} sets {gpus_key}={gpus}. Lower {gpus_key}, or raise "
            "hydra.launcher.max_nodes within what the partition allows.")
    nodes = math.ceil(gpus / node_gpus)
    if gpus % nodes:
        lower, upper = nodes * (gpus // nodes), nodes * (gpus // nodes + 1)
        raise ConfigError(
            f"{gpus_key} must split evenly over the {nodes} nodes it needs (the same number of ranks on each, at "
            f"most {node_gpus} per node), but job {num} sets {gpus_key}={gpus}. Use for example {gpus_key}={lower} "
            f"or {upper}.")
    # GPUs per node, not per task: --gpus-per-task binds each task to its GPU, and NCCL, seeing one GPU per process,
    # can miss the NVLink between them. Every task sees the node's GPUs of the job; rank r takes GPU `local_rank`.
    return Request(nodes=nodes, tasks_per_node=gpus // nodes, timeout_min=timeout_min, gpus_per_node=gpus // nodes)


@dataclass
class ClusterFacts:
    """What `place` learns from Slurm (reachable, the partition, MaxArraySize): asked once per sweep, not once per
    job, so that a search submitting trial after trial costs one sbatch call each and no more."""

    asked: bool = False
    partition: cluster.Partition | None = None
    max_array_size: int = cluster.DEFAULT_MAX_ARRAY_SIZE
    said_cores: bool = False  # the warning of GPU jobs short of cores, once per sweep


def place(jobs: list[Asked], o: SlurmOptions, facts: ClusterFacts | None = None) -> tuple[list[Request], int]:
    """Each job's request, checked against the partition; and the most jobs one array may hold. Slurm is asked once
    (`scontrol ping`, `sinfo`, `scontrol show partition`, `scontrol show config`), and its answers kept in `facts`
    for the next call; a dry run away from the cluster goes by the options alone."""
    want_gpus = any(j.gpus for j in jobs) or bool(o.gpus_per_node or o.gpus_per_task or gres_gpus(o.gres))
    facts = facts if facts is not None else ClusterFacts()
    if not facts.asked:
        try:
            cluster.check_reachable()
            facts.partition = cluster.partition(o.partition, want_gpus=want_gpus)
        except SlurmError:  # unreachable (a ConfigError, such as a partition it does not have, is not caught)
            if not o.dry_run:
                raise
        if o.max_array_size is not None:
            facts.max_array_size = o.max_array_size
        elif facts.partition is not None:
            facts.max_array_size = cluster.max_array_size()
        facts.asked = True
    part = facts.partition
    _say_what_the_job_configs_override(jobs, o)
    requests = [_own_request(j, o, part) if j.gpus is not None else _launcher_request(j, o, part) for j in jobs]
    if part is not None:
        _check_max_time(jobs, o, part)
    if not facts.said_cores:
        facts.said_cores = _say_gpu_tasks_short_of_cores(requests, o)
    return requests, facts.max_array_size


# A GPU task's process and the 2 loader workers (per rank) a streamed Dataset gets by default (data.loader).
MIN_CORES_PER_GPU_TASK = 3


def _say_gpu_tasks_short_of_cores(requests: list[Request], o: SlurmOptions) -> bool:
    """Warn, before anything is submitted, where GPU jobs get fewer cores per task than a training process and its
    loader workers need (the generic profile's cpus_per_task is 1, a CPU job's): the GPU would wait for data, and
    memory given per core by the cluster's default may be below what a CUDA torch process holds. True once said."""
    cores = o.cpus_per_task or 1
    gpu_jobs = sum(1 for r in requests if r.n_gpus)
    if not gpu_jobs or cores >= MIN_CORES_PER_GPU_TASK:
        return False
    memory = "" if o.mem_gb else ", and set hydra.launcher.mem_gb"
    log.warning(f"{gpu_jobs} job(s) ask for GPUs with hydra.launcher.cpus_per_task={cores}, but a GPU task needs "
                f"{MIN_CORES_PER_GPU_TASK} cores or more, or the GPU waits for data.\n"
                f"Set hydra.launcher.cpus_per_task to the cores of a node divided by its GPUs{memory}.\n"
                "See docs/troubleshooting.md#gpu-task-cores")
    return True


def _check_max_time(jobs: list[Asked], o: SlurmOptions, part: cluster.Partition) -> None:
    """A time limit above the partition's MaxTime pends forever (PartitionTimeLimit) where Slurm does not
    enforce partition limits at submission, and is refused by sbatch where it does: say so before either."""
    over = [j for j in jobs if part.max_time_min is not None and j.timeout_min > part.max_time_min]
    if not over:
        return
    j = over[0]
    key = str(o.timeout_key) if j.own_timeout else "hydra.launcher.timeout_min"
    others = f" (and {len(over) - 1} more job(s))" if len(over) > 1 else ""
    raise ConfigError(
        f"{key} must be at most the MaxTime of partition {part.name} ({part.chosen_by}), {part.max_time_min} min, "
        f"but job {j.num} has {key}={j.timeout_min}{others}.\n"
        f"Set {key}={part.max_time_min} or lower, or pick a partition with a longer limit (hydra.launcher.partition).\n"
        "See docs/troubleshooting.md#time-limit-above-maxtime")


def _node_gpus(o: SlurmOptions, part: cluster.Partition | None) -> int:
    node_gpus = o.node_gpus or (part.gpus_per_node if part else None)
    if node_gpus is None:
        raise ConfigError("hydra.launcher.node_gpus must be set when Slurm cannot be asked (dry run away from the "
                          "cluster), but it is null. Set for example hydra.launcher.node_gpus=4.")
    if part is not None and node_gpus > part.gpus_per_node:
        where = f"the nodes of partition {part.name} have" if part.gpus_per_node else f"partition {part.name} has"
        raise ConfigError(f"hydra.launcher.node_gpus must be at most the {part.gpus_per_node} GPU(s) {where} "
                          f"({part.chosen_by}), but got node_gpus={node_gpus}. Lower it. {part.fix_for_gpus()}.")
    return node_gpus


def _own_request(job: Asked, o: SlurmOptions, part: cluster.Partition | None) -> Request:
    assert job.gpus is not None and o.gpus_key is not None
    if part is not None and part.gpus_per_node == 0 and o.node_gpus is None:
        raise ConfigError(
            f"{o.gpus_key} must ask for GPUs that partition {part.name} ({part.chosen_by}) has, but its nodes have "
            f"none and job {job.num} sets {o.gpus_key}={job.gpus}. {part.fix_for_gpus()}; or set "
            "hydra.launcher.gpus_key=null for CPU-only jobs.")
    node_gpus = _node_gpus(o, part)
    node_cap = o.max_nodes
    if part is not None:
        node_cap = min(node_cap, part.job_nodes)
        if node_cap < o.max_nodes and job.gpus > node_gpus * node_cap:
            raise ConfigError(
                f"{o.gpus_key} must be at most the {node_gpus * node_cap} GPUs partition {part.name} offers one job "
                f"({node_cap} node(s) of {node_gpus}), but job {job.num} sets {o.gpus_key}={job.gpus}. Lower "
                f"{o.gpus_key}, or pick a larger partition with hydra.launcher.partition ({part.name} is "
                f"{part.chosen_by}).")
    r = spread(job.num, job.gpus, job.timeout_min, node_gpus, o.max_nodes, o.gpus_key)
    return replace(r, gpus_per_node=None, gres=f"gpu:{r.gpus_per_node}") if o.gpus_as == "gres" else r


def _launcher_request(job: Asked, o: SlurmOptions, part: cluster.Partition | None) -> Request:
    r = Request(nodes=o.nodes, tasks_per_node=o.tasks_per_node, timeout_min=job.timeout_min,
                gpus_per_node=o.gpus_per_node or None, gpus_per_task=o.gpus_per_task or None, gres=o.gres)
    if part is None:
        return r
    require(r.nodes <= part.job_nodes, f"hydra.launcher.nodes must be at most the {part.job_nodes} node(s) partition "
            f"{part.name} gives one job, but got nodes={r.nodes}. Lower it, or pick a larger partition with "
            "hydra.launcher.partition.")
    require(r.gpus_on_node <= part.gpus_per_node, f"the GPUs a job asks for on one node (hydra.launcher."
            f"gpus_per_node, gpus_per_task x tasks_per_node, or gres) must be at most the {part.gpus_per_node} its "
            f"nodes have in partition {part.name}, but got {r.gpus_on_node} (gpus_per_node={o.gpus_per_node}, "
            f"gpus_per_task={o.gpus_per_task}, tasks_per_node={o.tasks_per_node}, gres={o.gres}). "
            f"Ask for fewer ({part.name} is {part.chosen_by}). {part.fix_for_gpus()}.")
    return r


def _say_what_the_job_configs_override(jobs: list[Asked], o: SlurmOptions) -> None:
    """A job's own `gpus_key` and `timeout_key` win over the launcher's keys: those set but left unused are
    named, since a submitit config carried over would otherwise ask for something else than the jobs get."""
    own = [j for j in jobs if j.gpus is not None]
    unused = [f"{k}={getattr(o, k)}" for k in ("nodes", "tasks_per_node", "gpus_per_node", "gpus_per_task", "gres")
              if getattr(o, k) not in (getattr(SlurmOptions, k), 0)]
    if own and unused:
        log.warning(f"{o.gpus_key} in the job config sets the request of {len(own)} job(s) ({o.gpus_key}=N: N tasks "
                    f"sharing N GPUs); these launcher keys apply only to jobs without it: hydra.launcher."
                    f"{', '.join(unused)}. Set hydra.launcher.gpus_key=null to use them for every job.")
    differ = [j for j in jobs if j.own_timeout and j.timeout_min != o.timeout_min]
    if differ and o.timeout_min != SlurmOptions.timeout_min:
        log.warning(f"{o.timeout_key} in the job config sets the time limit of {len(differ)} job(s) (e.g. "
                    f"{differ[0].timeout_min} min); hydra.launcher.timeout_min={o.timeout_min} applies only to jobs "
                    f"without it. Set {o.timeout_key}={o.timeout_min}, or hydra.launcher.timeout_key=null.")
