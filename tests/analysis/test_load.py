"""sweepit.load on a real sweep: the frame's rows and columns hold what the sweep's files say, the best job, a job's
epochs, config, trained model and checkpoint; what it says of a folder that is no sweep, and without pandas."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
import yaml
from omegaconf import DictConfig

import sweepit
from sweepit.errors import SweepitError
from sweepit_testing import child_env, run_command, write_cpu_loop


def _files(job_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """result.json, metrics.jsonl's rows and the overrides of a job, read here as plain files."""
    result = json.loads((job_dir / "result.json").read_text())
    rows = [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines()]
    overrides = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text())
    return result, rows, overrides


@pytest.mark.slow
def test_the_frame_has_a_row_per_job_with_what_its_files_say(linreg_sweep: Path) -> None:
    df = sweepit.load(linreg_sweep).df
    assert list(df["job"]) == [0, 1, 2, 3] and set(df["sweep"]) == {linreg_sweep.name}
    assert list(df.columns[:6]) == ["sweep", "job", "optimizer", "lr", "status", "objective"]
    assert "task" not in df and "epochs" in df  # a key every job shares is no column; `epochs` is the count done
    for column in ("train_loss", "val_loss", "final_lr", "best_epoch", "best_val_loss", "epoch_time_s", "wall_time_s",
                   "gpu_hours", "n_gpus", "started_at", "ended_at", "job_dir", "note"):
        assert column in df, column
    assert df["lr"].dtype == "float64" and df["objective"].dtype == "float64"
    for row in df.to_dict("records"):
        job_dir = Path(row["job_dir"])
        assert job_dir.parent == linreg_sweep.absolute()  # the copy's folders, not those sweep.json recorded
        result, epochs, overrides = _files(job_dir)
        assert f"optimizer={row['optimizer']}" in overrides and f"lr={row['lr']}" in overrides
        assert row["status"] == result["status"] == "completed"
        assert row["objective"] == result["objective"] == epochs[-1]["val_loss"] == row["val_loss"]
        assert row["train_loss"] == epochs[-1]["train_loss"] and row["final_lr"] == epochs[-1]["lr"]
        assert row["best_val_loss"] == result["best_value"] and row["best_epoch"] == result["best_epoch"]
        assert row["epochs"] == result["epochs_completed"] == len(epochs) == 2
        assert row["epoch_time_s"] == result["epoch_time_s_mean"] and row["wall_time_s"] == result["wall_time_s"]
        assert row["started_at"] == pd.Timestamp(result["started_at"])
        assert row["ended_at"] == pd.Timestamp(result["ended_at"])
        assert math.isnan(row["gpu_hours"]) and row["n_gpus"] == 0  # on the CPU: no GPU, no GPU-hours
        assert row["note"] == ""


