"""The machine a benchmark ran on, printed with every figure: CPU count and model, torch build, threads."""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


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


def machine_info() -> dict[str, Any]:
    """The machine as data, for a benchmark's raw JSON: the same facts as `machine_line`, plus `uptime` and the
    commit the benchmark runs (taken at its start: code may be committed while a long benchmark runs)."""
    import torch

    return {"code_version": code_version(), "hostname": platform.node(), "nproc": os.cpu_count(), "cpu": cpu_model(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, **load()}


def load() -> dict[str, Any]:
    """What other processes make of the machine now: the load averages and `uptime`'s line."""
    try:
        uptime = subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        uptime = "n/a"
    return {"loadavg_1_5_15min": list(os.getloadavg()) if hasattr(os, "getloadavg") else None, "uptime": uptime}


def machine_info_at_end(started: dict[str, Any]) -> dict[str, Any]:
    """`machine_info` at a benchmark's end without importing torch (bench_gpu.py, whose process holds no CUDA context):
    the load read again, the rest as `started` (a child of the same interpreter) found it, since a run changes neither
    the torch build, its default threads, the GPU nor the CPU."""
    return {**started, **load()}


def code_version() -> str:
    """`git describe`-like: the commit the benchmark ran on, `+dirty` when tracked code had changes."""
    repo = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=repo, capture_output=True, text=True,
                                timeout=5, check=True).stdout.strip()
        # Raw outputs written by benchmarks do not make the code dirty.
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":!bench/results"], cwd=repo, capture_output=True, text=True, timeout=5,
                               check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def write_json(path: Path, figures: dict[str, Any], started: dict[str, Any], ended: dict[str, Any] | None = None
               ) -> None:
    """Write a benchmark's raw figures with the exact command, the commit and the machine at start and at end.

    `started` is `machine_info()` taken when the benchmark began, so that the load during the run is bracketed;
    `ended`, when given, the one at the end (taken in another process by a benchmark that imports no torch).
    """
    repo = Path(__file__).resolve().parents[1]
    argv = [os.path.relpath(sys.executable, repo) if sys.executable.startswith(str(repo)) else sys.executable,
            os.path.relpath(Path(sys.argv[0]).resolve(), repo), *sys.argv[1:]]
    record = {"command": shlex.join(argv), "code_version": started.get("code_version", code_version()),
              "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine_at_start": started, "machine_at_end": ended or machine_info(), **figures}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(f"raw figures: {path}")


if __name__ == "__main__":  # for a benchmark whose own process imports no torch (bench_gpu.py)
    print(json.dumps({"line": machine_line(), "info": machine_info()}, default=str))
