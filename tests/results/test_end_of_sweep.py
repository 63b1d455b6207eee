"""What the end of a sweep prints (`summarize`, also `sweepit summary`): every job sweep.json lists, those without a
directory too, and the best job as it was typed, with the command that trains it again. Real files."""

from __future__ import annotations

import csv
import json
import os
import shlex
import shutil
import subprocess
import sys
from html import escape
from pathlib import Path

import pytest
import yaml

from sweepit.cli import main
from sweepit.reporting import format_listing, load_sweep
from sweepit.reporting.table import best_lines
from sweepit.results._job_files import ERROR_LINE_CHARS, read_record, write_result
from sweepit.results._manifest import JobEntry, Manifest, iter_manifest, read_manifest, write_manifest
from sweepit.results._overrides import short_value
from sweepit.results._paths import SweepPaths
from sweepit.results._records import job_dict
from sweepit.results._summary import collect, summarize
from sweepit_testing import REPO, TINY, run_train


def _job(sweep: Path, num: int, overrides: list[str], result: dict[str, object] | None) -> str:
    job = sweep / f"{num}_{','.join(sorted(o.lstrip('+~') for o in overrides))}"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if result is not None:
        write_result(job, {"metric": "val_acc", "direction": "maximize", **result})
    return str(job)


def test_the_best_line_keeps_the_overrides_as_typed_and_the_command_reproduces_the_job(tmp_path: Path) -> None:
    """`+model.hidden=64` lost its `+` (it could not be pasted); the command was only in report/summary.md."""
    sweep = tmp_path / "sweep"
    typed = [["+model.hidden=32", "lr=0.1", "epochs=2"], ["+model.hidden=64", "lr=0.1", "epochs=2"]]
    for num, (overrides, acc) in enumerate(zip(typed, (0.8, 0.9), strict=True)):
        _job(sweep, num, overrides, {"status": "completed", "objective": acc})
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"job": {"config_name": "stripes"}, "runtime": {
        "cwd": str(tmp_path), "config_sources": [{"path": str(tmp_path / "conf"), "provider": "command-line"}]}}}))
    write_manifest(Manifest(sweep_dir=str(sweep), argv=[sys.executable, str(tmp_path / "app.py"), "-m"],
                            cwd=str(tmp_path), launcher="local"))
    text = summarize(sweep)
    assert "best (maximize val_acc): job 1 = 0.9  [+model.hidden=64 lr=0.1 epochs=2]" in text
    reproduce = next(line for line in text.splitlines() if line.startswith("reproduce: "))
    assert shlex.split(reproduce.removeprefix("reproduce: ")) == [
        "python", "app.py", "--config-dir", "conf", "--config-name", "stripes", "lr=0.1", "epochs=2",
        "+model.hidden=64"]  # what every job shares first, then the swept value
    report = load_sweep(sweep)  # `sweepit report` and `sweepit ls` say the same
    assert best_lines(report) == ["best (maximize val_acc): job 1 = 0.9  [+model.hidden=64]", reproduce]
    assert format_listing([report]).splitlines()[1].endswith("val_acc=0.9  +model.hidden=64")


def test_a_best_in_the_default_direction_says_so_in_every_reader_and_a_chosen_one_does_not(tmp_path: Path) -> None:
    """Records of an app whose config sets no `direction` (nor `metric`): the lowest return value is "best", and the
    end of the sweep, `sweepit summary`/report, `sweepit ls` and an Optuna study's record say that it is the default
    and which key changes it. A direction chosen by the config or by the Optuna sweeper adds nothing."""
    sweep = tmp_path / "sweep"
    for num, acc in enumerate((0.9, 0.5)):
        job = Path(_job(sweep, num, [f"lr={num}"], None))
        write_result(job, {"status": "completed", "objective": acc})
    warning = "warning: minimize is sweepit's default, as the config sets no `direction`: the lowest objective is"
    lines = summarize(sweep).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("best (minimize objective): job 1 = 0.5"))
    assert lines[at + 1].startswith(warning) and "Add `direction: maximize`" in lines[at + 1]
    report = load_sweep(sweep)
    assert best_lines(report)[1].startswith(warning)
    assert format_listing([report]).splitlines()[-1].startswith("*: minimize is sweepit's default")
    study = {"storage": "optuna.journal", "study_name": "sweepit", "direction": "minimize"}
    for direction_set, warned in ((False, True), (True, False)):
        (sweep / "optuna_study.yaml").write_text(yaml.safe_dump({**study, "direction_set": direction_set}))
        assert (warning in summarize(sweep)) is warned
        assert (warning in "\n".join(best_lines(load_sweep(sweep)))) is warned
    (sweep / "optuna_study.yaml").unlink()
    chosen = tmp_path / "chosen"
    for num, acc in enumerate((0.9, 0.5)):
        _job(chosen, num, [f"lr={num}"], {"status": "completed", "objective": acc})  # the config's maximize
    assert "warning:" not in summarize(chosen) and "*:" not in format_listing([load_sweep(chosen)])