def test_a_cpu_only_loop_of_a_users_own_bills_no_gpu_hours_anywhere(tmp_path: Path) -> None:
    """An own loop on a machine without GPUs, whose config has `trainer.gpus: 1` and no `device`. Before: the frame,
    results.csv and the page said gpu_hours = wall time / 3600 and n_gpus 1, read from the config's key; now from
    what its session recorded the job was given (none)."""
    app, sweep = write_cpu_loop(tmp_path), tmp_path / "sweep"
    env = child_env(CUDA_VISIBLE_DEVICES="")  # this machine's GPUs, if it has any, are not the sweep's
    done = run_command([sys.executable, app, "-m", "x=1,2", f"hydra.sweep.dir={sweep}"], tmp_path, env, 120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [json.loads(p.read_text())["n_gpus"] for p in sorted(sweep.glob("*/result.json"))] == [0, 0]
    df = sweepit.load(sweep).df
    assert df["gpu_hours"].isna().all() and list(df["n_gpus"]) == [0, 0] and (df["wall_time_s"] > 0).all(), df
    from sweepit.reporting import load_sweep
    from sweepit.reporting.table import results_table

    assert "gpu_hours" not in results_table(load_sweep(sweep)).columns  # results.csv's and the page's table


@pytest.mark.slow
def test_the_best_job_its_epochs_config_model_and_checkpoint(linreg_sweep: Path) -> None:
    results = sweepit.load(linreg_sweep)
    df = results.df
    best = results.best
    assert best is not None and best.num == df.loc[df["objective"].idxmin(), "job"]  # linreg minimizes val_loss
    assert "best (minimize val_loss): job" in repr(results)
    result, epochs, _ = _files(best.job_dir)
    assert best.history.to_dict("records") == epochs
    assert isinstance(best.config, DictConfig)
    assert best.config.lr == df.loc[best.num, "lr"] and best.config.optimizer.name == df.loc[best.num, "optimizer"]
    assert best.config.task.name == "linreg"
    # The model predicts with the weights of its best epoch (`w x + b`, logged each epoch), the last epoch's too.
    x = torch.tensor([[0.0], [1.0], [-2.5]])
    for which, epoch in (("best", result["best_epoch"]), ("last", epochs[-1]["epoch"])):
        model = best.model(which)
        assert not model.training
        w, b = next((r["w"], r["b"]) for r in epochs if r["epoch"] == epoch)
        with torch.no_grad():
            assert torch.allclose(model(x), w * x + b, atol=1e-5), which
    state = best.checkpoint()  # the loop's checkpoint, kept (trainer.keep_checkpoint=true)
    assert state["epoch"] == 2 and set(state["model"]) == set(best.model("last").state_dict())
    assert results.job(2).num == 2 and results.job(2).overrides["optimizer"] == "sgd"


@pytest.mark.slow
def test_what_a_job_lacks_is_said_with_what_to_do(linreg_sweep: Path) -> None:
    results = sweepit.load(linreg_sweep)
    job = results.job(1)
    (job.job_dir / "model_last.pt").unlink()
    with pytest.raises(SweepitError, match=r"model\(which='last'\) reads model_last.pt, but job 1 has only "
                                           r"model_best.pt .*model\(which='best'\) reads it"):
        job.model("last")
    (job.job_dir / "model_best.pt").unlink()
    with pytest.raises(SweepitError, match=r"no weights in .*trainer.save_model"):
        job.model()
    with pytest.raises(SweepitError, match="which must be one of 'best', 'last', but got which='worst'"):
        job.model("worst")
    (job.job_dir / "checkpoint.pt").unlink()
    with pytest.raises(SweepitError, match=r"job 1 must have a checkpoint for checkpoint\(\), but .* does not "
                                           r"exist\.\nLoad its trained weights with model\(\), or run it again with "
                                           r"trainer\.keep_checkpoint=true\.\n"
                                           r"See docs/troubleshooting\.md#no-checkpoint$"):
        job.checkpoint()
    with pytest.raises(SweepitError, match=r"job must be a job number of .* \(0\.\.3\), but got 7"):
        results.job(7)


@pytest.mark.slow
def test_a_folder_that_is_no_sweep_is_told_what_a_sweep_holds(linreg_sweep: Path, tmp_path: Path) -> None:
    with pytest.raises(SweepitError, match=r"or a folder with sweeps under it, but \S+nowhere does not exist.\nList "
                                           "the sweeps under a folder with `sweepit ls <folder>`"):
        sweepit.load(tmp_path / "nowhere")
    (tmp_path / "empty" / "notes").mkdir(parents=True)
    with pytest.raises(SweepitError, match=r"takes a sweep folder \(one holding multirun.yaml, sweep.json or job "
                                           r"folders <num>_<overrides>/\) or a folder with sweeps under it, but "
                                           r"\S+empty holds none, nor any sweep under it.\nList the sweeps under a "
                                           "folder with `sweepit ls"):
        sweepit.load(tmp_path / "empty")
    job_dir = next(linreg_sweep.glob("0_*"))
    hint = re.escape(f"is job 0 of the sweep {linreg_sweep}.\nRun `sweepit.load('{linreg_sweep}')`.")
    with pytest.raises(SweepitError, match=hint):
        sweepit.load(job_dir)


def test_import_sweepit_loads_no_pandas_and_load_says_how_to_install_it(tmp_path: Path) -> None:
    code = ("import sys\nimport sweepit\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas' or m.startswith('sweepit.analysis')))\n"
            "assert callable(sweepit.load) and 'load' in sweepit.__all__\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr
    # pandas made unimportable, as where it is not installed
    code = "import sys\nsys.modules['pandas'] = None\nimport sweepit\nsweepit.load(sys.argv[1])\n"
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert ("SweepitError: sweepit.load needs pandas, which is not installed: install sweepit's extra with "
            "`pip install -e '.[analysis]'` (or `pip install pandas`).") in proc.stderr
