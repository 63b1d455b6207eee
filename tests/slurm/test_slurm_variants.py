"""Clusters unlike the default one (`slurm-cluster.sh up FLAGS`, a few seconds each): a GPU-less default partition
beside a `gpu` one, a partition time limit with and without EnforcePartLimits, no accounting on a CPU-only
node with a small MaxArraySize. Each class reconfigures the cluster once and puts the default one back."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_cluster_testing import SlurmCluster, cluster_variant
from slurm_launcher_testing import (
    APP,
    Driver,
    driver_env,
    job_dirs,
    manifest,
    result,
    run,
    slurm_ids,
    sweepit,
    wait_until,
)

from sweepit.slurm import _cluster as slurm_queue

pytestmark = pytest.mark.exclusive_cluster


@pytest.fixture(scope="class")
def gpu_partition() -> Iterator[SlurmCluster]:
    with cluster_variant("--gpu-partition") as described:
        yield described


@pytest.fixture(scope="class")
def no_accounting_cpu_only() -> Iterator[SlurmCluster]:
    with cluster_variant("--no-accounting", "--cpu-only", "--max-array-size=3") as described:
        yield described


@pytest.mark.usefixtures("gpu_partition")
class TestGpuPartition:
    """The default partition `cpu` has no GPUs (its node never comes up); partition `gpu` has the node's 4."""

    def test_sweepit_sees_a_gpu_less_default_partition_and_a_gpu_one(self) -> None:
        default = slurm_queue.partition(None, want_gpus=True)
        assert (default.name, default.gpus_per_node, default.gpu_partitions) == ("cpu", 0, ("gpu",))
        assert slurm_queue.partition("gpu").gpus_per_node == 4

    @pytest.mark.parametrize("overrides,env,message", [
        ([], {}, "trainer.gpus must ask for GPUs that partition cpu (the cluster's default partition) has, but its "
                 "nodes have none and job 0 sets trainer.gpus=1. Set hydra.launcher.partition=gpu (partitions with "
                 "GPUs: gpu)"),
        (["hydra.launcher.partition=cpus"], {}, "hydra.launcher.partition must name a partition of this cluster (cpu, "
                                                "gpu), but got 'cpus'. Set hydra.launcher.partition=gpu (the closest "
                                                "name with GPUs)"),
        (["~trainer", "hydra.launcher.partition=cpus"], {}, "but got 'cpus'. Set hydra.launcher.partition=cpu (the "
                                                            "closest name)"),
        ([], {"SBATCH_PARTITION": "cpu"}, "trainer.gpus must ask for GPUs that partition cpu (SBATCH_PARTITION (in the "
                                          "environment)) has"),
    ])
    def test_a_gpu_request_names_the_partition_and_the_one_to_use(self, overrides: list[str], env: dict[str, str],
                                                                   message: str, tmp_path: Path) -> None:
        proc = run(APP, tmp_path / "sweep", "x=0", *overrides, env=driver_env(**env), timeout_s=60)
        assert proc.returncode == 1 and message in proc.stderr.replace("\n", " "), proc.stderr
        assert "Traceback" not in proc.stderr and not (tmp_path / "sweep" / ".submitit").exists()

    def test_sbatch_partition_in_the_environment_is_honoured_as_sbatch_does(self, tmp_path: Path) -> None:
        sweep = tmp_path / "sweep"
        proc = run(APP, sweep, "x=0,1", "trainer.gpus=2", env=driver_env(SBATCH_PARTITION="gpu"), timeout_s=120)
        assert proc.returncode == 0, proc.stderr
        assert "2 jobs: 2 completed" in proc.stdout

    def test_why_a_job_pends_is_shown_while_it_waits_and_in_sweepit_status(self, tmp_path: Path) -> None:
        sweep = tmp_path / "sweep"
        driver = Driver(APP, sweep, "x=0", "~trainer")  # CPU-only: the default partition, whose node is down
        try:
            driver.wait_for_line(lambda line: line.startswith("sweepit: pending in Slurm: 1 "), timeout_s=60)
            status = sweepit("status", str(sweep))
            slurm_queue.scancel(slurm_ids(sweep).values())
            code = driver.finish()
        finally:
            driver.kill()
            if (sweep / "sweep.json").exists():
                slurm_queue.scancel(slurm_ids(sweep).values())  # it would pend for ever
        said = next(line for _, line in driver.lines if line.startswith("sweepit: pending in Slurm: "))
        reason = said.split(": 1 ", 1)[1].split(" (job 0)")[0]
        assert reason and reason != "None", said  # squeue's own word, e.g. ReqNodeNotAvail, UnavailableNodes:cpu0
        # squeue's word may change while the job waits (ReqNodeNotAvail, then "Nodes required for job are DOWN ...")
        assert status.returncode == 0 and re.search(r" PENDING \(\w[^)]+\)", status.stdout), status.stdout
        assert code == 1 and result(job_dirs(sweep)[0])["status"] == "interrupted"


