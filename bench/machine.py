"""The machine a benchmark ran on, printed with every figure: CPU count and model, torch build, threads."""

from __future__ import annotations

import os
import platform
import subprocess


def cpu_model() -> str:
    """`lscpu`'s model name, else /proc/cpuinfo's, else the platform's processor string."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_line() -> str:
    """One line: `nproc=2 cpu=Intel(R) Xeon(R) ... torch=2.13.0+cpu threads=2 load=0.5,0.4,0.3`."""
    import torch

    load = ",".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (f"nproc={os.cpu_count()} cpu={cpu_model()!r} torch={torch.__version__} "
            f"torch_threads={torch.get_num_threads()} cuda={cuda} loadavg(1,5,15min)={load}")
