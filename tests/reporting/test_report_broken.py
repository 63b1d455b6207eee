"""Partial and broken sweeps: running, queued, failed and corrupt jobs are rows with their state and a note."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from report_helpers import assert_plot

from sweepit.reporting import build_report, load_sweep

pytestmark = pytest.mark.slow


def _job(sweep: Path, num: int) -> Path:
    (job,) = sweep.glob(f"{num}_*")
    return job


def _break(sweep: Path) -> None:
    """Job 0 completed with a torn metrics line, 1 running, 2 failed, 3 corrupt, and 4 queued in sweep.json."""
    with open(_job(sweep, 0) / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 4, "train_lo\n')
    (_job(sweep, 1) / "result.json").unlink()
    failed = _job(sweep, 2) / "result.json"
    result = json.loads(failed.read_text())
    result.update(status="failed", objective=None, error="RuntimeError: CUDA out of memory\nTraceback ...")
    del result["world_size"], result["device"], result["n_gpus"]  # a launcher's record of a crashed job: the GPUs
    # are those its launcher gives its config
    failed.write_text(json.dumps(result))
    config = _job(sweep, 2) / ".hydra" / "config.yaml"
    config.write_text(config.read_text().replace("gpus: 1", "gpus: 2").replace("device: cpu", "device: cuda"))
    (_job(sweep, 3) / "result.json").write_text('{"status": "compl')
    jobs: list[dict[str, Any]] = [{"num": n, "overrides": [], "job_dir": str(_job(sweep, n)), "state": "completed"}
                                  for n in (0, 2, 3)]
    jobs += [{"num": 1, "overrides": [], "job_dir": str(_job(sweep, 1)), "state": "running", "pid": 1},
             {"num": 4, "overrides": ["task=linreg", "epochs=3", "device=cpu", "trainer.threads=1",
                                     "optimizer=rmsprop", "lr=0.1", "++hydra.job.env_set.SWEEPIT_OPTUNA_TRIAL=4"],
              "job_dir": str(sweep / "4_lr=0.1,optimizer=rmsprop"), "state": "queued"}]
    (sweep / "sweep.json").write_text(json.dumps({"version": 1, "launcher": "local", "jobs": jobs,
                                                   "created_at": "2026-11-21T10:00:00.000+00:00"}))


def test_broken_jobs_are_rows_with_state_and_note(linreg_sweep: Path) -> None:
    _break(linreg_sweep)
    out = build_report(linreg_sweep)
    with open(out / "results.csv") as f:
        rows = {int(r["job"]): r for r in csv.DictReader(f)}
    assert {n: r["status"] for n, r in rows.items()} == {
        0: "completed", 1: "running", 2: "failed", 3: "corrupt", 4: "queued"}
    assert "metrics.jsonl line 4 is not JSON" in rows[0]["note"] and rows[0]["objective"]
    assert rows[1]["objective"] == "" and rows[1]["epochs"] == "3" and rows[1]["note"] == ""
    assert rows[2]["note"] == "RuntimeError: CUDA out of memory"
    wall = json.loads((_job(linreg_sweep, 2) / "result.json").read_text())["wall_time_s"]
    assert float(rows[2]["gpu_hours"]) == pytest.approx(2 * wall / 3600)
    assert rows[0]["gpu_hours"] == ""  # on CPU
    assert rows[3]["note"].startswith("result.json unreadable")
    assert rows[4]["optimizer"] == "rmsprop" and rows[4]["epochs"] == ""
    assert not any(k.startswith("hydra.") for k in rows[4])  # the sweeper's own overrides are no columns
    for name in ("learning_curves.png", "objective_heatmap.png", "linreg_fit.png"):
        assert_plot(out / name)
    page = (out / "index.html").read_text()
    for status in ("running", "failed", "corrupt", "queued"):
        assert f'class="status status-{status}"' in page
    assert "launcher local" in page


def test_sweep_with_no_finished_job_still_reports(linreg_sweep: Path) -> None:
    for result in linreg_sweep.glob("*/result.json"):
        result.unlink()
    (_job(linreg_sweep, 2) / "metrics.jsonl").write_bytes(b"\xff\xfe not text")
    (_job(linreg_sweep, 3) / "metrics.jsonl").unlink()
    sweep = load_sweep(linreg_sweep)
    assert [j.status for j in sweep.jobs] == ["running"] * 4 and sweep.best is None
    assert "metrics.jsonl unreadable" in sweep.jobs[2].note
    out = build_report(linreg_sweep)
    assert not (out / "objective_heatmap.png").exists()  # nothing completed: no objective to map
    assert (out / "learning_curves.png").is_file()
    assert "no completed job with a finite val_loss yet" in (out / "summary.md").read_text()
    assert (out / "results.csv").read_text().count("\n") == 5