@pytest.mark.parametrize("enforce", ["NO", "ALL"])
class TestPartitionTimeLimit:
    """MaxTime=4 min: with EnforcePartLimits=NO Slurm would leave a 5-minute job pending for ever (reason
    PartitionTimeLimit); with ALL sbatch refuses it in words about no key of sweepit's."""

    @pytest.fixture(autouse=True)
    def cluster(self, enforce: str) -> Iterator[SlurmCluster]:
        with cluster_variant("--max-time=4", f"--enforce-part-limits={enforce}") as described:
            yield described

    def test_a_time_limit_above_the_partitions_is_refused_before_submitting(self, enforce: str,
                                                                            tmp_path: Path) -> None:
        sweep = tmp_path / "sweep"
        proc = run(APP, sweep, "x=0", "timeout_min=5,3", timeout_s=60)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        said = proc.stderr.replace("\n", " ")
        assert ("timeout_min must be at most the MaxTime of partition debug (the cluster's default partition), 4 min, "
                "but job 0 has timeout_min=5. Set timeout_min=4 or lower") in said, proc.stderr
        assert "See docs/troubleshooting.md#time-limit-above-maxtime" in said, proc.stderr
        assert not (sweep / ".submitit").exists()
        launcher_limit = run(APP, tmp_path / "sweep2", "x=0", "~timeout_min", "hydra.launcher.timeout_min=10",
                             timeout_s=60)
        assert "hydra.launcher.timeout_min must be at most the MaxTime of partition debug" in launcher_limit.stderr


@pytest.mark.usefixtures("no_accounting_cpu_only")
class TestNoAccountingCpuOnly:
    """No slurmdbd (sacct fails), no GPUs, MaxArraySize=3: squeue alone tells how jobs end."""

    def test_the_cluster_is_what_the_flags_say(self, no_accounting_cpu_only: SlurmCluster) -> None:
        assert slurm_queue.sacct(["1"]) is None and no_accounting_cpu_only.n_gpus_per_node == 0
        assert slurm_queue.max_array_size() == 3

    def test_a_gpu_job_on_a_cluster_without_gpus_is_refused_in_one_paragraph(self, tmp_path: Path) -> None:
        proc = run(APP, tmp_path / "sweep", "x=0", timeout_s=60)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert ("trainer.gpus must ask for GPUs that partition debug (the cluster's default partition) has, but its "
                "nodes have none and job 0 sets trainer.gpus=1. Pick a partition with GPUs") in proc.stderr

    def test_a_sweep_runs_and_a_cancelled_job_reads_interrupted_promptly(self, tmp_path: Path) -> None:
        sweep = tmp_path / "sweep"
        driver = Driver(APP, sweep, "x=range(4)", "~trainer", "hang_on=[1]")
        try:
            wait_until(lambda: _running(sweep, 1), "job 1 to run", 60)
            slurm_queue.scancel([slurm_ids(sweep)[1]])
            cancelled_at = time.monotonic()
            reported_at = driver.wait_for_line(lambda line: "job 1 interrupted" in line or
                                               line.startswith("sweepit: job 1 "), timeout_s=60)
            code = driver.finish()
        finally:
            driver.kill()
        assert code == 1, driver.stderr
        took = reported_at - cancelled_at
        assert took < 10, f"reported {took:.1f} s after scancel"
        # It stopped at SIGTERM (it did not sleep on until KillWait's SIGKILL), and said so itself.
        assert "stopped by SIGTERM from Slurm" in result(job_dirs(sweep)[1])["job_error"]
        assert "4 jobs: 3 completed, 1 interrupted" in driver.stdout
        ids = slurm_ids(sweep)
        assert len({i.split("_")[0] for i in ids.values()}) == 2  # MaxArraySize=3: two sbatch calls

    def test_after_a_detach_a_cancelled_job_reads_interrupted(self, tmp_path: Path) -> None:
        sweep = tmp_path / "sweep"
        proc = run(APP, sweep, "x=0", "~trainer", "hang_on=[0]", "hydra.launcher.wait=false", timeout_s=60)
        assert proc.returncode == 0, proc.stderr
        wait_until(lambda: _running(sweep, 0), "job 0 to run", 60)
        subprocess.run(["scancel", slurm_ids(sweep)[0]], check=True, timeout=30)
        wait_until(lambda: all(r.state == "CANCELLED" for r in (slurm_queue.squeue(slurm_ids(sweep).values())
                                                                  or {"": slurm_queue.QueueRow("", "", "")}).values()),
                   "squeue to say CANCELLED", 30)
        status = sweepit("status", str(sweep))
        assert status.returncode == 0, status.stderr
        assert " interrupted " in status.stdout and "CANCELLED" in status.stdout and "LOST" not in status.stdout
        assert manifest(sweep).jobs[0].state == "interrupted"
        assert result(job_dirs(sweep)[0])["status"] == "interrupted"


def _running(sweep: Path, num: int) -> bool:
    """Job `num`'s task is in the app's own code (it wrote times.json): a signal now reaches the job's handler, not
    the moment between the task's start and the job's (a window a loaded machine widens)."""
    dirs = job_dirs(sweep) if sweep.is_dir() else {}
    return num in dirs and (dirs[num] / "times.json").exists()
