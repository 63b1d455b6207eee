"""The local cluster does what the Slurm launcher relies on: fake GPUs per task, arrays, sacct after scancel."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurm_cluster_testing import SlurmCluster

# One line per task: rank, local rank and what the task may use.
TASK_ENV = """srun bash -c 'echo "$SLURM_PROCID $SLURM_LOCALID $CUDA_VISIBLE_DEVICES"'"""


def test_cluster_offers_four_fake_gpus_on_one_node(slurm_cluster: SlurmCluster) -> None:
    assert slurm_cluster.n_gpus_per_node == 4
    assert slurm_cluster.n_cpus >= 8, "4 GPU tasks and an array must fit side by side"


def test_two_task_job_gives_each_task_its_own_gpu(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job_id = slurm_cluster.sbatch("--gres=gpu:2", "--ntasks=2", "--gpus-per-task=1", "--time=1",
                                  "--output=job.out", script=TASK_ENV, cwd=tmp_path)
    assert slurm_cluster.wait_until_final(job_id) == "COMPLETED", (tmp_path / "job.out").read_text()

    rows = sorted(line.split() for line in (tmp_path / "job.out").read_text().splitlines())
    assert [(rank, local) for rank, local, _ in rows] == [("0", "0"), ("1", "1")]
    devices = [visible for _, _, visible in rows]
    # Device numbers are the node's (task/none does not renumber): 2,3 when another job holds 0,1.
    assert all(d in {"0", "1", "2", "3"} for d in devices) and devices[0] != devices[1], devices


def test_array_tasks_each_run_with_their_index(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    n_tasks = min(3, slurm_cluster.max_array_size)
    job_id = slurm_cluster.sbatch(f"--array=0-{n_tasks - 1}", "--time=1", "--output=task-%a.out",
                                  script="echo $SLURM_ARRAY_TASK_ID", cwd=tmp_path)
    assert slurm_cluster.wait_until_final(job_id) == "COMPLETED"
    assert [(tmp_path / f"task-{i}.out").read_text().strip() for i in range(n_tasks)] == ["0", "1", "2"][:n_tasks]


def test_cancelled_job_is_reported_cancelled_by_sacct(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job_id = slurm_cluster.sbatch("--time=2", "--output=job.out", script="sleep 300", cwd=tmp_path)
    slurm_cluster.wait_until_running(job_id)

    cancelled_at = time.monotonic()
    subprocess.run(["scancel", str(job_id)], check=True, timeout=30)
    # The launcher must notice within about 10 s (issue 4); the cluster itself must not be the bottleneck.
    assert slurm_cluster.wait_until_final(job_id, timeout_s=10).startswith("CANCELLED")
    assert time.monotonic() - cancelled_at < 10
