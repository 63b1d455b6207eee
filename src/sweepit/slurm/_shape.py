"""A job's Slurm request from its own config: `trainer.gpus=N` is N tasks with one GPU each, spread over as
few nodes as hold them; `timeout_min` is the time limit. Jobs with the same request share a job array."""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any

from sweepit.errors import ConfigError


@dataclass(frozen=True, order=True)
class Shape:
    """What one job asks Slurm for."""

    nodes: int
    tasks_per_node: int              # one task per GPU, each task one rank of the job
    timeout_min: int

    @property
    def n_gpus(self) -> int:
        return self.nodes * self.tasks_per_node

    def describe(self) -> str:
        per_node = f" ({self.nodes} nodes x {self.tasks_per_node})" if self.nodes > 1 else ""
        return f"{self.n_gpus} GPU(s){per_node}, {self.timeout_min} min"


def integer(value: Any, key: str, num: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key} must be an integer >= {minimum}, but job {num} has {key}={value!r}. "
                          f"Set for example {key}={max(minimum, 1)}.")
    return value


def shape_for(num: int, gpus: int, timeout_min: int, gpus_per_node: int, max_nodes: int, gpus_key: str) -> Shape:
    """The request of job `num`; ConfigError when no allowed node count holds its GPUs evenly."""
    if gpus > gpus_per_node * max_nodes:
        raise ConfigError(
            f"{gpus_key} must be at most {gpus_per_node * max_nodes} (hydra.launcher.max_nodes={max_nodes} node(s) x "
            f"hydra.launcher.gpus_per_node={gpus_per_node}), but job {num} sets {gpus_key}={gpus}. Lower {gpus_key}, "
            "or raise hydra.launcher.max_nodes within what the partition allows."
        )
    nodes = math.ceil(gpus / gpus_per_node)
    if gpus % nodes:
        lower, upper = nodes * (gpus // nodes), nodes * (gpus // nodes + 1)
        raise ConfigError(
            f"{gpus_key} must split evenly over the {nodes} nodes it needs (the same number of ranks on each, "
            f"at most {gpus_per_node} per node), but job {num} sets {gpus_key}={gpus}. Use for example "
            f"{gpus_key}={lower} or {upper}."
        )
    return Shape(nodes=nodes, tasks_per_node=gpus // nodes, timeout_min=timeout_min)


def sbatch_parameters(shape: Shape, launcher: Any, job_name: str) -> dict[str, Any]:
    """submitit's SlurmExecutor parameters (sbatch's names) for one array of jobs of this shape."""
    setup = [f"export OMP_NUM_THREADS={launcher.cpus_per_task}", *launcher.setup]
    params: dict[str, Any] = {
        "job_name": job_name, "time": shape.timeout_min, "nodes": shape.nodes,
        "ntasks_per_node": shape.tasks_per_node, "cpus_per_task": launcher.cpus_per_task,
        # Each task its own GPU: with GPUs per node alone every task of the node would see all of them.
        "gpus_per_node": shape.tasks_per_node, "gpus_per_task": 1,
        "signal_delay_s": launcher.signal_delay_s, "array_parallelism": launcher.array_parallelism,
        "setup": setup, "stderr_to_stdout": False,
    }
    optional = {"partition": launcher.partition, "account": launcher.account, "qos": launcher.qos,
                "constraint": launcher.constraint, "mem": f"{launcher.mem_gb}GB" if launcher.mem_gb else None}
    params.update({k: v for k, v in optional.items() if v is not None})
    if launcher.srun_args:
        params["srun_args"] = list(launcher.srun_args)
    if launcher.additional_parameters:
        params["additional_parameters"] = dict(launcher.additional_parameters)
    return params


def submitit_command(python: str | None, folder: str) -> str:
    """The command submitit puts in the sbatch script (as SlurmExecutor writes it)."""
    import sys

    return " ".join([python or shlex.quote(sys.executable), "-u -m submitit.core._submit", shlex.quote(folder)])


def gpu_hours(jobs: list[Shape]) -> float:
    """Upper bound of the sweep's cost: every job runs to its time limit."""
    return sum(s.n_gpus * s.timeout_min / 60 for s in jobs)
