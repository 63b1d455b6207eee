"""What only a GPU would show, tested as the rules the code relies on (PyTorch's documentation), on this CPU:
nothing asks CUDA in a way that poisons fork before a job forks its ranks, each rank makes its GPU current before
NCCL starts, bf16 is refused below compute capability 8.0 and `auto` takes fp16 there, `trainer.deterministic` sets
what PyTorch's reproducibility notes list, `device=cuda:N` names a GPU the job sees, and Slurm ranks meet on a port
no other process on the node was handed."""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import DictConfig

from sweepit.errors import ConfigError
from sweepit.results._job_files import read_result
from sweepit.train import _devices, _distributed
from sweepit.train._devices import NVML_CHECK, check_device_index, make_deterministic, precision_for
from sweepit.train._job import run_job
from sweepit.train._rank import PORT_BASE, PORT_SPAN, Rank, from_environment, gpus_given, master_port

# What initialises the CUDA driver in a process (and so breaks a later fork), per PyTorch's notes on CUDA and
# multiprocessing: is_available() without the NVML check, and every call that needs a CUDA context.
CONTEXT_CALLS = ("init", "current_device", "set_device", "synchronize", "get_rng_state", "get_rng_state_all",
                 "get_device_capability", "get_device_name", "manual_seed_all")


@pytest.fixture
def cuda_asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every question to CUDA from this process (not its forked ranks) that would poison a fork, with where it came
    from. torch here is a CPU build, which answers without CUDA: the calls are recorded as they would run on a GPU."""
    monkeypatch.delenv(NVML_CHECK, raising=False)
    parent, asked = os.getpid(), []

    def spy(name: str, real: Callable[..., Any], poisons: Callable[[], bool]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if os.getpid() == parent and poisons():
                asked.append(f"torch.cuda.{name}() from\n{''.join(traceback.format_stack(limit=8)[:-1])}")
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(torch.cuda, "is_available",
                        spy("is_available", torch.cuda.is_available, lambda: os.environ.get(NVML_CHECK) != "1"))
    for name in CONTEXT_CALLS:
        monkeypatch.setattr(torch.cuda, name, spy(name, getattr(torch.cuda, name), lambda: True))
    yield asked


@pytest.mark.parametrize("device", ["auto", "cuda"])
def test_nothing_asks_cuda_in_a_way_that_poisons_fork_before_the_ranks_are_forked(
        cuda_asked: list[str], compose_cfg: Callable[..., DictConfig], tmp_path: Path, device: str) -> None:
    """`python train.py trainer.gpus=2` on a GPU machine: the job process checked for CUDA with is_available(), then
    forked its ranks, which died at their first CUDA call ("Cannot re-initialize CUDA in forked subprocess")."""
    cfg = compose_cfg("task=linreg", "data.n_synthetic=200", "epochs=1", "trainer.threads=1", "trainer.gpus=2",
                      f"device={device}")
    try:
        run_job(cfg, tmp_path)
    except ConfigError:
        assert device == "cuda"  # no GPU here: refused before the ranks, as on a GPU it would not be
    assert cuda_asked == [], "\n".join(cuda_asked)
    if device == "auto":
        assert (read_result(tmp_path) or {})["status"] == "completed"


def test_each_rank_makes_its_gpu_current_and_binds_its_group_to_it_before_nccl_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without it every rank's current device stayed cuda:0: NCCL saw a duplicate GPU or hung, and the collectives
    on torch.cuda.current_device() ran on GPU 0 of every rank."""
    calls: list[tuple[str, Any]] = []

    def init(*, backend: str, init_method: str, rank: int, world_size: int, timeout: Any,
             device_id: torch.device | None = None) -> None:
        calls.append(("init_process_group", {"backend": backend, "device_id": device_id}))

    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", device)))
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 3))  # torch 2.8's; this CPU build has no NCCL
    monkeypatch.setattr(_distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(_distributed.dist, "init_process_group", init)
    _distributed.init_process_group(Rank(1, 1, 2, "node1", 15001), torch.device("cuda", 1))
    assert calls[0] == ("set_device", torch.device("cuda", 1))
    name, kwargs = calls[1]
    assert name == "init_process_group" and kwargs["backend"] == "nccl"
    assert kwargs["device_id"] == torch.device("cuda", 1)
    calls.clear()
    _distributed.init_process_group(Rank(1, 1, 2, "node1", 15001), torch.device("cpu"))
    assert [c[0] for c in calls] == ["init_process_group"] and calls[0][1]["device_id"] is None  # gloo: no GPU


@pytest.mark.parametrize(("name", "capability", "refused"), [
    ("Tesla V100-SXM2-16GB", (7, 0), True), ("Tesla T4", (7, 5), True),
    ("NVIDIA A100-SXM4-40GB", (8, 0), False), ("NVIDIA H100", (9, 0), False)])
def test_bf16_needs_compute_capability_8(name: str, capability: tuple[int, int], refused: bool) -> None:
    """On a V100 torch.cuda.is_bf16_supported() is True, but cuDNN emulates bf16 convolutions (CTE-Power)."""
    if refused:
        with pytest.raises(ConfigError, match=rf"compute capability 8\.0 or newer .* but cuda:0 is a {name} "
                                              rf"\({capability[0]}\.{capability[1]}\)\.\nSet trainer\.precision=auto "
                                              r"\(fp16 with a gradient scaler .*\), or fp16\s+or fp32 by name\.\n"
                                              r"See docs/troubleshooting\.md#bf16-needs-capability-8$"):
            precision_for("bf16", capability, f"cuda:0 is a {name}")
    else:
        assert precision_for("bf16", capability, f"cuda:0 is a {name}") == "bf16"


@pytest.mark.parametrize(("capability", "chosen"), [
    (None, "fp32"), ((6, 0), "fp32"), ((7, 0), "fp16"), ((7, 5), "fp16"), ((8, 0), "bf16"), ((9, 0), "bf16")])
def test_auto_precision_is_mixed_where_tensor_cores_run_it(capability: tuple[int, int] | None, chosen: str) -> None:
    """`auto` on the CPU (None), a P100 (6.0), a V100, a T4, an A100 and an H100: fp16 with its gradient scaler where
    there are tensor cores but no bf16; what is asked by name stays as asked (bf16 below 8.0 is refused above)."""
    assert precision_for("auto", capability) == chosen
    for named in ("fp32", "fp16"):
        assert precision_for(named, capability) == named


@pytest.fixture
def global_torch_settings() -> Iterator[None]:
    """make_deterministic changes process-wide settings: they are put back for the tests that follow."""
    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark,
             torch.backends.cudnn.deterministic, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    yield
    torch.use_deterministic_algorithms(saved[0])
    (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic, torch.backends.cuda.matmul.allow_tf32,
     torch.backends.cudnn.allow_tf32) = saved[1:5]
    if saved[5] is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)