def test_jobs_that_never_started_are_rows_and_counted_as_the_stop_message_counts_them(tmp_path: Path) -> None:
    """After Ctrl-C the table said `4 jobs: 2 completed, 2 interrupted` and the line under it `2 not started (of 6
    jobs launched)`: jobs without a directory were missing from the table."""
    sweep = tmp_path / "sweep"
    states = ["completed", "completed", "interrupted", "interrupted", "not started", "not started"]
    jobs = {}
    for num, state in enumerate(states):
        overrides = [f"lr=0.0{num + 1}"]
        job_dir = str(sweep / f"{num}_lr=0.0{num + 1}")
        if state != "not started":
            job_dir = _job(sweep, num, overrides, {"status": state, "objective": 0.5 + num / 10 if state ==
                                                   "completed" else None})
        jobs[num] = JobEntry(num=num, overrides=overrides, job_dir=job_dir, state=state)
    write_manifest(Manifest(sweep_dir=str(sweep), argv=[sys.executable, "train.py"], cwd=str(tmp_path),
                            launcher="local", jobs=jobs))
    text = summarize(sweep)
    assert "6 jobs: 2 completed, 2 interrupted, 2 not started" in text
    rows = [line.split() for line in text.splitlines()[2:8]]
    assert [row[0] for row in rows] == ["0", "1", "2", "3", "4", "5"]
    assert [row[2:4] for row in rows[4:]] == [["not", "started"], ["not", "started"]]
    capped = summarize(sweep, max_rows=3)  # beyond the limit: the best first, then those without an objective
    assert "the best 3 of 6 jobs" in capped and "6 jobs: 2 completed, 2 interrupted, 2 not started" in capped


