"""`make sweep-scaling` as typed, on a machine of 1 GPU and on one of 4 (a stub `nvidia-smi` lists them; torch here
has no CUDA, so the ranks run on the CPU): it scales over the GPUs there are, on CIFAR-10 where it is there, else on
synthetic images, and says which, and what one GPU cannot show. Shrunk through ARGS, as the README says."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
from pathlib import Path

import numpy as np
import pytest

from sweepit_testing import REPO

TINY = "task.model=cnn task.image_size=32 batch_size=8 epochs=2 trainer.threads=1 hydra.callbacks.summary.report=false"


def _stub_gpus(folder: Path, n: int) -> Path:
    """A `nvidia-smi` that lists `n` GPUs, as the NVIDIA driver's does for `-L`."""
    folder.mkdir()
    lines = "".join(f"echo 'GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d})'\n" for i in range(n))
    (folder / "nvidia-smi").write_text(f"#!/bin/sh\n{lines}")
    (folder / "nvidia-smi").chmod(0o755)
    return folder


def _write_cifar(root: Path, n: int = 8) -> None:
    """CIFAR-10's python batches, `n` random images each."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [*(f"data_batch_{k}" for k in range(1, 6)), "test_batch"]:
        batch = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": [j % 10 for j in range(n)]}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))


def _make_sweep_scaling(tmp_path: Path, n_gpus: int, args: str, **env: str) -> tuple[str, list[tuple[int, str]]]:
    """What the target printed, and the world size and data of each job of the sweep it ran."""
    run_env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    run_env.update(env, ARGS=f"{TINY} {args} hydra.sweep.dir={tmp_path / 'sweep'}",
                   PATH=f"{_stub_gpus(tmp_path / 'stub', n_gpus)}:{os.environ['PATH']}")
    proc = subprocess.run(["make", "sweep-scaling"], cwd=REPO, env=run_env, capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    results = [json.loads(p.read_text()) for p in (tmp_path / "sweep").glob("*/result.json")]
    assert {r["status"] for r in results} == {"completed"}, out[-4000:]
    return out, sorted((r["world_size"], r["data"]) for r in results)


@pytest.mark.slow
@pytest.mark.skipif(Path("/proc/driver/nvidia/gpus").exists(), reason="the NVIDIA driver's own list wins over a stub")
def test_on_one_gpu_it_measures_the_one_gpu_point_and_says_what_that_cannot_show(tmp_path: Path) -> None:
    out, jobs = _make_sweep_scaling(tmp_path, 1, "data.n_synthetic=64")
    assert "sweepit: 1 GPU(s) here: the scaling study on trainer.gpus=1, one job at a time" in out
    assert "data: synthetic CIFAR-shaped images, since data/cifar10/cifar-10-batches-py holds no CIFAR-10" in out
    assert "It cannot show a speedup, an efficiency, nor what the gradients' all-reduce costs between GPUs" in out
    assert "train.py -m --config-dir sweeps --config-name scaling trainer.gpus=1 data.synthetic=true" in out
    assert "Launching 2 jobs on 1 local worker(s), 1 torch thread(s) each, GPUs ['0']" in out  # the study's 2 repeats
    assert [size for size, _ in jobs] == [1, 1] and all(data.startswith("synthetic") for _, data in jobs), jobs


@pytest.mark.slow
@pytest.mark.skipif(Path("/proc/driver/nvidia/gpus").exists(), reason="the NVIDIA driver's own list wins over a stub")
def test_on_four_gpus_it_scales_over_all_four_on_the_cifar10_that_is_there(tmp_path: Path) -> None:
    _write_cifar(tmp_path / "cifar")
    out, jobs = _make_sweep_scaling(tmp_path, 4, "repeat=0", CIFAR_ROOT=str(tmp_path / "cifar"))
    assert "sweepit: 4 GPU(s) here: the scaling study on trainer.gpus=1,2,3,4, one job at a time" in out
    assert f"sweepit: data: CIFAR-10 from {tmp_path / 'cifar'}" in out and "cannot show" not in out
    assert f"scaling trainer.gpus=1,2,3,4 data.root={tmp_path / 'cifar'} hydra.launcher.n_workers=1" in out
    assert "Launching 4 jobs on 1 local worker(s), 1 torch thread(s) each, GPUs ['0', '1', '2', '3']" in out
    cifar = f"CIFAR-10 python batches in {tmp_path / 'cifar' / 'cifar-10-batches-py'}"
    assert jobs == [(1, cifar), (2, cifar), (3, cifar), (4, cifar)], jobs


REPORTED = "hydra.callbacks.summary.report=true"  # the end of the study prints its report's scaling section


@pytest.mark.slow
@pytest.mark.skipif(Path("/proc/driver/nvidia/gpus").exists(), reason="the NVIDIA driver's own list wins over a stub")
def test_without_a_gpu_the_cpu_variant_ends_with_the_count_to_use(tmp_path: Path) -> None:
    out, jobs = _make_sweep_scaling(tmp_path, 0, f"data.n_synthetic=128 repeat=0,1 {REPORTED}")
    assert "no GPU on this machine: running the CPU variant" in out and sorted(s for s, _ in jobs) == [1, 1, 2, 2]
    table = out[out.index("\nScaling over CPU ranks:\n"):]
    two_ranks = next(line.split() for line in table.splitlines() if line.startswith("2 "))
    efficiency = float(two_ranks[-1])  # the table's last column, of 2 ranks against 1
    chosen = "2 CPU ranks" if efficiency >= 0.7 else "1 CPU rank"
    assert (f"Recommendation: {chosen} per job, the largest count whose parallel efficiency stays at or above 0.7 "
            "(min_efficiency=0.7)") in table, table
    assert "The cheapest in rank-hours per epoch: " in table
    assert " ± is the standard deviation over each count's repeats (2 or more)." in table


@pytest.mark.slow
@pytest.mark.skipif(Path("/proc/driver/nvidia/gpus").exists(), reason="the NVIDIA driver's own list wins over a stub")
def test_on_one_gpu_the_end_says_no_count_can_be_recommended(tmp_path: Path) -> None:
    out, _ = _make_sweep_scaling(tmp_path, 1, f"data.n_synthetic=64 {REPORTED}")
    assert "No recommendation can be made: the jobs ran on one CPU rank count only (1); naming the count to use " \
           "needs the epoch times of two counts or more." in out  # this torch has no CUDA: its one rank ran on CPU
    assert "Recommendation:" not in out


def test_the_gpu_page_counts_the_repeats_the_study_runs() -> None:
    """docs/gpu.md said two repeats where the CPU variant ran three: the page's counts are the study's configs'."""
    import importlib.util

    import yaml

    spec = importlib.util.spec_from_file_location("scaling_plan", REPO / "scripts" / "scaling_plan.py")
    assert spec is not None and spec.loader is not None
    scaling_plan = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scaling_plan)
    study = yaml.safe_load((REPO / "sweeps" / "scaling.yaml").read_text())
    gpu = len(str(study["hydra"]["sweeper"]["params"]["repeat"]).split(","))
    cpu = len(next(o for o in scaling_plan.CPU_VARIANT if o.startswith("repeat=")).split(","))
    words = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}
    page = " ".join((REPO / "docs" / "gpu.md").read_text().split())
    assert f"ResNet-50 at 128 px, {words[gpu]} repeats of each point" in page
    assert f"1 and 2 gloo ranks of one core each, {words[cpu]} repeats" in page
