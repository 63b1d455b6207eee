"""The local launcher forks its jobs from the driver, where the app was imported: a CUDA call there (at the app's
import, in a package it imports, in a Hydra callback) would break every job. Real multiruns in subprocesses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sweepit.local import FRESH_FOR_CUDA
from sweepit.results._job_files import read_result
from sweepit.train import FORKED_AFTER_CUDA
from sweepit_testing import child_env, run_command

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
APP = Path(__file__).parent / "app" / "cuda_at_import_app.py"
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


def sweep(sweep_dir: Path, *overrides: str, **env: str) -> tuple[int, str, dict[int, Path]]:
    clean = {k: v for k, v in child_env(**env).items() if k != NVML_CHECK}  # as from a shell that never set it
    proc = run_command([sys.executable, APP, "-m", f"hydra.sweep.dir={sweep_dir}", *overrides], ROOT, env=clean)
    dirs = {int(p.name.split("_")[0]): p for p in sweep_dir.iterdir() if p.is_dir() and p.name[0].isdigit()}
    return proc.returncode, proc.stdout + proc.stderr, dirs


def test_an_app_that_imports_sweepit_asks_cuda_through_nvml_at_its_import(tmp_path: Path) -> None:
    """`torch.cuda.is_available()` at the app's import, in the driver, then initialised CUDA (cudaGetDeviceCount),
    and on a GPU machine every forked job died at its first CUDA call."""
    code, out, dirs = sweep(tmp_path / "sweep", "x=0,1")
    assert code == 0, out[-3000:]
    for job_dir in dirs.values():
        assert json.loads((job_dir / "seen.json").read_text())["nvml_at_import"] == "1"


def test_cuda_initialised_in_the_driver_is_said_once_and_every_gpu_job_runs_in_a_fresh_interpreter(
        tmp_path: Path) -> None:
    """Two GPUs (by CUDA_VISIBLE_DEVICES; nothing touches CUDA here) and an app that initialised CUDA at import (torch's
    flags stood in as torch sets them: the fork server, a fork of the driver, sees only its bad fork): the server
    finds it before its first job, and each job given a GPU starts in a fresh interpreter, where CUDA is
    new (no job recorded failed, none dies of "Cannot re-initialize CUDA in forked subprocess"); the driver says so
    once, with why; jobs of no GPU are forked as before."""
    code, out, dirs = sweep(tmp_path / "sweep", "x=0,1", "trainer.gpus=0,1",
                            CUDA_VISIBLE_DEVICES="3,5", APP_CUDA_AT_IMPORT="1")
    assert code == 0, out[-3000:]
    assert out.count(f"sweepit: {FRESH_FOR_CUDA}") == 1, out[-3000:]
    assert FORKED_AFTER_CUDA not in out
    pids = {}
    for num, job_dir in dirs.items():
        record = read_result(job_dir) or {}
        seen = json.loads((job_dir / "seen.json").read_text())
        assert record["status"] == "completed", (num, record)
        pids[num] = seen["fresh"]
        if "trainer.gpus=1" in job_dir.name:
            assert seen["fresh"] and seen["gpus"] in ("3", "5"), seen  # its own interpreter, on its own GPU
        else:
            assert not seen["fresh"], seen  # forked: the app's module ran once, in the driver
    assert sum("trainer.gpus=1" in d.name for d in dirs.values()) == 2 and len(dirs) == 4, pids


def test_a_job_counts_its_own_gpus_where_torch_cached_the_drivers_count(tmp_path: Path) -> None:
    """torch 2.2-2.3 cache device_count() (an lru_cache, simulated by the app): the driver counted two GPUs at import,
    and each forked job, narrowed to one by CUDA_VISIBLE_DEVICES, must count one, or torch asserts at its first
    CUDA call."""
    code, out, dirs = sweep(tmp_path / "sweep", "x=0,1", CUDA_VISIBLE_DEVICES="3,5", APP_CACHED_DEVICE_COUNT="1")
    assert code == 0, out[-3000:]
    seen = [json.loads((job_dir / "seen.json").read_text()) for job_dir in dirs.values()]
    assert len(seen) == 2 and all(s["gpus"] in ("3", "5") and s["device_count"] == 1 for s in seen), seen
