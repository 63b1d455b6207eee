"""Experiment trackers (`logger=...`): what a sweep wrote is read back with each tracker's own package
(TensorBoard's event reader, the MLflow client, W&B's offline run file through W&B's own protobuf records)."""

from __future__ import annotations

import csv
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sweepit.errors import ConfigError
from sweepit.results._job_files import read_metrics
from sweepit.trackers import Tracker, check_trackers
from sweepit_testing import REPO, run_train

HERE = Path(__file__).resolve().parent


class NeedsMissingPackage(Tracker):
    """A tracker whose package is not installed (as TensorBoard is not, without sweepit's extra)."""

    module = "sweepit_no_such_tracker_package"
    extra = "nosuchtracker"


def job_dirs(sweep: Path) -> dict[str, Path]:
    return {p.name.split("_", 1)[0]: p for p in sweep.iterdir() if (p / "result.json").is_file()}


def mlflow_runs(store: Path) -> dict[str, Any]:
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store.resolve().as_uri())
    runs = {}
    for experiment in client.search_experiments():
        for run in client.search_runs([experiment.experiment_id]):
            runs[run.info.run_name] = (experiment.name, run, client)
    return runs


def wandb_records(job_dir: Path) -> list[Any]:
    """The records of the job's offline W&B run, parsed with W&B's own protobuf classes. The file is a LevelDB
    log (32 KiB blocks; each chunk: crc32, length, type) after W&B's 7-byte header."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = (job_dir / "wandb").glob("offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    records, pos, chunks = [], 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:  # the rest of a block, zero-filled
            pos += left
            continue
        chunks = (b"" if kind in (1, 2) else chunks) + data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or its last chunk
            record = pb.Record()
            record.ParseFromString(chunks)
            records.append(record)
    return records


def items(update: Any) -> dict[str, Any]:
    """A W&B record's items (history, config or summary) as a dict: the key is `key` or else `nested_key`."""
    return {item.key or ".".join(item.nested_key): json.loads(item.value_json) for item in update}


@pytest.mark.slow  # a real multirun
def test_a_sweep_logs_every_job_to_each_tracker_with_its_status(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", "task=linreg", "epochs=3", "optimizer=sgd", "lr=0.01,1e9",
                      "logger=[csv,tensorboard,mlflow,wandb]", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = job_dirs(sweep)
    good, bad = jobs["0"], jobs["1"]
    rows, _ = read_metrics(good)
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    assert json.loads((bad / "result.json").read_text())["status"] == "diverged"
    assert "logger" not in good.name  # trackers change no result: not part of the job's name

    # CSV: the same rows as metrics.jsonl.
    with (good / "metrics.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [float(r["val_loss"]) for r in table] == pytest.approx([r["val_loss"] for r in rows])

    # TensorBoard: one scalar per metric and epoch, and the hyperparameters with the status for HParams.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(str(good / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    val = events.Scalars("val_loss")
    assert [e.step for e in val] == [1, 2, 3]
    assert [e.value for e in val] == pytest.approx([r["val_loss"] for r in rows])
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hparams = start.session_start_info.hparams
    assert hparams["lr"].number_value == pytest.approx(0.01)
    assert hparams["optimizer.name"].string_value == "sgd"
    assert hparams["sweepit.status"].string_value == "completed"

    # MLflow: one experiment for the sweep, one run per job (the diverged one too), params, curves, status.
    runs = mlflow_runs(sweep / "mlruns")
    assert set(runs) == {good.name, bad.name}
    experiment, run, client = runs[good.name]
    assert experiment == f"multirun/{sweep.name}"
    assert runs[bad.name][0] == experiment
    assert run.data.params["lr"] == "0.01" and run.data.params["optimizer.name"] == "sgd"
    history = client.get_metric_history(run.info.run_id, "val_loss")
    history = sorted(history, key=lambda m: m.step)
    assert [m.step for m in history] == [1, 2, 3]
    assert [m.value for m in history] == pytest.approx([r["val_loss"] for r in rows])
    assert (run.info.status, run.data.tags["sweepit.status"]) == ("FINISHED", "completed")
    _, diverged, _ = runs[bad.name]
    assert (diverged.info.status, diverged.data.tags["sweepit.status"]) == ("FAILED", "diverged")

    # W&B offline: the run in the sweep's group, named after the job, with its config, history and status.
    records = wandb_records(good)
    (run_record,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run_record.run_group, run_record.display_name) == (f"multirun/{sweep.name}", good.name)
    config = items(run_record.config.update)
    assert config["lr"] == 0.01 and config["epochs"] == 3
    history = [items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    assert [h["val_loss"] for h in history] == pytest.approx([r["val_loss"] for r in rows])
    assert [h["_step"] for h in history] == [1, 2, 3]
    summary = {k: v for r in records if r.WhichOneof("record_type") == "summary"
               for k, v in items(r.summary.update).items()}
    assert summary["sweepit_status"] == "completed"
    (exit_record,) = [r.exit for r in records if r.WhichOneof("record_type") == "exit"]
    assert exit_record.exit_code == 0
    bad_summary = {k: v for r in wandb_records(bad) if r.WhichOneof("record_type") == "summary"
                   for k, v in items(r.summary.update).items()}
    assert bad_summary["sweepit_status"] == "diverged"


@pytest.mark.slow  # two rank processes
def test_two_local_ranks_log_once_from_rank_0(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = run_train(["task=linreg", "epochs=2", "trainer.gpus=2", "logger=many",
                      f"hydra.run.dir={run_dir}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows, _ = read_metrics(run_dir)
    with (run_dir / "metrics.csv").open() as f:
        assert [int(r["epoch"]) for r in csv.DictReader(f)] == [r["epoch"] for r in rows] == [1, 2]
    (entry,) = mlflow_runs(run_dir / "mlruns").values()  # one run, not one per rank
    _, run, client = entry
    assert run.data.params["trainer.gpus"] == "2"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val_loss")] == [1, 2]
    assert run.data.tags["sweepit.status"] == "completed"
    assert (run_dir / "tensorboard").is_dir()  # many: csv, tensorboard and mlflow


def test_a_missing_tracker_package_is_one_paragraph_before_any_training(tmp_path: Path) -> None:
    config = {"logger": {"fake": {"_target_": "test_trackers.NeedsMissingPackage"}}}
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[nosuchtracker\]'"):
        check_trackers(config)
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(REPO / "train.py"), "task=linreg", "epochs=2",
                           "+logger.fake._target_=test_trackers.NeedsMissingPackage", f"hydra.run.dir={run_dir}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "logger.fake needs the `sweepit_no_such_tracker_package` package" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (run_dir / "metrics.jsonl").exists()  # refused before the first epoch
    assert json.loads((run_dir / "result.json").read_text())["status"] == "failed"


def test_a_logger_that_is_not_a_tracker_config_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"logger.tb must be a tracker's config with a _target_"):
        check_trackers({"logger": {"tb": {"log_dir": "x"}}})
    check_trackers({"logger": {"tb": None}})  # switched off: nothing to check
