"""One job's outcome in its directory: completed, failed before training, diverged, reproducible, atomic."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig

from sweepit.errors import ConfigError, DataMissingError
from sweepit.results import JobState
from sweepit.results._job_files import read_metrics, read_result
from sweepit.train import _session
from sweepit.train._job import run_job
from sweepit_testing import TINY

LINREG = ["task=linreg", "epochs=3", *TINY[1:]]


def test_completed_job_leaves_metrics_and_result(compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    cfg = compose_cfg(*LINREG)
    objective = run_job(cfg, tmp_path)
    result = read_result(tmp_path)
    rows, notes = read_metrics(tmp_path)
    assert result is not None and not notes
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    assert result["status"] == "completed"
    assert result["objective"] == objective == rows[-1]["val_loss"]
    assert result["final"] == rows[-1]
    assert result["metric"] == "val_loss" and result["direction"] == "minimize"
    for key in ("wall_time_s", "device", "world_size", "code_version", "n_params", "effective_lr"):
        assert key in result, key
    assert {"w", "b", "train_loss", "val_loss", "epoch_time_s", "samples_per_s"} <= set(rows[-1])


def test_a_jobs_record_writes_its_times_as_sweep_json_does(compose_cfg: Callable[..., DictConfig],
                                                           tmp_path: Path) -> None:
    """One timestamp format in a sweep's records: UTC, to the millisecond (`now_iso`), in result.json as in
    sweep.json, whether sweepit's loop or the session of a task that wrote none recorded the job."""
    run_job(compose_cfg(*LINREG), tmp_path / "loop")
    (tmp_path / "task").mkdir()
    session = _session.begin(tmp_path / "task", {"metric": "loss"})
    session.finish(JobState.COMPLETED, returned=1.0)
    _session.end(session)
    for job in ("loop", "task"):
        result = read_result(tmp_path / job) or {}
        for key in ("started_at", "ended_at"):
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", result[key]), (job, key, result[key])


