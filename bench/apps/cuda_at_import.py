"""A Hydra app that asks CUDA something when it is imported, before the local launcher forks its jobs, as many scripts
do: `CUDA_AT_IMPORT=available` picks its device with `torch.cuda.is_available()` (which starts CUDA's driver in the
process unless PYTORCH_NVML_BASED_CUDA_CHECK=1), `tensor` puts a tensor on the GPU (a CUDA context in the driver).
It imports sweepit only through Hydra's plugins, after that. Each job adds two numbers on that device and returns the
sum. bench/gpu_check.sh's fork probe sweeps it; its first line says what torch read (the probe checks the app got the
user's environment)."""

from __future__ import annotations

import os

import hydra
import torch
from omegaconf import DictConfig

TOUCH = os.environ.get("CUDA_AT_IMPORT", "available")
print(f"cuda_at_import: PYTORCH_NVML_BASED_CUDA_CHECK at import: {os.environ.get('PYTORCH_NVML_BASED_CUDA_CHECK')}",
      flush=True)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if TOUCH == "tensor":
    if DEVICE == "cpu" and os.environ.get("CUDA_AT_IMPORT_STAND_IN"):
        # The smoke run on a CPU, where no CUDA context can start: torch's own flags stand in for it, set as torch
        # sets them (tests/local/app/cuda_at_import_app.py): initialised here, a bad fork in each process forked
        # from here.
        _driver = os.getpid()
        torch.cuda._initialized = True
        torch.cuda._is_in_bad_fork = lambda: os.getpid() != _driver
    else:
        torch.zeros(1, device=DEVICE)


@hydra.main(version_base="1.3", config_path=None, config_name=None)
def main(cfg: DictConfig) -> float:
    total = torch.ones(2, device=DEVICE).sum().item()
    print(f"job on {DEVICE}: {total}")
    return float(total)


if __name__ == "__main__":
    main()