@pytest.mark.usefixtures("global_torch_settings")
def test_deterministic_mode_sets_what_pytorchs_reproducibility_notes_list() -> None:
    os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    torch.backends.cudnn.allow_tf32 = True  # cuDNN's default: TF32 convolutions on A100/H100
    make_deterministic()
    assert torch.are_deterministic_algorithms_enabled()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert not torch.backends.cudnn.benchmark and torch.backends.cudnn.deterministic
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32


@pytest.mark.usefixtures("global_torch_settings")
def test_a_job_with_trainer_deterministic_trains_in_deterministic_mode(
        compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    torch.use_deterministic_algorithms(False)
    run_job(compose_cfg("task=linreg", "data.n_synthetic=200", "epochs=1", "device=cpu", "trainer.threads=1",
                        "trainer.deterministic=true"), tmp_path)
    assert torch.are_deterministic_algorithms_enabled() and (read_result(tmp_path) or {})["status"] == "completed"
    with pytest.raises(ConfigError, match=r"trainer.deterministic must be true or false, but got "
                                          r"trainer.deterministic='yes'"):
        run_job(compose_cfg("task=linreg", "trainer.deterministic=yes"), tmp_path / "bad")


@pytest.mark.usefixtures("global_torch_settings")
def test_cudnn_benchmark_and_tf32_matmuls_are_keys_off_by_default_and_refused_with_deterministic(
        compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    tiny = ("task=linreg", "data.n_synthetic=200", "epochs=1", "device=cpu", "trainer.threads=1")
    torch.backends.cudnn.benchmark = torch.backends.cuda.matmul.allow_tf32 = False
    run_job(compose_cfg(*tiny), tmp_path / "default")
    assert not torch.backends.cudnn.benchmark and not torch.backends.cuda.matmul.allow_tf32
    run_job(compose_cfg(*tiny, "trainer.cudnn_benchmark=true", "trainer.tf32_matmul=true"), tmp_path / "fast")
    assert torch.backends.cudnn.benchmark and torch.backends.cuda.matmul.allow_tf32
    assert (read_result(tmp_path / "fast") or {})["status"] == "completed"
    with pytest.raises(ConfigError, match=r"trainer.deterministic=true turns cuDNN's benchmarking and TF32 off, but "
                                          r"got trainer.tf32_matmul=true. Drop trainer.tf32_matmul=true"):
        run_job(compose_cfg(*tiny, "trainer.deterministic=true", "trainer.tf32_matmul=true"), tmp_path / "both")


@pytest.mark.parametrize(("requested", "index", "visible", "world", "words"), [
    ("cuda:1", 1, 1, 1, r"device=cuda:1 must name one of the 1 GPU\(s\) this job sees \(cuda:0\), but got index 1"),
    ("cuda:3", 3, 2, 1, r"one of the 2 GPU\(s\) this job sees \(cuda:0 \.\. cuda:1\)"),
    ("cuda:0", 0, 4, 2, r"device=cuda:0 puts every rank of this 2-rank job on one GPU"),
])
def test_device_cuda_n_must_name_a_gpu_the_job_sees(requested: str, index: int, visible: int, world: int,
                                                    words: str) -> None:
    """Each job sees only its own GPUs (CUDA_VISIBLE_DEVICES), numbered from 0: cuda:1 in a 1-GPU job was accepted
    and failed at the first tensor."""
    with pytest.raises(ConfigError, match=words):
        check_device_index(requested, index, visible, world)
    check_device_index("cuda:1", 1, 2, 1)  # a single run on a machine with two GPUs may pick the second


@pytest.mark.parametrize(("environ", "given"), [
    ({"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "2", "SLURM_STEP_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "0,1"}, 2),
    ({"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 0),  # exported by the submitting shell: no allocation
    ({"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "4", "SLURM_JOB_GPUS": "0,1,2,3", "CUDA_VISIBLE_DEVICES": "2"}, 1),
    ({"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "4", "SLURM_JOB_NUM_NODES": "2", "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
     8),
    ({"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0,1"}, 2),
    ({"CUDA_VISIBLE_DEVICES": "0,3"}, 2),
    ({"CUDA_VISIBLE_DEVICES": ""}, 0),  # a local launcher's CPU job on a GPU machine
    ({"CUDA_VISIBLE_DEVICES": "0,-1,2"}, 1),  # CUDA stops at the first invalid index
    ({}, 0),  # no launcher gave it GPUs, and this process never used CUDA
], ids=["slurm", "slurm-none", "packed-share", "two-nodes", "slurm-no-cuda-var", "visible", "hidden", "invalid",
        "nothing"])
def test_a_job_counts_the_gpus_it_was_given_not_those_its_config_names(environ: dict[str, str], given: int) -> None:
    """What a job's record says it was given (`n_gpus`), which its GPU-hours count."""
    assert not torch.cuda.is_initialized()
    assert gpus_given(environ) == given


def test_slurm_ranks_meet_below_the_ephemeral_ports_and_take_the_address_the_job_exported() -> None:
    """20000-39999 overlapped Linux's ephemeral range (32768-60999), which the kernel hands to any connection."""
    ports = {master_port(job, task) for job in range(0, 200_000, 7) for task in (0, 3)}
    assert min(ports) >= PORT_BASE and max(ports) < PORT_BASE + PORT_SPAN <= 32768
    slurm = {"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8", "SLURM_STEP_ID": "0",
             "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "jwb[0001-0002]"}
    assert (rank := from_environment(slurm)) is not None and rank.master_addr == "jwb0001"
    assert from_environment({**slurm, "MASTER_ADDR": "jwb0001i"}).master_addr == "jwb0001i"  # type: ignore[union-attr]


def test_the_job_process_asks_cuda_only_through_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NVML_CHECK, raising=False)
    _devices.cuda_available()
    assert os.environ[NVML_CHECK] == "1"  # set for torch's check, and for the ranks forked next


def test_a_job_of_one_rank_on_cuda_n_makes_that_gpu_current(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One rank on `device=cuda:1` of two GPUs: without set_device the DataLoader's pinning thread and any
    `torch.cuda.current_device()` work went to GPU 0. Both sweepit.context() (a user's loop) and sweepit's own loop
    make the job's device current."""
    import sweepit
    from sweepit.train import _loop, _session

    current: list[torch.device] = []
    monkeypatch.setattr(_devices, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: current.append(torch.device(device)))
    session = _session.begin(tmp_path, DictConfig({"device": "cuda:1"}))
    try:
        assert sweepit.context().device == torch.device("cuda", 1)
    finally:
        _session.end(session)
    assert current == [torch.device("cuda", 1)]
    current.clear()
    monkeypatch.setattr(_loop, "_train", lambda *args: (_ for _ in ()).throw(RuntimeError("stop after the device")))
    with pytest.raises(RuntimeError, match="stop after the device"):
        _loop.train(DictConfig({"device": "cuda:1", "trainer": {}}), session=_session.begin(None))
    assert current == [torch.device("cuda", 1)]


def test_the_job_asks_its_own_gpu_for_its_capability_and_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks above are reached with what the job's GPU says: resolve_precision asks the device it trains on, and
    device_for counts the GPUs the job sees (two here)."""
    asked: list[Any] = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: asked.append(device) or "Tesla V100-SXM2-16GB")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (7, 0))
    with pytest.raises(ConfigError, match=r"cuda:1 is a Tesla V100-SXM2-16GB \(7\.0\)"):
        _devices.resolve_precision("bf16", torch.device("cuda", 1))
    assert _devices.resolve_precision("auto", torch.device("cuda", 1)) == "fp16"  # float16 with its scaler
    assert asked == [torch.device("cuda", 1)] * 2
    assert _devices.resolve_precision("fp32", torch.device("cuda", 1)) == "fp32"  # fp32 asks nothing
    assert _devices.resolve_precision("auto", torch.device("cpu")) == "fp32"      # nor does the CPU
    assert _devices.resolve_precision("bf16", torch.device("cpu")) == "bf16"
    assert asked == [torch.device("cuda", 1)] * 2
    monkeypatch.setattr(_devices, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert _devices.device_for(Rank(0, 0, 1), "cuda:1") == torch.device("cuda", 1)
    seen = r"one of the 2 GPU\(s\) this job sees \(cuda:0 \.\. cuda:1\), but got index 2"
    with pytest.raises(ConfigError, match=seen):
        _devices.device_for(Rank(0, 0, 1), "cuda:2")
    assert _devices.device_for(Rank(1, 1, 2), "auto") == torch.device("cuda", 1)


def test_the_forked_after_cuda_message_says_what_happened_then_what_to_do_then_links_its_reasons() -> None:
    """Three short lines, not one long sentence; the anchor it links is a heading of docs/gpu.md, which holds the
    reasons; torch's own words are in the 300 characters bench/gpu_check.py keeps of a job's error."""
    from sweepit.train import FORKED_AFTER_CUDA
    from sweepit_testing import REPO

    happened, to_do, why = FORKED_AFTER_CUDA.split("\n")
    assert happened.startswith("CUDA was initialised at import time") and len(happened.split()) <= 40
    assert to_do.startswith("Move that call") and "sweepit resume <sweep dir>" in to_do and len(to_do.split()) <= 30
    page, anchor = why.split(": ", 1)[1].split("#")
    headings = [line[3:] for line in (REPO / page).read_text().splitlines() if line.startswith("## ")]
    assert anchor in ["-".join(h.lower().split()) for h in headings], (anchor, headings)
    assert "Cannot re-initialize CUDA in forked subprocess" in FORKED_AFTER_CUDA[:300]
