"""The device a rank trains on, and what sweepit asks of CUDA to choose it without breaking fork: asking torch
whether CUDA is there initialises the driver unless PYTORCH_NVML_BASED_CUDA_CHECK=1, and a process forked after that
dies at its first CUDA call (PyTorch's notes, "Poison fork in multiprocessing"); a job forks its local ranks, so it
asks through `cuda_available()`, and the launchers fork their jobs, so they check `forked_after_cuda()`."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from sweepit.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from sweepit.train._rank import Rank

NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
PRECISIONS = ("fp32", "bf16", "fp16", "auto")
# Set as sweepit is imported, so that an app asking torch.cuda.is_available() after that (at its import, in a package
# it imports, in a Hydra callback: Hydra imports sweepit's plugins before those) asks NVML and leaves CUDA alone in the
# process the launchers fork jobs from. `PYTORCH_NVML_BASED_CUDA_CHECK=0` in the environment keeps torch's own check.
os.environ.setdefault(NVML_CHECK, "1")
# Three lines: what happened, what to do, where the reasons are (an anchor tests/train/test_devices.py checks). Torch's
# own words stay in the first 300 characters, which bench/gpu_check.py keeps of a job's error.
FORKED_AFTER_CUDA = (
    "CUDA was initialised at import time, before the sweep's jobs were forked, so a forked job cannot use it "
    "(PyTorch: \"Cannot re-initialize CUDA in forked subprocess\"): each job given GPUs is recorded as failed "
    "instead of running.\n"
    "Move that call into the task function, or import sweepit before it; then `sweepit resume <sweep dir>` runs "
    "these jobs.\n"
    "Why, and the other fixes: docs/gpu.md#cuda-initialised-before-the-fork")
BF16_CAPABILITY = (8, 0)
FP16_CAPABILITY = (7, 0)  # tensor cores (Volta on): float16 matmuls and convolutions several times fp32's speed
# cuBLAS's reproducible workspace (CUDA's documentation, "Results reproducibility"); read when cuBLAS starts.
CUBLAS_WORKSPACE = ":4096:8"


def cuda_available() -> bool:
    """Whether a CUDA GPU is there, asked through NVML: this process may still fork ranks afterwards."""
    import torch

    os.environ.setdefault(NVML_CHECK, "1")  # read by torch at each call; children inherit it
    return bool(torch.cuda.is_available())


def forked_after_cuda() -> bool:
    """Whether CUDA was initialised before this process was forked (asked in the child: torch's bad-fork flag, set
    also by an is_available() that did not ask NVML), or is now (asked before forking: a child could not use it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    return bool(getattr(torch.cuda, "_is_in_bad_fork", lambda: False)() or torch.cuda.is_initialized())


def forget_device_count() -> None:
    """Make torch count the GPUs again, once CUDA_VISIBLE_DEVICES was changed in this process (a forked job narrowed
    to its own GPUs). torch 2.2 and 2.3 cache `torch.cuda.device_count()` for a process's life (pytorch#128819; 2.4
    caches it only once CUDA is initialised): a job forked after its server counted (an app's is_available() through
    NVML, torch._dynamo's import on 2.3) would see the server's count and die of torch's "device >= 0 && device <
    num_gpus" assert at its first CUDA call. Newer torch has no cache here, and this does nothing."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    cache_clear = getattr(getattr(torch.cuda, "device_count", None), "cache_clear", None)
    if cache_clear is not None:
        cache_clear()


def device_for(rank: Rank, requested: str) -> torch.device:
    """Each rank on its own GPU (the job's visible GPUs, by local rank); CPU ranks share the CPU. `cuda:N` names
    GPU N of those this job sees, for a job of one rank."""
    import torch

    if requested == "cpu" or (requested == "auto" and not cuda_available()):
        return torch.device("cpu")
    n_visible = torch.cuda.device_count()
    if requested in ("auto", "cuda"):
        return torch.device("cuda", rank.local_rank % max(1, n_visible))
    device = torch.device(requested)
    check_device_index(requested, device.index, n_visible, rank.world_size)
    return device


def check_device_index(requested: str, index: int | None, n_visible: int, world_size: int) -> None:
    """`device=cuda:N` must name a GPU this job sees, and only for a job of one rank."""
    if index is None:
        return
    if world_size > 1:
        raise ConfigError(f"device={requested} puts every rank of this {world_size}-rank job on one GPU, but each "
                          "rank needs its own. Set device=cuda (or auto): rank r trains on the job's GPU r.")
    if index >= n_visible:
        raise ConfigError(
            f"device={requested} must name one of the {n_visible} GPU(s) this job sees (cuda:0"
            + (f" .. cuda:{n_visible - 1}" if n_visible > 1 else "") + f"), but got index {index}. sweepit's "
            "launchers give each job its own GPUs through CUDA_VISIBLE_DEVICES, numbered from 0: set device=cuda.")


def use_device(device: torch.device) -> None:
    """Make `device` this process's current CUDA device (nothing on the CPU)."""
    import torch

    if device.type == "cuda":
        torch.cuda.set_device(device)


def precision_for(requested: str, capability: tuple[int, int] | None, gpu: str = "") -> str:
    """The precision a job trains in, asked for `requested` on a GPU of `capability` (major, minor), `gpu` naming it
    ("cuda:0 is a Tesla V100"), or on the CPU (None). `auto` takes mixed precision where tensor cores run it: bf16
    from 8.0, fp16 from 7.0 (V100, T4: no bf16), fp32 below and on the CPU (fast bf16 there needs AMX or
    AVX512-BF16, which torch does not report). bf16 below 8.0 is refused: cuDNN emulates its convolutions."""
    if requested == "auto":
        if capability is None or tuple(capability) < FP16_CAPABILITY:
            return "fp32"
        return "bf16" if tuple(capability) >= BF16_CAPABILITY else "fp16"
    if requested == "bf16" and capability is not None and tuple(capability) < BF16_CAPABILITY:
        major, minor = capability
        raise ConfigError(
            f"trainer.precision=bf16 needs a GPU of compute capability {BF16_CAPABILITY[0]}.{BF16_CAPABILITY[1]} or "
            f"newer (A100, H100), but {gpu} ({major}.{minor}).\n"
            "Set trainer.precision=auto (fp16 with a gradient scaler on tensor cores, from 7.0; fp32 below), or fp16 "
            "or fp32 by name.\n"
            "See docs/troubleshooting.md#bf16-needs-capability-8")
    return requested


def resolve_precision(requested: str, device: torch.device) -> str:
    """`precision_for` with what the job's own device says."""
    import torch

    if device.type != "cuda" or requested not in ("auto", "bf16"):
        return precision_for(requested, None)
    gpu = f"{device} is a {torch.cuda.get_device_name(device)}"
    return precision_for(requested, torch.cuda.get_device_capability(device), gpu)


def make_deterministic() -> None:
    """The same numbers from the same seed on the same GPU: deterministic algorithms (an operation that has none
    raises instead of varying), cuBLAS's fixed workspace, cuDNN without benchmarking or atomics, and fp32 matmuls
    and convolutions in fp32 (TF32, cuDNN's default for convolutions on A100/H100, rounds differently)."""
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def fast_kernels(cudnn_benchmark: bool, tf32_matmul: bool) -> None:
    """trainer.cudnn_benchmark (cuDNN times its convolution algorithms on the first batch of each shape and keeps the
    fastest: faster for fixed shapes, not reproducible) and trainer.tf32_matmul (fp32 matmuls on TF32 tensor cores,
    A100 and newer: faster, about 3 decimal digits). Only where asked: torch's defaults are off for both."""
    import torch

    if cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    if tf32_matmul:
        torch.backends.cuda.matmul.allow_tf32 = True
