"""`make bench-gpu`: without a GPU it says so and stops; `--smoke` runs its three parts tiny on the CPU and writes
the raw JSON (the figures themselves need a GPU node)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sweepit_testing import REPO


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine bench-gpu measures for real")
def test_without_a_gpu_bench_gpu_says_where_to_run_it() -> None:
    proc = subprocess.run(["make", "-s", "bench-gpu"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "torch sees no CUDA device here" in proc.stderr and "srun -N1 --gres=gpu:4 make bench-gpu" in proc.stderr


@pytest.mark.slow
@pytest.mark.tier_slow
def test_smoke_runs_every_part_and_writes_the_json_and_the_bench_process_imports_no_torch(tmp_path: Path) -> None:
    """Every part tiny on the CPU through the make target, in one run that serves both checks (a smoke run is among
    the suite's longest tests).

    The bench process imports no torch, so it holds no CUDA context while its jobs run: its plain loop ran in the bench
    process, whose CUDA context stayed on GPU 0 while the scaling jobs ran (they fail on a GPU in exclusive-process
    mode); the loop and the machine's facts at the start now run in child processes (those at the end are the start's
    with the load read again). Python's own import log of the bench process
    (-X importtime in make's PY, not passed to the children, which start as sys.executable) shows what it imported."""
    out = tmp_path / "gpu.json"
    proc = subprocess.run(["make", "-s", "bench-gpu", f"PY={sys.executable} -X importtime",
                           f"ARGS=--smoke --json {out} --work {tmp_path}"], cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["smoke"] is True and record["mnist"]["epochs"] == 1
    assert record["throughput"]["precision"] == "fp32" and record["throughput"]["ratio_sweepit_over_plain"] > 0
    assert len(record["throughput"]["plain_samples_per_s"]) == 2
    assert [p["gpus"] for p in record["scaling"]["points"]] == [1, 2]
    assert "CIFAR-10 ResNet-50 (fp32, channels_last): sweepit / plain DataLoader loop" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["mnist_best", "scaling", "throughput_sweepit"]
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "json" in imported and "torch" not in imported and "machine" in imported, sorted(imported)
    assert record["machine_at_start"]["torch"] == torch.__version__ == record["machine_at_end"]["torch"]
