"""Report of a real sweep of train.py: the CSV against each result.json, the plots, the command that reproduces."""

from __future__ import annotations

import csv
import json
import math
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from report_helpers import assert_plot

from sweepit.cli import main
from sweepit.reporting import build_report
from sweepit_testing import REPO, run_train

pytestmark = pytest.mark.slow


def _results(sweep: Path) -> dict[str, dict[str, Any]]:
    return {p.name: json.loads((p / "result.json").read_text())
            for p in sweep.iterdir() if (p / "result.json").is_file()}


def _close(cell: str, value: float) -> bool:
    return math.isclose(float(cell), value, rel_tol=1e-12, abs_tol=0.0)


def test_csv_has_one_row_per_job_with_its_results(linreg_sweep: Path) -> None:
    out = build_report(linreg_sweep)
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    columns = list(rows[0])
    assert columns[:5] == ["job", "optimizer", "lr", "status", "objective"]  # fixed overrides get no column
    for name in ("train_loss", "val_loss", "w", "b", "best_epoch", "epoch_time_s", "wall_time_s", "job_dir", "note"):
        assert name in columns
    assert "gpu_hours" not in columns  # CPU jobs: their ranks are no GPUs
    assert columns.index("train_loss") < columns.index("val_loss") < columns.index("w") < columns.index("job_dir")
    results = _results(linreg_sweep)
    assert len(rows) == len(results) == 4
    for row in rows:
        result = results[row["job_dir"]]
        assert row["job"] == row["job_dir"].split("_", 1)[0]
        assert f"optimizer={row['optimizer']}" in row["job_dir"] and f"lr={row['lr']}," in row["job_dir"]
        assert row["status"] == result["status"] == "completed"
        assert _close(row["objective"], result["objective"])
        for metric in ("train_loss", "val_loss", "w", "b"):
            assert _close(row[metric], result["final"][metric])
        assert int(row["best_epoch"]) == result["best_epoch"]
        assert int(row["epochs"]) == 3
        assert _close(row["wall_time_s"], result["wall_time_s"])
        lines = (linreg_sweep / row["job_dir"] / "metrics.jsonl").read_text().splitlines()
        epochs = [json.loads(line) for line in lines]
        assert _close(row["epoch_time_s"], sum(e["epoch_time_s"] for e in epochs[1:]) / 2)  # warm-up left out
        assert row["note"] == ""


def test_plots_are_pngs_of_real_figures(linreg_sweep: Path) -> None:
    out = build_report(linreg_sweep)
    names = sorted(p.name for p in out.glob("*.png"))
    assert names == ["learning_curves.png", "linreg_fit.png", "objective_heatmap.png"]
    for name in names:
        assert_plot(out / name)


def test_the_report_of_a_linreg_sweep_imports_no_torch(linreg_sweep: Path) -> None:
    """The linreg fit draws the band its data lies in from the config, not the points (only torch's generator gives
    those back): a report, at each sweep's end or by `sweepit report`, costs no 1.7 s torch import."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "sweepit.cli", "report", str(linreg_sweep)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "matplotlib" in imported and "torch" not in imported
    page = (linreg_sweep / "report" / "index.html").read_text()
    assert "Linear regression fits" in page and "fitted lines against the data" in page, page[-3000:]


def test_summary_md_command_reproduces_the_best_job(linreg_sweep: Path, tmp_path: Path) -> None:
    out = build_report(linreg_sweep)
    text = (out / "summary.md").read_text()
    results = _results(linreg_sweep)
    best_dir, best = min(results.items(), key=lambda kv: kv[1]["objective"])  # linreg minimizes val_loss
    optimizer, lr = best_dir.split("optimizer=")[1].split(",")[0], best_dir.split("lr=")[1].split(",")[0]
    # The sweep ran from another folder with this checkout's train.py (Hydra's basic launcher: no sweep.json; the
    # script is found beside the app's conf/ that multirun.yaml names).
    command = (f"python {REPO / 'train.py'} task=linreg epochs=3 device=cpu trainer.threads=1 "
               f"optimizer={optimizer} lr={lr}")
    assert f"```bash\n{command}\n```" in text
    assert text.count("\n| ") == 5  # header and four jobs
    assert "![" in text and "(learning_curves.png)" in text

    argv = shlex.split(command)
    assert argv[:2] == ["python", str(REPO / "train.py")]
    proc = run_train(argv[2:], tmp_path)  # run_train runs `sys.executable REPO/train.py`
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run,) = (tmp_path / "outputs" / "runs").iterdir()
    assert json.loads((run / "result.json").read_text())["objective"] == pytest.approx(best["objective"], rel=1e-6)


def test_cli_report_prints_the_table_and_where_the_page_is(linreg_sweep: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(linreg_sweep)]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header[:5] == ["job", "optimizer", "lr", "status", "objective"] and "job_dir" not in header
    assert "4 jobs: 4 completed" in out
    assert f"reproduce: python {REPO / 'train.py'} task=linreg" in out
    assert f"report: {linreg_sweep / 'report' / 'index.html'}" in out
    assert (linreg_sweep / "report" / "index.html").is_file()


def test_column_names_are_unique_and_epoch_time_means_one_thing(linreg_sweep: Path) -> None:
    """The swept `lr` and the loop's last-epoch `lr` are two columns with two names; `epoch_time_s` is the mean
    without the first epoch in results.csv and in the terminal's table alike."""
    from sweepit.results._summary import summarize

    out = build_report(linreg_sweep)
    with open(out / "results.csv") as f:
        header, *body = list(csv.reader(f))
    assert len(header) == len(set(header))
    assert "lr" in header and "final_lr" in header
    results = _results(linreg_sweep)
    table = summarize(linreg_sweep).splitlines()
    terminal = {line.split()[0]: line.split() for line in table[2:] if line[:1].isdigit()}
    time_col = table[0].split().index("epoch_time_s")
    for cells in body:
        row = dict(zip(header, cells, strict=True))
        result = results[row["job_dir"]]
        assert f"lr={row['lr']}," in row["job_dir"]
        assert _close(row["final_lr"], result["final"]["lr"])
        assert _close(row["epoch_time_s"], result["epoch_time_s_mean"])
        assert terminal[row["job"]][time_col] == f"{result['epoch_time_s_mean']:.4g}"
