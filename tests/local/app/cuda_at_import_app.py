"""A Hydra app that asks CUDA at import time, as many do (`device = "cuda" if torch.cuda.is_available() else "cpu"`),
having imported sweepit (as an app of sweepit's API does); each job writes down what the app saw then."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import sweepit  # noqa: F401  (its API: sweepit.report, ...)

APP_IMPORTED_HERE = True  # in the module's run: a fresh interpreter's job did not run it
NVML_AT_IMPORT = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")  # what the next line's torch reads
if os.environ.get("APP_CACHED_DEVICE_COUNT"):
    # torch 2.2-2.3's device_count(): counted once (through NVML, CUDA_VISIBLE_DEVICES's GPUs) and cached for the
    # process's life (an lru_cache), here by the driver at import, before the launcher forks its jobs.
    @functools.lru_cache(maxsize=1)
    def _device_count() -> int:
        return len(os.environ.get("CUDA_VISIBLE_DEVICES", "").split(","))

    torch.cuda.device_count = _device_count
    torch.cuda.device_count()
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if os.environ.get("APP_CUDA_AT_IMPORT"):
    # A CUDA call at import (a model moved to the GPU) initialises CUDA in the driver. CUDA cannot start on a CPU-only
    # machine: torch's own flags stand in for it, as torch sets them. `_initialized` holds in the driver; every process
    # forked from it is in a bad fork (torch's fork handler), where torch.cuda.is_initialized() is False. An
    # is_available() that CUDA answered (NVML failing, MIG- ids in CUDA_VISIBLE_DEVICES, asked before sweepit) leaves
    # the same bad fork: the fork server sees both cases alike.
    _DRIVER = os.getpid()
    torch.cuda._initialized = True
    torch.cuda._is_in_bad_fork = lambda: os.getpid() != _DRIVER


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float:
    job_dir = Path(HydraConfig.get().runtime.output_dir)
    seen = {"nvml_at_import": NVML_AT_IMPORT, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device_count": torch.cuda.device_count(),
            # A fresh interpreter did not run this module: its `main` came by value, in a `__main__` of its own.
            "fresh": "APP_IMPORTED_HERE" not in sys.modules["__main__"].__dict__}
    (job_dir / "seen.json").write_text(json.dumps(seen))
    return float(cfg.x)


if __name__ == "__main__":
    main()
