"""Cluster facts (reachable, the partition, MaxArraySize) are asked once per sweep, not once per job or trial:
Slurm's client commands are counted through `sweepit.slurm._cluster._run`."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest

from sweepit.slurm import _cluster as cluster
from sweepit.slurm._place import ClusterFacts, asked, place
from sweepit.slurm._request import SlurmOptions

ANSWERS = {
    ("scontrol", "ping"): "Slurmctld(primary) at vm is UP\n",
    ("sinfo",): "debug*|gpu:4|1|16\n",
    ("scontrol", "show", "partition"): "PartitionName=debug MaxNodes=UNLIMITED MaxTime=UNLIMITED\n",
    ("scontrol", "show", "config"): "MaxArraySize            = 1001\n",
}


@pytest.mark.no_cluster
def test_place_asks_slurm_once_per_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def fake_run(args: Sequence[str], timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
        calls.append(" ".join(args[:3]))
        out = next(v for k, v in ANSWERS.items() if tuple(args[:len(k)]) == k)
        return subprocess.CompletedProcess(list(args), 0, out, "")

    monkeypatch.setattr(cluster, "_run", fake_run)
    monkeypatch.setattr(cluster.shutil, "which", lambda name: f"/usr/bin/{name}")
    o = SlurmOptions()
    facts = ClusterFacts()
    for num in range(64):  # one trial after the other, as the Optuna sweeper submits them
        requests, max_array = place([asked(num, 1, 5, o)], o, facts)
        assert requests[0].n_gpus == 1 and max_array == 1001
    assert len(calls) == 4, calls  # ping, sinfo, show partition, show config: once
    place([asked(0, 1, 5, o)], o)  # without facts kept: asked again
    assert len(calls) == 8
