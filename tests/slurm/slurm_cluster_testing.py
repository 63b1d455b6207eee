"""The local Slurm cluster (scripts/slurm-cluster.sh) as the tests see it: what it has, the few client calls they
share, and its variants (a module of its own, so that every test module imports it by one name)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from sweepit_testing import CLUSTER_SCRIPT, cluster_access, wait_until

# sacct states after which a job never runs again (REQUEUED and PENDING are not among them).
FINAL_STATES = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                "BOOT_FAIL", "DEADLINE")


def _run(args: Sequence[str], timeout_s: float = 30) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, check=True, timeout=timeout_s).stdout


@dataclass(frozen=True)
class SlurmCluster:
    """What the tests need to know about the cluster, and the few client calls they share."""

    node: str
    n_gpus_per_node: int
    n_cpus: int
    max_array_size: int

    def sbatch(self, *args: str, script: str, cwd: Path) -> int:
        """Submit `script` (a bash body, no #SBATCH lines) with sbatch options `args`; return the job id."""
        out = subprocess.run(["sbatch", "--parsable", *args], input=f"#!/bin/bash\n{script}\n", cwd=cwd,
                             capture_output=True, text=True, check=True, timeout=30).stdout
        return int(out.strip().split(";")[0].split("_")[0])

    def squeue_state(self, job_id: int) -> str:
        """squeue's state (PENDING, RUNNING, ...), or "" once the job has left the queue."""
        return _run(["squeue", "-h", "-j", str(job_id), "-o", "%T"]).strip()

    def sacct_state(self, job_id: int) -> str:
        """sacct's state of the job's latest run (e.g. "CANCELLED by 0"); "" before slurmdbd has heard of it."""
        lines = _run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State"]).splitlines()
        return lines[-1] if lines else ""

    def wait_until_running(self, job_id: int, timeout_s: float = 20) -> None:
        wait_until(lambda: self.squeue_state(job_id) == "RUNNING", f"job {job_id} RUNNING in squeue", timeout_s)

    def wait_until_final(self, job_id: int, timeout_s: float = 30) -> str:
        """Poll sacct until the job (every task, for an array) reaches a final state; return that state."""
        states: list[str] = []

        def final() -> bool:
            nonlocal states
            out = _run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State"])
            states = [line.split()[0] for line in out.splitlines() if line]
            return bool(states) and all(s in FINAL_STATES for s in states)

        wait_until(final, f"job {job_id} to end in sacct (last states {states})", timeout_s)
        return states[-1]


def describe() -> SlurmCluster:
    config = _run(["scontrol", "show", "config"])
    node_line = _run(["scontrol", "-o", "show", "node"]).splitlines()[0]
    fields = dict(re.findall(r"(\w+)=(\S+)", node_line))
    gpus = re.search(r"gpu(?::\w+)?:(\d+)", fields.get("Gres", ""))
    max_array = re.search(r"^MaxArraySize\s*=\s*(\d+)", config, re.MULTILINE)
    return SlurmCluster(node=fields["NodeName"], n_gpus_per_node=int(gpus.group(1)) if gpus else 0,
                        n_cpus=int(fields["CPUTot"]), max_array_size=int(max_array.group(1)) if max_array else 1001)


def cluster_up(*flags: str) -> None:
    """`slurm-cluster.sh up FLAGS`: the cluster in that variant (no flags: the default one)."""
    proc = subprocess.run([str(CLUSTER_SCRIPT), "up", *flags], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"{CLUSTER_SCRIPT.name} up {' '.join(flags)} failed:\n{proc.stdout}{proc.stderr}"


@contextmanager
def cluster_variant(*flags: str) -> Iterator[SlurmCluster]:
    """The local cluster reconfigured (`slurm-cluster.sh up FLAGS`, a few seconds) for the tests inside, and
    back to the default one after them, whatever happened, holding the cluster alone meanwhile (no other test process
    uses it). Needs root, as the script does."""
    if os.geteuid() != 0:
        pytest.skip(f"reconfiguring the local cluster ({' '.join(flags)}) needs root")
    with cluster_access(exclusive=True):
        try:
            cluster_up(*flags)
            yield describe()
        finally:
            cluster_up()
