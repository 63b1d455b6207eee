"""Config only, sweepit's loop: a user's model, data and loss through `_target_` (the tests' own_code_testing
module stands for the user's package), the data contract, and one clear error for each kind of mistake."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import DictConfig

from sweepit.errors import ConfigError
from sweepit.results._job_files import read_metrics, read_result
from sweepit.train._job import run_job
from sweepit.train._loop import train
from sweepit_testing import TINY

OWN = "own_code_testing"
CUSTOM = ["task=custom", f"model._target_={OWN}.TwoLayerMLP", f"data._target_={OWN}.blobs", "batch_size=32",
          "lr=0.01", *TINY]


def quiet(_: str) -> None:
    return None


def test_a_user_model_on_a_built_in_task_gets_its_arguments_and_the_shapes(
        compose_cfg: Callable[..., DictConfig]) -> None:
    cfg = compose_cfg(f"model._target_={OWN}.TwoLayerMLP", "+model.width=16", *TINY)  # digits: 8x8, 10 classes
    out = train(cfg, log=quiet)
    assert out.info["model"] == f"{OWN}.TwoLayerMLP"
    assert out.info["n_params"] == (64 * 16 + 16) + (16 * 10 + 10)
    assert 0.0 <= out.rows[0]["val_acc"] <= 1.0


def test_custom_task_with_tensors_in_memory(compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    objective = run_job(compose_cfg(*CUSTOM, "epochs=3", "+model.width=8", "+data.n_classes=4"), tmp_path)
    result = read_result(tmp_path)
    assert result is not None and result["status"] == "completed"
    assert result["objective"] == objective and result["n_train"] == 480 and result["n_val"] == 120
    assert result["data"] == f"{OWN}.blobs()"
    rows, _ = read_metrics(tmp_path)
    assert [r["epoch"] for r in rows] == [1, 2, 3] and rows[-1]["val_acc"] > 0.5  # four well-separated blobs


def test_regression_targets_of_shape_n_and_a_users_loss(compose_cfg: Callable[..., DictConfig]) -> None:
    base = ["task=custom", f"model._target_={OWN}.TwoLayerMLP", f"data._target_={OWN}.regression",
            "metric=val_loss", "direction=minimize", "lr=0.05", "epochs=5", *TINY[1:]]
    mse = train(compose_cfg(*base), log=quiet)
    huber = train(compose_cfg(*base, "loss._target_=torch.nn.HuberLoss", "+loss.delta=0.5"), log=quiet)
    assert mse.info["n_train"] == 320 and mse.info["n_val"] == 80  # val_fraction 0.2 held out
    assert "val_acc" not in mse.rows[-1]
    assert mse.rows[-1]["val_loss"] < mse.rows[0]["val_loss"]
    assert huber.rows[-1]["train_loss"] != mse.rows[-1]["train_loss"]  # another loss really trained


def test_datasets_are_streamed_and_train_like_the_same_tensors(compose_cfg: Callable[..., DictConfig]) -> None:
    streamed = train(compose_cfg(*CUSTOM, f"data._target_={OWN}.blob_datasets", "data.loader.num_workers=0",
                                 "epochs=3"), log=quiet)
    assert streamed.info["n_train"] == 480 and streamed.rows[-1]["val_acc"] > 0.5


def test_streamed_datasets_on_two_local_ranks(compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    """Each rank takes its share of every epoch through a DistributedSampler; rank 0 writes the job's files."""
    cfg = compose_cfg(*CUSTOM, f"data._target_={OWN}.blob_datasets", "data.loader.num_workers=0", "epochs=2",
                      "trainer.gpus=2")
    run_job(cfg, tmp_path)
    result = read_result(tmp_path)
    assert result is not None and result["status"] == "completed" and result["world_size"] == 2
    assert result["global_batch_size"] == 64 and len(read_metrics(tmp_path)[0]) == 2


@pytest.mark.slow  # loader worker processes
def test_streamed_datasets_keep_their_loader_workers_and_resume_bit_for_bit(
        compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    """The loaders are built once (persistent workers): over 3 epochs one worker reads the training data and one the
    validation data, instead of new ones forked each epoch. A Dataset that draws as it reads (random transforms)
    draws the same in a run resumed after epoch 2, whose workers start there."""
    def cfg(name: str) -> DictConfig:
        (tmp_path / name).mkdir()
        return compose_cfg(*CUSTOM, f"data._target_={OWN}.noisy_blob_datasets", f"+data.seen_dir={tmp_path / name}",
                           "data.loader.num_workers=1", "epochs=3", "trainer.keep_checkpoint=true")

    run_job(cfg("straight"), tmp_path / "straight_job")
    workers = {p.name for p in (tmp_path / "straight").iterdir()} - {str(os.getpid())}  # this process: a sample
    assert len(workers) == 2, "one worker for each loader, for all 3 epochs"

    def stop_after_two(epoch: int, row: dict[str, object]) -> bool:
        if epoch == 2:
            raise KeyboardInterrupt
        return False

    resumed = cfg("resumed")
    with pytest.raises(KeyboardInterrupt):
        run_job(resumed, tmp_path / "resumed_job", on_epoch=stop_after_two)
    run_job(resumed, tmp_path / "resumed_job")
    untimed = [[{k: v for k, v in row.items() if not k.endswith("_s")} for row in read_metrics(tmp_path / job)[0]]
               for job in ("straight_job", "resumed_job")]
    assert len(untimed[0]) == 3 and untimed[1] == untimed[0]


@pytest.mark.parametrize(("overrides", "words"), [
    ([f"model._target_={OWN}.NoSuchNet"],
     r"model._target_ must name a class or function, but own_code_testing has no attribute 'NoSuchNet'"),
    (["model._target_=no_such_package.nets.Net"],
     r"model._target_ must name an importable class or function, but model._target_=no_such_package.nets.Net "
     r"cannot be imported: ModuleNotFoundError"),
    ([f"model._target_={OWN}.five_outputs"],
     r"the model's output must have shape \(4, 3\) .* for the 3 classes of the data, but "
     r"model._target_=own_code_testing.five_outputs gives \(4, 5\)"),
    ([f"data._target_={OWN}.three_things"],
     r"data._target_=own_code_testing.three_things must return \(train, val\) .* but it returned a list of 3 items"),
    (["+model.depth=3"],
     r"model._target_=own_code_testing.TwoLayerMLP takes the arguments \(input_shape, n_outputs, width\), but the "
     r"model node also gives depth"),
    (["task=digits"],  # the digits task's data keys are not arguments of the user's data function
     r"data._target_=own_code_testing.blobs takes the arguments \(n, n_classes, n_features, seed\), but the data node "
     r"also gives n_synthetic, name, root, synthetic"),
    (["model._target_=null"],
     r"task=custom trains your own model, so model._target_ must name it"),
])
def test_each_mistake_is_one_clear_error_that_fails_only_the_job(
        compose_cfg: Callable[..., DictConfig], tmp_path: Path, overrides: list[str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        run_job(compose_cfg(*CUSTOM, *overrides), tmp_path)
    result = read_result(tmp_path)
    assert result is not None and result["status"] == "failed" and result["error"].startswith("ConfigError: ")
