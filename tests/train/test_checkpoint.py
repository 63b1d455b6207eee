"""A job stopped between epochs resumes from its checkpoint and ends with the same metrics."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import DictConfig

from sweepit.results._job_files import read_metrics, read_result
from sweepit.train._job import run_job
from sweepit_testing import TINY

# Dropout, augmentation and stratified batches: every RNG the loop uses is in play. Two epochs, stopped after the
# first: the second is the resumed one. fp16 (emulated on the CPU: slow) is about the gradient scaler: linreg, whose
# first steps overflow at the initial scale (the CNN's first did only in its second epoch).
SETUP = {"fp32": ["epochs=2", "task.model=cnn", "+task.dropout=0.3", "data.augment.enabled=true",
                  "data.stratified=true", *TINY[1:]],
         "fp16": ["task=linreg", "epochs=2", *TINY[1:]]}


def _untimed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ("epoch_time_s", "samples_per_s", "step_time_s")} for r in rows]


@pytest.mark.parametrize(("gpus", "precision"), [(1, "fp32"), (2, "fp32"), (1, "fp16"), (2, "fp16")],
                         ids=["one-rank", "two-gloo-ranks", "one-rank-fp16", "two-gloo-ranks-fp16"])
def test_resumed_run_ends_with_the_same_metrics(compose_cfg: Callable[..., DictConfig], tmp_path: Path,
                                                gpus: int, precision: str) -> None:
    """Bit for bit, with two ranks too: each rank's dropout and augmentation draws are its own (rank 1 resumed with
    rank 0's augmentation generator and random states, and ended elsewhere). In fp16 the gradient scaler's state is
    part of the trajectory: resumed at its initial scale, the run skips steps the uninterrupted one took."""
    cfg = compose_cfg(*SETUP[precision], f"trainer.gpus={gpus}", f"trainer.precision={precision}")
    run_job(cfg, tmp_path / "straight")

    def stop_after_one(epoch: int, row: dict[str, Any]) -> bool:
        if epoch == 1:
            raise KeyboardInterrupt  # as a preemption signal between epochs would
        return False

    with pytest.raises(KeyboardInterrupt):
        run_job(cfg, tmp_path / "resumed", on_epoch=stop_after_one)
    assert read_result(tmp_path / "resumed")["status"] == "interrupted"  # type: ignore[index]
    assert (tmp_path / "resumed" / "checkpoint.pt").is_file()
    scaler = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=False)["state"]["scaler"]
    if precision == "fp16":  # a step overflowed at the initial scale and was skipped, the scale halved
        assert scaler["scale"] < torch.amp.GradScaler("cpu").get_scale()
    else:
        assert scaler == {}

    run_job(cfg, tmp_path / "resumed")
    straight, resumed = read_metrics(tmp_path / "straight")[0], read_metrics(tmp_path / "resumed")[0]
    assert [r["epoch"] for r in resumed] == [1, 2]
    assert _untimed(resumed) == _untimed(straight)
    assert read_result(tmp_path / "resumed")["objective"] == read_result(tmp_path / "straight")["objective"]  # type: ignore[index]
    assert not (tmp_path / "resumed" / "checkpoint.pt").exists()  # deleted once completed


def test_checkpoint_of_another_config_is_ignored(compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    run_job(compose_cfg("epochs=2", "trainer.keep_checkpoint=true", *TINY[1:]), tmp_path)
    run_job(compose_cfg("epochs=2", "lr=0.05", *TINY[1:]), tmp_path)  # same dir, different trajectory
    rows, _ = read_metrics(tmp_path)
    assert [r["epoch"] for r in rows] == [1, 2]
    assert read_result(tmp_path)["lr"] == 0.05  # type: ignore[index]


@pytest.mark.parametrize("change", [["trainer.lr_schedule=cosine", "trainer.warmup_epochs=1"], ["epochs=4"],
                                    ["trainer.precision=bf16"], ["data.stratified=true"]])
def test_a_change_of_trajectory_trains_again_from_scratch(compose_cfg: Callable[..., DictConfig], tmp_path: Path,
                                                           change: list[str], caplog: pytest.LogCaptureFixture) -> None:
    """The checkpoint's identity covers the `trainer` subtree and `epochs` too (a cosine schedule depends on the
    epoch count): a kept checkpoint of the plain run must not stand for a run with any of these changed."""
    base = ["epochs=3", "trainer.keep_checkpoint=true", *TINY[1:]]
    run_job(compose_cfg(*base), tmp_path / "job")
    plain = _untimed(read_metrics(tmp_path / "job")[0])
    with caplog.at_level(logging.WARNING):
        run_job(compose_cfg(*base, *change), tmp_path / "job")
    assert "holds a checkpoint of another configuration" in caplog.text
    again = _untimed(read_metrics(tmp_path / "job")[0])
    run_job(compose_cfg(*base, *change), tmp_path / "fresh")
    assert again == _untimed(read_metrics(tmp_path / "fresh")[0])  # what a fresh run of the new config gives
    assert again != plain


def test_bookkeeping_knobs_keep_the_checkpoint(compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    """Threads, logging and checkpoint cadence do not change the trajectory: the run resumes (here: has nothing
    left to train) instead of starting over."""
    base = ["epochs=2", "trainer.keep_checkpoint=true", *TINY[1:]]
    run_job(compose_cfg(*base), tmp_path)
    first = read_result(tmp_path)
    run_job(compose_cfg(*base, "trainer.threads=2", "trainer.log_every_epoch=false", "timeout_min=5"), tmp_path)
    second = read_result(tmp_path)
    assert first is not None and second is not None
    assert second["final"] == first["final"]  # the very same rows: read back, not trained again
    assert second["wall_time_s"] < first["wall_time_s"]
