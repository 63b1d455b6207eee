"""The table a sweep prints at its end, for sweeps larger than its row limit (real job directories)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from sweepit.results._job_files import write_result
from sweepit.results._summary import summarize
from sweepit_testing import SWEEPIT

# job -> (optimizer, lr, status, val_acc); `wd` is the same in every job but job 6, which is never among the best
JOBS = [("adam", "0.1", "completed", 0.50), ("sgd", "0.1", "completed", 0.90), ("adam", "0.01", "failed", None),
        ("sgd", "0.01", "completed", 0.70), ("adam", "0.001", "completed", 0.90), ("sgd", "0.001", "diverged", None),
        ("adam", "0.3", "completed", 0.10)]


def _sweep(sweep_dir: Path) -> Path:
    for num, (optimizer, lr, status, acc) in enumerate(JOBS):
        overrides = [f"optimizer={optimizer}", f"lr={lr}", f"wd={'0.1' if num == 6 else '0'}", "epochs=3"]
        job = sweep_dir / f"{num}_{','.join(overrides)}"
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
        result = {"status": status, "metric": "val_acc", "direction": "maximize", "objective": acc,
                  "final": {"val_acc": acc}, "weights": {"model_best.pt": 1000}}
        if status == "failed":
            result["error"] = "RuntimeError: out of memory"
        write_result(job, result)
    return sweep_dir


def _table_jobs(text: str) -> list[int]:
    """The job numbers of the table's rows, in the order printed."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("job "))
    rows = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        rows.append(int(line.split()[0]))
    return rows


def test_a_sweep_beyond_the_limit_shows_its_best_jobs_and_still_counts_every_job(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path / "sweep")
    whole, capped = summarize(sweep, max_rows=0), summarize(sweep, max_rows=3)

    assert _table_jobs(whole) == [0, 1, 2, 3, 4, 5, 6]  # no limit: every job, in job order
    # the 3 best by val_acc, best first; on a tie (jobs 1 and 4) the earlier job first, as "best" picks
    assert _table_jobs(capped) == [1, 4, 3]
    assert capped.splitlines()[0] == (f"the best 3 of 7 jobs by val_acc (maximize); `sweepit summary {sweep} "
                                      "--rows 0` lists every job:")
    # the columns are the keys swept over every job: wd varies only in job 6, which is not shown
    header = capped.splitlines()[1].split()
    assert header[:4] == ["job", "optimizer", "lr", "wd"] and "epochs" not in header
    # every line after the table covers all 7 jobs, as without a limit
    assert whole.split("\n\n", 1)[1] == capped.split("\n\n", 1)[1]
    tail = capped.split("\n\n", 1)[1]
    assert "7 jobs: 5 completed, 1 diverged, 1 failed" in tail
    assert "same in every job: epochs=3" in tail
    assert "best (maximize val_acc): job 1 = 0.9  [optimizer=sgd lr=0.1 wd=0 epochs=3]" in tail
    assert "weights: 7.0 kB in 7 jobs" in tail


def test_jobs_without_an_objective_fill_the_rows_the_scored_ones_leave(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path / "sweep")
    # 5 scored jobs, a limit of 6: all 5, best first, then the first job without an objective (2, failed)
    assert _table_jobs(summarize(sweep, max_rows=6)) == [1, 4, 3, 0, 6, 2]


def test_the_summary_command_takes_a_row_limit(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path / "sweep")
    out = subprocess.run([SWEEPIT, "summary", str(sweep), "--rows", "2"],
                         capture_output=True, text=True, check=True).stdout
    assert _table_jobs(out) == [1, 4] and out.startswith("the best 2 of 7 jobs by val_acc")
    for rows in ([], ["--rows", "0"]):  # 7 jobs: under the default limit of 50; 0: no limit
        out = subprocess.run([SWEEPIT, "summary", str(sweep), *rows], capture_output=True, text=True, check=True).stdout
        assert _table_jobs(out) == list(range(7)) and not out.startswith("the best")
    # a negative count is refused with what to type instead, for every command that takes --rows
    for command in ("summary", "report", "status"):
        bad = subprocess.run([SWEEPIT, command, str(sweep), "--rows", "-2"], capture_output=True, text=True)
        assert bad.returncode == 2 and "--rows: must be a count of rows (0: all), but is '-2'" in bad.stderr, bad.stderr