def test_linreg_recovers_the_line(compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    cfg = compose_cfg("task=linreg", "epochs=40", "optimizer=adam", "lr=0.05", *TINY[1:])
    run_job(cfg, tmp_path)
    final = read_result(tmp_path)["final"]  # type: ignore[index]
    assert final["w"] == pytest.approx(2.0, abs=0.05) and final["b"] == pytest.approx(1.0, abs=0.05)
    assert final["val_loss"] < 0.02  # noise variance is 0.01


@pytest.mark.parametrize(
    "override,rule",
    [
        ("lr=-1", "lr must be a finite number > 0, but got lr=-1"),
        ("batch_size=0", "batch_size must be an integer >= 1, but got batch_size=0"),
        ("epochs=0", "epochs must be an integer >= 1, but got epochs=0"),
        ("metric=val_acc", "metric must name a metric that task linreg reports"),
        ("direction=up", "direction must be maximize or minimize"),
        ("trainer.precision=fp8", "trainer.precision must be one of fp32, bf16, fp16, auto, but got "
                                  "trainer.precision='fp8'. Set auto for mixed precision"),
    ],
)
def test_invalid_values_fail_before_training(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, override: str, rule: str
) -> None:
    cfg = compose_cfg(*LINREG, override)
    with pytest.raises(ConfigError, match=rule.replace("(", r"\(")):
        run_job(cfg, tmp_path)
    result = read_result(tmp_path)
    assert result is not None and result["status"] == "failed" and rule in result["error"]
    assert result["epochs_completed"] == 0
    assert read_metrics(tmp_path) == ([], [])


def test_missing_data_names_the_path_and_the_download_command(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    cfg = compose_cfg("task=mnist", f"data.root={tmp_path / 'nowhere'}", *TINY)
    with pytest.raises(DataMissingError) as e:
        run_job(cfg, tmp_path / "job")
    assert str(tmp_path / "nowhere") in str(e.value) and "sweepit data download mnist" in str(e.value)
    assert read_result(tmp_path / "job")["status"] == "failed"  # type: ignore[index]


def test_divergence_stops_with_the_worst_objective(compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    cfg = compose_cfg(*LINREG, "optimizer=sgd", "lr=1e6", "epochs=5")
    objective = run_job(cfg, tmp_path)
    assert objective == math.inf  # minimize: the worst is +inf
    result = read_result(tmp_path)
    assert result is not None and result["status"] == "diverged"
    assert result["objective"] is None  # JSON has no Infinity; the status says why
    assert "loss became" in result["error"]
    assert result["epochs_completed"] < 5
    json.loads((tmp_path / "result.json").read_text())  # strict JSON, no NaN/Infinity tokens


def test_classification_divergence_returns_minus_inf(compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    cfg = compose_cfg("optimizer=sgd", "lr=1e12", "epochs=3", *TINY[1:])
    assert run_job(cfg, tmp_path) == -math.inf


def test_same_seed_same_metrics(compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    def metrics(seed: int, where: str) -> list[dict[str, float]]:
        cfg = compose_cfg("epochs=2", f"seed={seed}", "data.stratified=true", "data.augment.enabled=true", *TINY[1:])
        run_job(cfg, tmp_path / where)
        rows, _ = read_metrics(tmp_path / where)
        return [{k: v for k, v in r.items() if k not in ("epoch_time_s", "samples_per_s", "step_time_s")} for r in rows]

    first = metrics(0, "a")
    assert first == metrics(0, "b")
    assert first != metrics(1, "c")


def test_corrupt_metrics_lines_become_notes(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1}\n{"epoch": 2, "val\n[1]\n')
    rows, notes = read_metrics(tmp_path)
    assert rows == [{"epoch": 1}]
    assert len(notes) == 2 and "line 2" in notes[0]


def test_cosine_schedule_decays_the_lr_per_epoch(compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    from sweepit.train._loop import schedule_factor

    assert [schedule_factor("cosine", e, 4, 0) for e in (1, 3)] == [1.0, pytest.approx(0.5)]
    assert schedule_factor("constant", 3, 4, 0) == 1.0
    run_job(compose_cfg(*LINREG, "epochs=4", "lr=0.1", "trainer.lr_schedule=cosine"), tmp_path)
    rows, _ = read_metrics(tmp_path)
    assert [r["lr"] for r in rows] == pytest.approx([0.1, 0.1 * (0.5 + 0.5 * math.cos(math.pi / 4)), 0.05,
                                                     0.1 * (0.5 - 0.5 * math.cos(math.pi / 4))])


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_channels_last_trains_the_cnn_like_fp32(compose_cfg: Callable[..., DictConfig], tmp_path: Path,
                                                                precision: str) -> None:
    """bf16 autocast, fp16 autocast with its gradient scaler and NHWC layout change the arithmetic, not the training:
    same data order, close metrics."""
    # The digits' 8x8 images: CPU fp16 is emulated, and MNIST's 28x28 took 26 CPU-s for the same check. A low lr keeps
    # the loss far from zero, where a relative tolerance means something.
    base = ["task=digits", "task.model=cnn", "epochs=2", "batch_size=64", "lr=0.0003", *TINY[1:]]
    run_job(compose_cfg(*base), tmp_path / "fp32")
    run_job(compose_cfg(*base, f"trainer.precision={precision}", "trainer.channels_last=true"), tmp_path / "mixed")
    fp32, mixed = read_result(tmp_path / "fp32"), read_result(tmp_path / "mixed")
    assert fp32 is not None and mixed is not None
    assert (fp32["precision"], fp32["channels_last"]) == ("fp32", False)
    assert (mixed["precision"], mixed["channels_last"]) == (precision, True)
    assert mixed["status"] == "completed"
    assert mixed["final"]["train_loss"] != fp32["final"]["train_loss"]  # the other arithmetic really ran ...
    assert mixed["final"]["train_loss"] == pytest.approx(fp32["final"]["train_loss"], rel=0.05)  # ... to the same end
    # val_acc flips by a few images between CPUs with and without native bf16; the validation loss is the steadier
    # measure of "the same end".
    assert mixed["final"]["val_loss"] == pytest.approx(fp32["final"]["val_loss"], rel=0.05)


def test_auto_precision_trains_the_cpu_in_fp32(compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    """`auto` asks for mixed precision where a GPU's tensor cores run it; on the CPU it is fp32, and the record says
    what ran, not what was asked (the GPUs' side of the rule: tests/train/test_devices.py)."""
    run_job(compose_cfg(*LINREG), tmp_path / "fp32")
    run_job(compose_cfg(*LINREG, "trainer.precision=auto"), tmp_path / "auto")
    fp32, auto = read_result(tmp_path / "fp32"), read_result(tmp_path / "auto")
    assert fp32 is not None and auto is not None
    assert auto["precision"] == "fp32" and auto["final"]["val_loss"] == fp32["final"]["val_loss"]


@pytest.mark.filterwarnings("ignore:`torch.cuda.amp.GradScaler")  # deprecated in this torch, not in 2.2
def test_a_torch_without_torch_amp_grad_scaler_trains(compose_cfg: Callable[..., DictConfig], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.2, which pyproject allows, has no torch.amp.GradScaler: a job that needs no scaler must not fail."""
    monkeypatch.delattr(torch.amp, "GradScaler")
    run_job(compose_cfg(*LINREG), tmp_path)
    result = read_result(tmp_path)
    assert result is not None and result["status"] == "completed"


def test_a_loss_that_explodes_but_stays_finite_is_diverged(compose_cfg: Callable[..., DictConfig],
                                                           tmp_path: Path) -> None:
    """Adam at lr 1e6 on digits: a finite loss of about 1e13 (val_acc 0.12) is a diverged run, not a result."""
    cfg = compose_cfg("lr=1e6", "epochs=3", *TINY[1:])
    assert run_job(cfg, tmp_path / "exploded") == -math.inf
    result = read_result(tmp_path / "exploded")
    assert result is not None and result["status"] == "diverged"
    assert "times the untrained model's" in result["error"] and "trainer.diverge_ratio" in result["error"]
    off = compose_cfg("lr=1e6", "epochs=1", "trainer.diverge_ratio=0", *TINY[1:])
    run_job(off, tmp_path / "off")  # only NaN and inf count: this one "completes"
    assert read_result(tmp_path / "off")["status"] == "completed"  # type: ignore[index]


def test_a_job_under_a_launcher_trains_in_the_launchers_session(compose_cfg: Callable[..., DictConfig],
                                                                 tmp_path: Path) -> None:
    """sweepit's launchers begin a session for each job before its task runs; sweepit's own job joins it instead
    of beginning a second one, and leaves its end to the launcher (which closes it after its own record)."""
    cfg = compose_cfg(*LINREG)
    launchers = _session.begin(tmp_path, cfg)
    try:
        run_job(cfg, tmp_path)
        assert _session.current() is launchers  # not replaced, not ended
        assert [r["epoch"] for r in launchers.rows] == [1, 2, 3]  # the job reported into it
    finally:
        _session.end(launchers)
    # Alone (no launcher's session, or another job's), the job begins its own and ends it.
    other = _session.begin(tmp_path / "elsewhere", cfg)
    try:
        run_job(cfg, tmp_path / "alone")
        assert _session.current() is None and other.rows == []
    finally:
        _session.end(other)
