"""Data parallelism on CPU: gloo ranks in local processes, as on GPUs with NCCL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import DictConfig

from sweepit.results._job_files import read_metrics, read_result
from sweepit.train import _distributed as distributed
from sweepit.train._distributed import RankFailedError, spawn_local
from sweepit.train._job import run_job
from sweepit.train._rank import Rank, from_environment
from sweepit_testing import TINY

# 1,600 synthetic digits: 25 global batches of 64, so both runs see exactly the same batches.
SETUP = ["data.synthetic=true", "data.n_synthetic=2000", "epochs=2", "trainer.lr_scaling=none",
         "trainer.keep_checkpoint=true", "optimizer=sgd", "lr=0.1", *TINY[1:]]


def _weights(job_dir: Path) -> dict[str, torch.Tensor]:
    state = torch.load(job_dir / "checkpoint.pt", weights_only=False)["state"]  # the job's own file
    return dict(state["model"])


def test_two_ranks_reach_the_weights_of_one_process_with_the_global_batch(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    run_job(compose_cfg(*SETUP, "batch_size=64"), tmp_path / "one")
    run_job(compose_cfg(*SETUP, "batch_size=32", "trainer.gpus=2"), tmp_path / "two")
    one, two = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert one.keys() == two.keys()
    for key in one:
        torch.testing.assert_close(two[key], one[key], rtol=1e-4, atol=1e-5)
    rows_one, rows_two = read_metrics(tmp_path / "one")[0], read_metrics(tmp_path / "two")[0]
    for a, b in zip(rows_one, rows_two, strict=True):
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)
        assert b["val_acc"] == pytest.approx(a["val_acc"], abs=1e-9)
    result = read_result(tmp_path / "two")
    assert result is not None and result["world_size"] == 2 and result["global_batch_size"] == 64
    # one job directory, written by rank 0 only, but for rank 1's random states beside the (kept) checkpoint
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [
        "checkpoint.pt", "checkpoint.rank1.pt", "metrics.jsonl", "model_best.pt", "result.json"]


def test_linear_lr_scaling_is_recorded(compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    run_job(compose_cfg(*SETUP[:-4], "trainer.gpus=2", "lr=0.01", "trainer.lr_scaling=linear",
                        "trainer.warmup_epochs=1", *TINY[1:]), tmp_path)
    result = read_result(tmp_path)
    assert result is not None
    assert (result["lr"], result["effective_lr"], result["lr_scaling"]) == (0.01, 0.02, "linear")
    assert result["warmup_epochs"] == 1 and result["timed_epochs"] == 1  # the first epoch is not timed
    assert result["epoch_time_s_mean"] == pytest.approx(result["final"]["epoch_time_s"])


torch_init_process_group = torch.distributed.init_process_group


def init_of_torch_2_2(backend: str | None = None, init_method: str | None = None, timeout: Any = None,
                      world_size: int = -1, rank: int = -1, store: Any = None, group_name: str = "",
                      pg_options: Any = None) -> None:
    """torch 2.2's init_process_group, as far as its arguments go (no `device_id`), in front of the installed one:
    that torch cannot be installed beside this one."""
    torch_init_process_group(backend, init_method, timeout, world_size, rank, store, group_name, pg_options)


@pytest.mark.parametrize(("init", "torch_version", "nccl_version", "binds"), [
    (init_of_torch_2_2, "2.2.2+cu121", (2, 19, 3), False),  # no device_id: a TypeError
    (torch_init_process_group, "2.6.0+cu124", (2, 21, 5), True),
    (torch_init_process_group, "2.7.0+cu126", (2, 26, 2), False),  # non-blocking NCCL 2.26: may hang
    (torch_init_process_group, "2.7.1+cu126", (2, 26, 2), True),  # 2.7.1 no longer turns non-blocking on
    (torch_init_process_group, "2.8.0+cu128", (2, 27, 3), True),
])
def test_the_group_is_bound_to_the_gpu_only_where_torch_takes_device_id_and_nccl_does_not_hang(
    init: Callable[..., None], torch_version: str, nccl_version: tuple[int, ...], binds: bool
) -> None:
    """The NCCL path, as the rule it follows (pytorch/pytorch#153960 for the hang); the versions are those torch's
    wheels ship."""
    assert distributed.binds_safely(init, torch_version, nccl_version) is binds


def test_two_gloo_ranks_train_with_an_init_process_group_that_has_no_device_id(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch 2.2 (pyproject allows it) failed every job of several ranks, on the CPU too, with a TypeError for the
    device_id it was given even as None."""
    monkeypatch.setattr(torch.distributed, "init_process_group", init_of_torch_2_2)  # the forked ranks inherit it
    run_job(compose_cfg(*SETUP[:-4], "epochs=1", "trainer.gpus=2", "device=cpu"), tmp_path)
    result = read_result(tmp_path)
    assert result is not None and result["status"] == "completed" and result["world_size"] == 2


def _fail_on_rank_one(rank: Rank) -> int:
    if rank.rank == 1:
        raise RuntimeError("rank 1 broke")
    time.sleep(60)  # rank 0 would wait for it forever in a collective
    return 0


def test_a_failing_rank_fails_the_job_without_a_hang() -> None:
    t0 = time.monotonic()
    with pytest.raises(RankFailedError, match="rank 1 of 2 failed: RuntimeError: rank 1 broke"):
        spawn_local(2, _fail_on_rank_one)
    assert time.monotonic() - t0 < 20


def test_rank_failure_in_a_job_is_recorded(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = distributed.init_process_group

    def broken(rank: Rank, device: torch.device, **kwargs: Any) -> None:
        if rank.rank == 1:
            raise RuntimeError("no device for rank 1")
        real(rank, device, **kwargs)  # rank 0 then waits for rank 1 at the rendezvous

    monkeypatch.setattr("sweepit.train._loop.init_process_group", broken)
    t0 = time.monotonic()
    with pytest.raises(RankFailedError):
        run_job(compose_cfg(*SETUP, "trainer.gpus=2"), tmp_path)
    assert time.monotonic() - t0 < 30
    result = read_result(tmp_path)
    assert result is not None and result["status"] == "failed"
    assert result["error"].startswith("RankFailedError: rank 1 of 2 failed: RuntimeError: no device for rank 1")


def test_rank_from_slurm_and_torchrun_environments() -> None:
    slurm = {"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0",
             "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "gpu[012-013]"}
    rank = from_environment(slurm)
    assert rank is not None
    assert (rank.rank, rank.local_rank, rank.world_size, rank.master_addr) == (3, 1, 4, "gpu012")
    assert from_environment({**slurm, "SLURM_PROCID": "0"}).master_port == rank.master_port  # type: ignore[union-attr]
    assert from_environment({**slurm, "SLURM_NTASKS": "1"}) is None
    torchrun: dict[str, Any] = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h",
                                "MASTER_PORT": "1234"}
    assert from_environment(torchrun) == Rank(1, 1, 2, "h", 1234)
    assert from_environment({}) is None


SLURM_TASK = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "77"}


@pytest.mark.parametrize(("nodelist", "first"), [
    ("gpu[003-004,010],cpu1", "gpu003"), ("rack[1-2]-gpu[08-09]", "rack1-gpu08"), ("gpu[08-09]a,cpu1", "gpu08a"),
    ("cpu1,gpu[1-2]", "cpu1"), ("jwb0001", "jwb0001")])
def test_the_first_host_of_a_node_list_with_several_bracket_groups_or_a_suffix(
        nodelist: str, first: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Read without Slurm's commands (PATH holds no scontrol); where scontrol is there, its answer is taken."""
    env = {**SLURM_TASK, "SLURM_JOB_NODELIST": nodelist}
    monkeypatch.setenv("PATH", str(tmp_path))
    assert from_environment(env).master_addr == first  # type: ignore[union-attr]
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/asked\necho slurms-own-first\necho another\n")
    scontrol.chmod(0o755)
    assert from_environment(env).master_addr == "slurms-own-first"  # type: ignore[union-attr]
    assert (tmp_path / "asked").read_text().split() == ["show", "hostnames", nodelist]


def _threads(rank: Rank) -> int:
    return torch.get_num_threads()


def test_local_ranks_share_the_threads_of_their_job() -> None:
    """Two forked ranks of a job given 4 torch threads get 2 each, not 4 each (8 threads on 4 cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        assert spawn_local(2, _threads) == 2
        torch.set_num_threads(1)
        assert spawn_local(2, _threads) == 1  # never below one
    finally:
        torch.set_num_threads(before)


def test_more_cpu_ranks_than_cores_runs_and_warns_that_its_times_mean_nothing(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cores = len(os.sched_getaffinity(0))
    run_job(compose_cfg(*SETUP[:-4], "epochs=1", f"trainer.gpus={cores + 1}", "device=cpu"), tmp_path / "over")
    out = capsys.readouterr().out
    assert f"trainer.gpus={cores + 1} runs {cores + 1} CPU ranks on {cores} core(s)" in out
    result = read_result(tmp_path / "over")
    assert result is not None and result["status"] == "completed" and result["world_size"] == cores + 1
    run_job(compose_cfg(*SETUP[:-4], "epochs=1", "trainer.gpus=2", "device=cpu"), tmp_path / "fits")
    assert "warning" not in capsys.readouterr().out or cores < 2


RANK_SCRIPT = """
import atexit, sys, torch, torch.distributed as dist
from sweepit.train._distributed import init_process_group
from sweepit.train._rank import Rank
# Registered before the group exists, so it runs after sweepit's own exit hook (atexit runs last-in first-out).
atexit.register(lambda: print("initialized at exit:", dist.is_initialized(), flush=True))
rank = int(sys.argv[1])
init_process_group(Rank(rank, rank, 2, "127.0.0.1", int(sys.argv[2])), torch.device("cpu"))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
model(torch.randn(4, 2)).sum().backward()
"""


@pytest.mark.slow  # rank processes of a script
def test_a_group_the_users_code_leaves_open_is_destroyed_at_exit(tmp_path: Path) -> None:
    # A user's own loop (examples/own_loop) asks for the group through sweepit and never destroys it.
    port = distributed._free_port()
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(rank), str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err
        assert "initialized at exit: False" in out, out + err


FAILING_RANK_SCRIPT = RANK_SCRIPT + """
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.sweepit._runner import record
from sweepit.train import _session
ret = JobReturn(status=JobStatus.FAILED if rank == 1 else JobStatus.COMPLETED)
ret._return_value = RuntimeError("rank 1's own error") if rank == 1 else 0.5
print("status:", record(_session.begin(None), ret).status, flush=True)
"""


@pytest.mark.slow  # rank processes of a script
def test_a_rank_whose_task_failed_leaves_its_group_undestroyed_at_exit(tmp_path: Path) -> None:
    """Any launcher records a task's failure through `record`: from then on the process does not destroy its group,
    at exit either (NCCL's destroy may block on the peer that failed or is stuck, until its watchdog); the rank that
    completed still destroys its own."""
    port = distributed._free_port()
    procs = [subprocess.Popen([sys.executable, "-c", FAILING_RANK_SCRIPT, str(rank), str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    for rank, (proc, (out, err)) in enumerate(zip(procs, outs, strict=True)):
        assert proc.returncode == 0, err
        assert f"status: {'failed' if rank == 1 else 'completed'}" in out, out + err
        assert f"initialized at exit: {rank == 1}" in out, out + err


def test_sweepits_loop_leaves_its_group_undestroyed_when_training_raises(monkeypatch: pytest.MonkeyPatch,
                                                                           compose_cfg: Callable[..., DictConfig],
                                                                           tmp_path: Path) -> None:
    """sweepit's own loop, on a rank whose training raised: no destroy_process_group (it may block on NCCL), the
    group is abandoned; one that trained to the end destroys it."""
    from sweepit.train import _loop

    calls: list[str] = []
    monkeypatch.setattr(_loop, "init_process_group", lambda rank, device, **_: calls.append("init"))
    monkeypatch.setattr(_loop, "destroy_process_group", lambda: calls.append("destroy"))
    monkeypatch.setattr(_loop, "abandon_process_group", lambda: calls.append("abandon"))
    monkeypatch.setenv("SWEEPIT_JOB_DIR", str(tmp_path))
    cfg = compose_cfg(*SETUP[:-4], "epochs=1", "device=cpu")
    _loop.train(cfg, log=lambda _: None)
    assert calls == ["init", "destroy"]
    calls.clear()
    monkeypatch.setattr(_loop, "_train", lambda *args: (_ for _ in ()).throw(RuntimeError("training failed")))
    with pytest.raises(RuntimeError, match="training failed"):
        _loop.train(cfg, log=lambda _: None)
    assert calls == ["init", "abandon"]


@pytest.mark.parametrize(("overrides", "minutes"), [((), 10), (("trainer.collective_timeout_min=25",), 25)])
def test_the_collective_timeout_is_a_key_of_at_least_torchs_ten_minutes(
        monkeypatch: pytest.MonkeyPatch, compose_cfg: Callable[..., DictConfig], overrides: tuple[str, ...],
        minutes: int) -> None:
    """Rank 0 alone writes trackers and the best weights between collectives: a slow file system must not make the
    job's group time out before torch's own default would."""
    import datetime

    from sweepit.train import _loop

    class Stop(Exception):
        pass

    seen: dict[str, Any] = {}

    def init(**kwargs: Any) -> None:
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(torch.distributed, "init_process_group", init)
    with pytest.raises(Stop):
        _loop.train(compose_cfg(*SETUP[:-4], "device=cpu", *overrides), log=lambda _: None,
                    rank=Rank(0, 0, 2, "127.0.0.1", 1))
    assert seen["timeout"] == datetime.timedelta(minutes=minutes)
