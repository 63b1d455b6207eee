"""`sweepit status` against the jobs' own files: it reads a result.json by the report's rule, and it gives a job
that ended without one the follower's grace before recording its death, never replacing a result that came.
Real files and a real `sweepit` process; for a Slurm sweep, `squeue`/`sacct` are small scripts on PATH that
answer as Slurm does for a job that has ended, so no cluster is needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hydra_plugins.sweepit.callbacks import SweepSummary
from sweepit.cli import main as sweepit_main
from sweepit.results import JobState, is_finished
from sweepit.results._job_files import (
    RESULT_FILE,
    RESULT_GRACE_S,
    read_result,
    write_result,
)
from sweepit.results._manifest import JobEntry, Manifest, read_manifest, write_manifest
from sweepit.results._unrecorded import SILENT_S
from sweepit_testing import REPO, SWEEPIT

SLURM_ID, SLURM_NAME = "4242", "sweepit-status-test"
ANY_HYDRA_APP = REPO / "examples" / "any_hydra_app" / "app.py"


def _sweep(tmp_path: Path, launcher: str, state: str, **recorded: float) -> tuple[Path, Path]:
    sweep = tmp_path / "sweep"
    job_dir = sweep / "0_x=1"
    (job_dir / ".hydra").mkdir(parents=True)
    (job_dir / ".hydra" / "overrides.yaml").write_text("- x=1\n")
    extra = {"slurm_job_id": SLURM_ID, "slurm_job_name": SLURM_NAME, **recorded} if launcher == "slurm" else {}
    write_manifest(Manifest(sweep_dir=str(sweep), argv=[sys.executable, "app.py", "-m", "x=1"], cwd=str(tmp_path),
                            launcher=launcher,
                            jobs={0: JobEntry(num=0, overrides=["x=1"], job_dir=str(job_dir), state=state,
                                              extra=extra)}))
    return sweep, job_dir


def _slurm_says_completed(tmp_path: Path, late_result: Path | None) -> dict[str, str]:
    """PATH with an `squeue` that no longer knows the job and an `sacct` that says COMPLETED. With
    `late_result`, the first `sacct` call also has the job's own result.json appear 0.5 s later (as a file another
    node wrote shows up late on a shared file system)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")
    late = ""
    if late_result is not None:
        own = json.dumps({"status": "completed", "objective": 0.5, "written_by": "the job"})
        late = (f"if [ ! -e {tmp_path}/asked ]; then touch {tmp_path}/asked; (sleep 0.5; "
                f"printf '%s' '{own}' > {late_result}.tmp && mv {late_result}.tmp {late_result}) "
                ">/dev/null 2>&1 & fi\n")
    (bin_dir / "sacct").write_text(f"#!/bin/sh\n{late}echo '{SLURM_ID}|COMPLETED|{SLURM_NAME}|0:0|node1'\n")
    for name in ("squeue", "sacct"):
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def _status(sweep: Path, env: dict[str, str]) -> tuple[str, float]:
    t0 = time.monotonic()
    done = subprocess.run([SWEEPIT, "status", str(sweep)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout, time.monotonic() - t0


def _row(table: str) -> tuple[str, str]:
    """Job 0's status and the rest of its row, from a printed table."""
    lines = table.splitlines()
    column = next(line.split() for line in lines if line.startswith("job ")).index("status")
    row = next(line.split() for line in lines if line.startswith("0 "))
    return row[column], " ".join(row[column + 1:])


def test_a_result_that_arrives_late_is_the_jobs_not_a_record_of_its_death(tmp_path: Path) -> None:
    """Before: status recorded the job `failed` at once; the job's own result then replaced that file, and
    sweep.json kept `failed` beside a completed result."""
    sweep, job_dir = _sweep(tmp_path, "slurm", "running")
    out, _ = _status(sweep, _slurm_says_completed(tmp_path, late_result=job_dir / RESULT_FILE))
    assert _row(out)[0] == "completed", out
    assert read_result(job_dir) == {"status": "completed", "objective": 0.5, "written_by": "the job"}
    assert read_manifest(sweep).jobs[0].state == "completed"


def test_a_job_dead_past_the_grace_is_recorded_once(tmp_path: Path) -> None:
    sweep, job_dir = _sweep(tmp_path, "slurm", "running")
    out, took_s = _status(sweep, _slurm_says_completed(tmp_path, late_result=None))
    assert took_s >= RESULT_GRACE_S  # it waited for a late result before writing one
    recorded = read_result(job_dir) or {}
    assert recorded["status"] == "failed" and recorded["recorded_by"] == "sweepit slurm launcher"
    assert recorded["error"] == f"ended (Slurm COMPLETED, job {SLURM_ID}) without writing result.json"
    assert _row(out)[0] == "failed" and read_manifest(sweep).jobs[0].state == "failed"
    assert sorted(p.name for p in job_dir.iterdir()) == [".hydra", RESULT_FILE]  # no temporary file left


def test_status_waits_the_sweeps_own_grace(tmp_path: Path) -> None:
    """hydra.launcher.result_grace_s, recorded with each job at submission: status waits it, not the default."""
    sweep, job_dir = _sweep(tmp_path, "slurm", "running", result_grace_s=RESULT_GRACE_S + 2)
    out, took_s = _status(sweep, _slurm_says_completed(tmp_path, late_result=None))
    assert took_s >= RESULT_GRACE_S + 2
    assert _row(out)[0] == "failed" and (read_result(job_dir) or {})["status"] == "failed"


def test_a_record_of_death_never_replaces_a_result_that_is_there(tmp_path: Path) -> None:
    write_result(tmp_path, {"status": "completed", "objective": 1.0})
    assert write_result(tmp_path, {"status": "failed"}, replace=False) == "completed"  # the status that stands
    assert read_result(tmp_path) == {"status": "completed", "objective": 1.0}
    assert sorted(p.name for p in tmp_path.iterdir()) == [RESULT_FILE]
    (tmp_path / RESULT_FILE).unlink()
    assert write_result(tmp_path, {"status": "failed"}, replace=False) == "failed"
    assert read_result(tmp_path) == {"status": "failed"}


@pytest.mark.parametrize("content", ['{"status": "completed", "objective": 0.9', "[]", ""],
                         ids=["truncated", "not-an-object", "empty"])
def test_status_summary_and_report_read_a_bad_result_alike(tmp_path: Path, content: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Before: a truncated result.json showed `completed` in `sweepit status` (the manifest's last word) and
    `corrupt` in `sweepit report`."""
    sweep, job_dir = _sweep(tmp_path, "local", "completed")
    (job_dir / RESULT_FILE).write_text(content)
    seen = {}
    for command in ("status", "summary", "report"):
        assert sweepit_main([command, str(sweep)]) == 0
        seen[command] = _row(capsys.readouterr().out)
    assert {status for status, _ in seen.values()} == {JobState.CORRUPT}, seen
    assert all("result.json unreadable" in note for _, note in seen.values()), seen
    assert read_manifest(sweep).jobs[0].state == JobState.CORRUPT
    assert not is_finished(job_dir)  # a resume runs it again


def test_summary_and_report_tell_a_started_job_that_recorded_nothing_alike(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A job of a launcher that keeps no sweep.json (Hydra's basic launcher) has its folder and no result.json yet.
    Before: `sweepit summary` said `pending`, `sweepit report` `running`."""
    sweep = tmp_path / "sweep"
    for num in (0, 1):
        (sweep / f"{num}_x={num}" / ".hydra").mkdir(parents=True)
        (sweep / f"{num}_x={num}" / ".hydra" / "overrides.yaml").write_text(f"- x={num}\n")
    write_result(sweep / "1_x=1", {"status": "completed", "objective": 0.5})
    seen = {}
    for command in ("summary", "report"):
        assert sweepit_main([command, str(sweep)]) == 0
        seen[command] = _row(capsys.readouterr().out)[0]
    assert seen == {"summary": JobState.RUNNING, "report": JobState.RUNNING}, seen


@pytest.mark.slow
def test_a_finished_sweep_of_a_launcher_that_keeps_no_record_has_ended_jobs_not_running_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Hydra's basic launcher and a plain app: job folders, no result.json, no sweep.json. Before: summary, ls and
    report said `2 jobs: 2 running` for ever. A folder silent for a while with no process in it has ended; one whose
    file a process holds open (the job's log, as Hydra's job does while it runs) still runs."""
    sweep = tmp_path / "sweep"
    done = subprocess.run([sys.executable, str(ANY_HYDRA_APP), "-m", "x=0,1", "hydra/launcher=basic",
                           f"hydra.sweep.dir={sweep}"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not list(sweep.glob(f"*/{RESULT_FILE}")) and not (sweep / "sweep.json").exists()
    then = time.time() - SILENT_S - 60  # the sweep ended a while ago (what a look later finds)
    for path in [*sweep.rglob("*"), sweep]:
        os.utime(path, (then, then))
    for command, where in (("summary", sweep), ("report", sweep), ("ls", tmp_path)):
        assert sweepit_main([command, str(where)]) == 0
        out = capsys.readouterr().out
        assert "2 jobs: 2 ended" in out and "running" not in out, (command, out)
    (log,) = (sweep / "0_x=0").glob("*.log")
    holder = subprocess.Popen([sys.executable, "-c", f"f = open({str(log)!r}, 'a'); print(flush=True); input()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "\n"  # it holds the log open
        assert sweepit_main(["summary", str(sweep)]) == 0
        out = capsys.readouterr().out
        assert "2 jobs: 1 ended, 1 running" in out and _row(out)[0] == JobState.RUNNING, out
    finally:
        holder.communicate("", timeout=30)


def test_an_ended_sweep_without_its_report_says_how_to_write_it_and_watch_writes_it(tmp_path: Path) -> None:
    """A detached (wait=false) sweep never got its report, and `sweepit status` did not say to run `sweepit report`;
    `sweepit status --watch`, which follows such a sweep to its end as a driver would, now writes it."""
    sweep, job_dir = _sweep(tmp_path, "local", "completed")
    write_result(job_dir, {"status": "completed", "objective": 0.5})
    out, _ = _status(sweep, dict(os.environ))
    assert f"the sweep has ended, without a report since (it ran detached, or was stopped): `sweepit report {sweep}`" \
        in " ".join(out.split())
    watched = subprocess.run([SWEEPIT, "status", str(sweep), "--watch", "0.1"], capture_output=True, text=True,
                             timeout=60)
    assert watched.returncode == 0, watched.stderr
    assert f"sweepit: report in {sweep / 'report' / 'index.html'}" in watched.stdout
    # Its last look says what it does next, not that the sweep is without a report and what to run for one.
    assert "without a report" not in watched.stdout and "sweepit report" not in watched.stdout, watched.stdout
    assert f"the sweep has ended: writing its report into {sweep / 'report'}/" in watched.stdout, watched.stdout
    assert (sweep / "report" / "index.html").is_file()
    again, _ = _status(sweep, dict(os.environ))
    assert "sweepit report" not in again  # the report is there, and newer than the sweep's records


def test_status_into_a_pipe_its_reader_closed_ends_quietly(tmp_path: Path) -> None:
    """`sweepit status DIR | head`: head is gone before all was written. Before: a BrokenPipeError traceback."""
    sweep, job_dir = _sweep(tmp_path, "local", "completed")
    write_result(job_dir, {"status": "completed", "objective": 0.5})
    proc = subprocess.Popen([SWEEPIT, "status", str(sweep)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader stops at once, before sweepit writes its first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == "", err  # as `cat` ends by SIGPIPE: 128 + 13, nothing said


def test_a_report_stays_current_while_slurms_word_on_ended_jobs_is_recorded_and_not_once_a_job_runs_again(
        tmp_path: Path) -> None:
    """Before: `sweepit status` judged the report by the time sweep.json and its journal last changed, and they change
    when it records what Slurm last said of an ended job (its final state, its node): a finished Slurm sweep's
    report, written at its end, was "without a report since" from the first look on."""
    sweep, job_dir = _sweep(tmp_path, "local", "completed")
    write_result(job_dir, {"status": "completed", "objective": 0.5})
    assert sweepit_main(["report", str(sweep)]) == 0
    page = sweep / "report" / "index.html"
    written = page.stat().st_mtime - 60
    os.utime(page, (written, written))  # written at the sweep's end, a while before anyone looks
    m = read_manifest(sweep)
    m.jobs[0].extra.update(slurm_state="COMPLETED", node="node1")  # as `sweepit status` records them after the end
    write_manifest(m, [0])
    out, _ = _status(sweep, dict(os.environ))
    assert "sweepit report" not in out, out
    m.jobs[0].started_at, m.jobs[0].ended_at = "2026-11-26T06:00:00.000+00:00", "2026-11-26T06:00:09.000+00:00"
    write_manifest(m, [0])  # the job ran again since (a resume): the report shows its earlier run
    out, _ = _status(sweep, dict(os.environ))
    assert f"the sweep has ended, without a report since (it ran detached, or was stopped): `sweepit report {sweep}`" \
        in " ".join(out.split())


@pytest.mark.slow
def test_an_app_whose_config_writes_no_report_is_told_so_not_that_it_ran_detached(tmp_path: Path) -> None:
    """examples/any_hydra_app does not add sweepit's summary callback, which writes a sweep's report at its end.
    Before: `sweepit status` said the sweep ran detached or was stopped; it did neither."""
    sweep = tmp_path / "sweep"
    done = subprocess.run([sys.executable, str(ANY_HYDRA_APP), "-m", "x=0,1", f"hydra.sweep.dir={sweep}"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and "2 jobs: 2 completed" in done.stdout, done.stderr[-3000:]
    out, _ = _status(sweep, dict(os.environ))
    assert ("the sweep has ended without a report (its config writes none: sweepit's summary callback is not among "
            f"its hydra.callbacks): `sweepit report {sweep}` writes") in " ".join(out.split()), out
    assert "detached" not in out
    from sweepit.results._reported import SUMMARY_CALLBACK

    assert f"{SweepSummary.__module__}.{SweepSummary.__qualname__}" == SUMMARY_CALLBACK  # the one status looks for
    assert sweepit_main(["report", str(sweep)]) == 0
    again, _ = _status(sweep, dict(os.environ))
    assert "sweepit report" not in again, again


@pytest.mark.parametrize("report", [True, False, None, 0])
def test_whether_a_sweep_ends_with_its_report_is_read_as_the_summary_callback_reads_it(report: object) -> None:
    """One rule for the launcher, the report preload and `sweepit status`: the callback draws when its `report` is
    true (a live DictConfig or the dict of multirun.yaml alike), so null and 0 draw nothing."""
    from omegaconf import OmegaConf

    from sweepit.results import asks_for_report
    from sweepit.results._reported import SUMMARY_CALLBACK

    callbacks = {"summary": {"_target_": SUMMARY_CALLBACK, "report": report}}
    assert asks_for_report(callbacks) is asks_for_report(OmegaConf.create(callbacks)) is bool(report)
    assert SweepSummary(report=report).report == report  # type: ignore[arg-type]  # the value its on_multirun_end tests
    assert asks_for_report({"summary": {"_target_": SUMMARY_CALLBACK}}) and not asks_for_report(None)
