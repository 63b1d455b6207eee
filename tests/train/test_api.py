"""The API a training function calls (sweepit.report, should_stop, save_checkpoint, load_checkpoint, context),
used the way a user's own loop uses it: real files, a real Optuna journal, real torch state."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
import torch
from omegaconf import OmegaConf

import sweepit
from sweepit.results._job_files import read_metrics, read_result
from sweepit.search._pruning import ENV_STORAGE, ENV_STUDY, ENV_TRIAL, PRUNER_ATTR, open_storage
from sweepit.train import _session
from sweepit.train._distributed import spawn_local
from sweepit.train._rank import Rank


@pytest.fixture(autouse=True)
def _no_session_left_behind() -> None:
    _session.end()


def _job(tmp_path: Path, **config: object) -> _session.Session:
    return _session.begin(tmp_path, OmegaConf.create(config))


def test_report_writes_one_row_per_epoch_and_a_rereported_epoch_replaces_the_later_ones(tmp_path: Path) -> None:
    _job(tmp_path)
    sweepit.report({"train_loss": torch.tensor(0.5), "val_acc": 0.7})
    sweepit.report({"train_loss": 0.4, "val_acc": 0.8})          # epoch 2, counted on
    sweepit.report({"train_loss": 0.3, "val_acc": 0.9}, epoch=3)
    sweepit.report({"train_loss": 0.35, "val_acc": 0.85}, epoch=2)  # a resumed run reports epoch 2 again
    rows, notes = read_metrics(tmp_path)
    assert notes == []
    assert rows == [{"epoch": 1, "train_loss": 0.5, "val_acc": pytest.approx(0.7)},
                    {"epoch": 2, "train_loss": 0.35, "val_acc": 0.85}]
    assert isinstance(rows[0]["train_loss"], float)  # a 0-d tensor became a number


def test_report_refuses_what_is_not_a_mapping_and_epochs_below_one(tmp_path: Path) -> None:
    _job(tmp_path)
    with pytest.raises(sweepit.ConfigError, match=r"takes a mapping of metric names to numbers, but got float"):
        sweepit.report(0.5)  # type: ignore[arg-type]
    with pytest.raises(sweepit.ConfigError, match=r"epoch must be >= 1 .* but got epoch=0"):
        sweepit.report({"loss": 1.0}, epoch=0)


def test_outside_any_job_the_calls_write_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(_session.ENV_JOB_DIR, raising=False)
    sweepit.report({"loss": 1.0})
    sweepit.save_checkpoint({"epoch": 1})
    assert sweepit.load_checkpoint() is None
    assert sweepit.should_stop() is False
    assert sweepit.context().job_dir is None
    assert list(tmp_path.iterdir()) == []


def test_a_multiruns_driver_holding_the_sweeps_hydra_config_is_outside_any_job(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """After a multirun in this process (sweepit's launchers run no job in the driver), HydraConfig holds the sweep's
    config, whose runtime.output_dir only a job sets: the calls write nothing, where they once raised
    MissingMandatoryValue."""
    from hydra.core.hydra_config import HydraConfig
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(_session.ENV_JOB_DIR, raising=False)
    before = HydraConfig.instance().cfg
    HydraConfig.instance().cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": "???"}}})  # type: ignore[assignment]
    try:
        sweepit.report({"loss": 1.0})
        assert sweepit.context().job_dir is None
        HydraConfig.get().runtime.output_dir = str(tmp_path / "job")  # a job's: its directory
        sweepit.report({"loss": 1.0})
        assert sweepit.context().job_dir == tmp_path / "job"
    finally:
        _session.end()
        HydraConfig.instance().cfg = before
    assert [p.name for p in tmp_path.iterdir()] == ["job"]


def test_finish_records_a_task_that_wrote_no_result(tmp_path: Path) -> None:
    session = _job(tmp_path, metric="val_acc", direction="maximize")
    for epoch, acc in enumerate((0.5, 0.9, 0.8), start=1):
        sweepit.report({"val_acc": acc}, epoch=epoch)
    session.finish("completed", returned={"val_acc": 0.8, "note": "a dict, as any app may return"})
    result = read_result(tmp_path)
    assert result is not None
    assert (result["status"], result["objective"], result["metric"], result["direction"]) == \
        ("completed", 0.8, "val_acc", "maximize")  # a non-number return: the last reported metric
    assert (result["best_epoch"], result["best_value"], result["epochs_completed"]) == (2, 0.9, 3)
    assert result["final"] == {"epoch": 3, "val_acc": 0.8}
    assert "note" in result["returned"]


def test_finish_keeps_the_tasks_own_result_and_takes_a_numeric_return_as_the_objective(tmp_path: Path) -> None:
    session = _job(tmp_path)
    session.finish("completed", returned=3)
    assert read_result(tmp_path)["objective"] == 3.0  # type: ignore[index]
    assert read_result(tmp_path)["epochs_completed"] is None  # type: ignore[index]  # it reported none: not 0
    assert "direction" not in read_result(tmp_path)  # type: ignore[operator]  # the config names none
    (tmp_path / "result.json").write_text(json.dumps({"status": "completed", "objective": 1.0, "mine": True}))
    session.finish("failed", error=RuntimeError("late"))
    assert read_result(tmp_path) == {"status": "completed", "objective": 1.0, "mine": True}


def test_trial_pruned_diverged_and_interrupts_have_their_own_status() -> None:
    assert _session.status_of(optuna.TrialPruned("stop")) == "pruned"
    assert _session.status_of(sweepit.DivergedError("nan")) == "diverged"
    assert _session.status_of(KeyboardInterrupt()) == "interrupted"
    assert _session.status_of(ValueError("bad")) == "failed"


def test_a_checkpoint_restores_the_state_the_metrics_and_every_random_state(tmp_path: Path) -> None:
    _job(tmp_path, lr=0.1, timeout_min=5)
    model = torch.nn.Linear(3, 2)
    for epoch in (1, 2):
        sweepit.report({"loss": 1.0 / epoch}, epoch=epoch)
    torch.manual_seed(7)
    random.seed(7)
    sweepit.save_checkpoint({"epoch": 2, "model": model.state_dict()})
    after_save = (torch.rand(3), random.random())
    sweepit.report({"loss": 0.3}, epoch=3)  # reported after the checkpoint: a requeue loses it

    _session.end()
    _job(tmp_path, lr=0.1, timeout_min=60)  # the job again; a new time limit does not change the trajectory
    state = sweepit.load_checkpoint()
    assert state is not None and state["epoch"] == 2
    torch.testing.assert_close(state["model"]["weight"], model.weight.detach())
    assert (torch.rand(3), random.random()) == (pytest.approx(after_save[0]), after_save[1])
    assert [r["epoch"] for r in read_metrics(tmp_path)[0]] == [1, 2]  # epoch 3 is not there any more


def test_a_checkpoint_of_another_configuration_is_not_resumed(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                              ) -> None:
    _job(tmp_path, lr=0.1, trainer={"threads": 1})
    sweepit.save_checkpoint({"epoch": 1})
    _session.end()
    _job(tmp_path, lr=0.1, trainer={"threads": 4})  # bookkeeping only: still the same run
    assert sweepit.load_checkpoint() == {"epoch": 1}
    _session.end()
    _job(tmp_path, lr=0.2, trainer={"threads": 4})
    with caplog.at_level(logging.WARNING):
        assert sweepit.load_checkpoint() is None
    assert "checkpoint of another configuration" in caplog.text



def test_a_task_that_changes_its_config_while_it_runs_still_resumes(tmp_path: Path) -> None:
    """The checkpoint's fingerprint is the config as the job started (computed once a job): what the job computes
    again when it is restarted with the same config, whatever the task did to its copy in between."""
    session = _job(tmp_path, lr=0.1)
    assert sweepit.load_checkpoint() is None  # a fresh start
    session.config.lr = 0.5  # the task's own business, after the start
    sweepit.save_checkpoint({"epoch": 1})
    _session.end()
    _job(tmp_path, lr=0.1)  # the requeued job: the same config as the first start
    assert sweepit.load_checkpoint() == {"epoch": 1}

def test_context_gives_the_rank_and_device_sweepit_assigned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _job(tmp_path, device="cpu")
    job = sweepit.context()
    assert (job.rank, job.world_size, job.is_main, job.device.type, job.job_dir) == (0, 1, True, "cpu", tmp_path)
    _session.end()
    for key, value in {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "29600"}.items():
        monkeypatch.setenv(key, value)  # as torchrun sets them
    _job(tmp_path, device="cpu")
    job = sweepit.context()
    assert (job.rank, job.local_rank, job.world_size, job.is_main, job.master_port) == (1, 1, 2, False, 29600)
    sweepit.report({"loss": 1.0})  # not rank 0: nothing written
    assert not (tmp_path / "metrics.jsonl").exists()


def test_should_stop_follows_the_studys_pruner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real study in a journal file, as the Optuna sweeper leaves it: one finished trial, then this job's."""
    storage_path = str(tmp_path / "optuna.journal")
    storage = open_storage(storage_path)
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    study.set_user_attr(PRUNER_ATTR, {"_target_": "optuna.pruners.MedianPruner", "n_startup_trials": 1})
    done = study.ask()
    for step, value in enumerate((0.8, 0.9), start=1):
        done.report(value, step)
    study.tell(done, 0.9)
    mine = study.ask()
    monkeypatch.setenv(ENV_STORAGE, storage_path)
    monkeypatch.setenv(ENV_STUDY, "s")
    monkeypatch.setenv(ENV_TRIAL, str(mine.number))
    _job(tmp_path / "job", metric="val_acc", epochs=5)
    sweepit.report({"val_acc": 0.85}, epoch=1)
    assert sweepit.should_stop() is False  # above the median at epoch 1
    sweepit.report({"val_acc": 0.1}, epoch=2)
    assert sweepit.should_stop() is True   # far below it at epoch 2
    trial = optuna.load_study(study_name="s", storage=storage).trials[mine.number]
    assert trial.intermediate_values == {1: 0.85, 2: 0.1}


def test_a_loop_on_the_api_resumes_exactly(tmp_path: Path) -> None:
    """A user's own loop, interrupted after epoch 2 and run again, ends with an uninterrupted run's metrics."""

    def loop(job_dir: Path, stop_after: int | None = None) -> list[dict[str, float]]:
        _session.begin(job_dir, OmegaConf.create({"lr": 0.05, "seed": 0}))
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        first = 1
        state = sweepit.load_checkpoint()
        if state is not None:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            first = state["epoch"] + 1
        for epoch in range(first, 6):
            x = torch.randn(32, 4)
            loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sweepit.report({"train_loss": loss.item()}, epoch=epoch)
            sweepit.save_checkpoint({"epoch": epoch, "model": model.state_dict(), "optimizer": opt.state_dict()})
            if epoch == stop_after:
                break
        _session.end()
        return read_metrics(job_dir)[0]

    straight = loop(tmp_path / "straight")
    loop(tmp_path / "resumed", stop_after=2)
    torch.manual_seed(123)  # whatever happened in between
    resumed = loop(tmp_path / "resumed")
    assert resumed == straight and len(straight) == 5


def test_a_process_that_runs_one_job_after_another_gives_each_its_own_session(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Hydra's basic launcher runs every job of a sweep in one process, moving the output directory on: the calls
    of the second job must not see the first one's checkpoint or metrics (it loaded job 0's checkpoint and trained
    0 epochs)."""
    first, second = tmp_path / "0_lr=0.1", tmp_path / "1_lr=0.2"
    monkeypatch.setenv(_session.ENV_JOB_DIR, str(first))
    sweepit.report({"loss": 1.0}, epoch=1)
    sweepit.save_checkpoint({"epoch": 1, "weights": [1.0]})
    monkeypatch.setenv(_session.ENV_JOB_DIR, str(second))
    assert sweepit.load_checkpoint() is None  # a fresh start: job 0's checkpoint is not this job's
    assert sweepit.context().job_dir == second
    sweepit.report({"loss": 2.0})
    assert read_metrics(second)[0] == [{"epoch": 1, "loss": 2.0}]  # counted from 1 again, in its own file
    assert read_metrics(first)[0] == [{"epoch": 1, "loss": 1.0}]
    monkeypatch.setenv(_session.ENV_JOB_DIR, str(first))
    assert sweepit.load_checkpoint()["weights"] == [1.0]  # the same directory again: its own checkpoint


def _user_loop(job_dir: Path, drawn: Path, stop_after: int | None) -> Callable[[Rank], int]:
    """A user's loop on each rank: its own random stream, one draw an epoch, a checkpoint at each epoch's end."""

    def rank_main(rank: Rank) -> int:
        _session.begin(job_dir, OmegaConf.create({"metric": "x", "seed": 0, "device": "cpu"}), rank)
        sweepit.context().init_process_group()  # gloo: the ranks keep in step, as a DDP model's do
        torch.manual_seed(100 + rank.rank)
        state = sweepit.load_checkpoint()
        for epoch in range(1 if state is None else state["epoch"] + 1, 5):
            (drawn / f"rank{rank.rank}-epoch{epoch}").write_text(repr(torch.rand(1).item()))
            sweepit.report({"x": 1.0}, epoch=epoch)
            sweepit.save_checkpoint({"epoch": epoch})
            torch.distributed.barrier()
            if epoch == stop_after:
                raise KeyboardInterrupt  # a preemption between epochs
        return 0

    return rank_main


def test_every_rank_resumes_with_its_own_random_states(tmp_path: Path) -> None:
    """Rank 0's states were saved and restored on every rank: rank 1 drew rank 0's numbers after a resume (and, on
    GPUs, get_rng_state_all() failed where fewer GPUs were visible at resume)."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    for folder in (straight, resumed):
        (folder / "drawn").mkdir(parents=True)
    spawn_local(2, _user_loop(straight, straight / "drawn", None))
    with pytest.raises(KeyboardInterrupt):
        spawn_local(2, _user_loop(resumed, resumed / "drawn", 2))
    assert sorted(p.name for p in resumed.glob("checkpoint*")) == ["checkpoint.pt", "checkpoint.rank1.pt"]
    spawn_local(2, _user_loop(resumed, resumed / "drawn", None))
    for name in sorted(p.name for p in (straight / "drawn").iterdir()):
        assert (resumed / "drawn" / name).read_text() == (straight / "drawn" / name).read_text(), name