def test_sweep_json_read_one_job_at_a_time_equals_it_read_whole(tmp_path: Path) -> None:
    """iter_manifest: the journal's records in their jobs' places, jobs only the journal has in job order."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    m = Manifest(sweep_dir=str(sweep), argv=["python", "app.py"], cwd=str(tmp_path), launcher="local",
                 jobs={n: JobEntry(num=n, overrides=[f"x={n}"], job_dir="") for n in (0, 2, 5)})
    write_manifest(m)
    for n, state in ((2, "running"), (1, "queued"), (7, "queued"), (3, "running"), (0, "completed")):
        m.jobs[n] = JobEntry(num=n, overrides=[f"x={n}"], job_dir="", state=state)
        write_manifest(m, [n])  # appended to sweep.journal
    assert SweepPaths(sweep).journal.read_text().count("\n") > 1, "the test must go through the journal"
    head, jobs = iter_manifest(sweep)
    streamed = list(jobs)
    assert [j["num"] for j in streamed] == [0, 1, 2, 3, 5, 7]
    assert [j["state"] for j in streamed] == ["completed", "queued", "running", "running", "queued", "queued"]
    whole = read_manifest(sweep)
    assert streamed == [job_dict(e) for e in whole.jobs.values()] and head["updated_at"] == whole.updated_at
    assert iter_manifest(tmp_path / "none")[0] == {}


@pytest.mark.slow
def test_the_reproduce_line_runs_as_printed_from_where_the_sweep_ran(tmp_path: Path) -> None:
    """A model of one's own (`PYTHONPATH=mine python train.py -m --config-dir mine/conf ...`) printed `reproduce:
    python train.py ...` without PYTHONPATH (ModuleNotFoundError), and `python` where the sweep ran with a Python
    that is not the shell's (`.venv/bin/python train.py -m ...` without the venv active): run as printed, it failed."""
    shutil.copytree(REPO / "examples" / "config_only", tmp_path / "mine")
    here = os.path.dirname(sys.executable)
    shell = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    shell["PATH"] = os.pathsep.join(p for p in shell.get("PATH", "").split(os.pathsep) if p != here)
    shell |= {"HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": "1"}
    sweep = subprocess.run(
        ["bash", "-c", f"PYTHONPATH=mine {shlex.quote(sys.executable)} {shlex.quote(str(REPO / 'train.py'))} -m "
                       "--config-dir mine/conf --config-name stripes model.width=4,8 epochs=1 data.n_samples=200 "
                       "device=cpu trainer.threads=1"],
        cwd=tmp_path, env=shell, capture_output=True, text=True, timeout=300)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    line = next(x for x in sweep.stdout.splitlines() if x.startswith("reproduce: ")).removeprefix("reproduce: ")
    again = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=shell, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert line.startswith(f"PYTHONPATH=mine {sys.executable} {REPO / 'train.py'} --config-dir mine/conf "
                           "--config-name stripes "), line
    (run,) = (tmp_path / "outputs" / "runs").iterdir()
    result = json.loads((run / "result.json").read_text())
    assert result["status"] == "completed" and result["model"] == "mypkg.nets.StripeNet"
    best = next(x for x in sweep.stdout.splitlines() if x.startswith("best ("))
    width = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())["model"]["width"]
    assert f"[model.width={width} " in best, best  # the best job's configuration, trained again


@pytest.mark.slow
def test_a_failed_jobs_fix_reaches_the_table_the_failure_list_and_the_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`task=mnist` without its files: result.json said "... Fix: run `sweepit data download mnist ...`", but the
    end-of-sweep table's note and failure list were cut just before "Fix:", and the report had no fix at all."""
    root, sweep = tmp_path / "no-mnist", tmp_path / "sweep"
    done = run_train(["-m", "task=mnist", f"data.root={root}", *TINY, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    fix = (f"Fix: run `sweepit data download mnist --root {root}`, or set data.root=<folder with the files>, or "
           "data.synthetic=true to train on generated images.")
    (job,) = [p for p in sweep.iterdir() if p.name.startswith("0_")]
    assert read_record(job).error.endswith(fix)
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("0 ")]  # the table's note
    assert row.endswith(fix), row
    (failure,) = [line for line in done.stderr.splitlines() if line.startswith("  job 0 [")]
    assert failure.endswith(fix), failure
    assert escape(fix, quote=False) in (sweep / "report" / "index.html").read_text()
    assert fix in (sweep / "report" / "summary.md").read_text()
    assert main(["report", str(sweep)]) == 0  # `sweepit report`'s table too
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("0 ")]
    assert row.endswith(fix), row


def test_a_long_error_loses_its_middle_never_its_rule_value_or_fix(tmp_path: Path) -> None:
    """The one shortening of a job's error (error_line): the rule it opens with, the value it ends with before the
    fix, and the fix whole, on whichever line the fix stands."""
    sweep = tmp_path / "sweep"
    files = ", ".join(f"part-{i:03d}.bin" for i in range(60))
    long = f"DataMissingError: the data set needs its 60 files in data.root, but {files} are not in /data/x."
    _job(sweep, 0, ["lr=0.1"], {"status": "failed", "error": f"{long} Fix: run `make data`."})
    _job(sweep, 1, ["lr=0.2"], {"status": "failed", "error": f"{long}\n  (details)\nFix: run `make data`."})
    notes = [job.note for job in collect(sweep)]
    for note in notes:
        assert note.startswith("DataMissingError: the data set needs its 60 files in data.root, but part-000.bin")
        assert note.endswith("are not in /data/x. Fix: run `make data`."), note
        assert " … " in note and len(note) == ERROR_LINE_CHARS


@pytest.mark.slow
def test_swept_floats_print_short_in_tables_and_stay_exact_where_read_back(tmp_path: Path) -> None:
    """Optuna's 17-digit learning rates filled the tables: they print as 4 significant digits, as every number there
    does; results.csv, the best line and the reproduce line keep them exact (pasted, read back)."""
    sweep, rates = tmp_path / "sweep", ("0.014979790991763152", "0.0012367478733290437")  # as repr() writes them
    done = run_train(["-m", "task=linreg", f"lr={','.join(rates)}", "seed=12345678901", *TINY,
                      f"hydra.sweep.dir={sweep}"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line[:2] in ("0 ", "1 ")}
    assert [rows["0"][1], rows["1"][1]] == ["0.01498", "0.001237"], rows
    best = next(line for line in done.stdout.splitlines() if line.startswith("best "))
    assert any(f"lr={rate}" in best for rate in rates), best
    report = sweep / "report"
    with open(report / "results.csv") as f:
        assert sorted(row["lr"] for row in csv.DictReader(f)) == sorted(rates)
    page = (report / "index.html").read_text()
    assert f'title="{rates[0]}">0.01498</td>' in page and ">0.01498 " not in page
    assert "| 0.001237 |" in (report / "summary.md").read_text()
    assert short_value("12345678901") == "12345678901" and short_value("1e-05") == "1e-05"  # integers, short floats
