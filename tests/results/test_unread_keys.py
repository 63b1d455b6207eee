"""A swept key that changes nothing: `python train.py -m lrr=0.01,0.1` is refused by Hydra with "use +lrr=0.01", and
`+lrr=0.01,0.1` then ran two jobs with bit-identical metrics and no word. The end of the sweep, `sweepit summary`,
`sweepit report` and the report's pages say that the key looks unread; a key that changes the metrics, failed jobs
and a sweep of one job are not flagged. Real multiruns and real files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sweepit.reporting import build_report, load_sweep
from sweepit.results._job_files import write_result
from sweepit.results._summary import summarize
from sweepit_testing import TINY, run_train


@pytest.mark.slow
def test_a_plus_key_nothing_reads_is_named_at_the_end_of_the_sweep_and_in_the_report(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", "+lrr=0.01,0.1", "lr=0.01,0.1", *TINY, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = ("lrr looks unread: the 4 jobs that differ only in lrr ended with identical metrics (Hydra lets "
            "`+lrr=...` add a key that nothing reads); did you mean lr?")
    assert said in proc.stdout.splitlines(), proc.stdout
    assert "lr looks unread" not in proc.stdout  # lr is read: its jobs' metrics differ
    report = sweep / "report"
    assert said in (report / "summary.md").read_text()
    assert f"<p>{said}</p>" in (report / "index.html").read_text()


def _job(sweep: Path, num: int, overrides: dict[str, str], status: str, final: dict[str, float] | None) -> None:
    job = sweep / f"{num}_{','.join(f'{k}={v}' for k, v in overrides.items())}"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"{k}={v}" for k, v in overrides.items()]))
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"lr": 0.1, "seed": 0, "optimizer": {"name": "x"},
                                                                "momentum": 0.0}))
    record: dict[str, object] = {"status": status, "metric": "val_acc", "direction": "maximize"}
    if final is not None:
        record |= {"final": final, "objective": final["val_acc"]}
    else:
        record["error"] = "RuntimeError: out of memory"
    write_result(job, record)


def test_only_keys_whose_every_comparable_pair_of_completed_jobs_ended_alike_are_flagged(tmp_path: Path) -> None:
    """`momentum` changes nothing under adam but changes sgd's metrics: read. `seed` changes them: read. Jobs that
    failed alike, or a sweep of one job, show nothing. The clock measures (epoch_time_s) always differ."""
    sweep = tmp_path / "sweep"
    same = {"val_acc": 0.9, "val_loss": 0.3}
    jobs = [  # (overrides, status, final)
        ({"+lrr": "0.01", "seed": "0", "optimizer": "adam", "momentum": "0"}, "completed", same),
        ({"+lrr": "0.1", "seed": "0", "optimizer": "adam", "momentum": "0"}, "completed", same),
        ({"+lrr": "0.01", "seed": "1", "optimizer": "adam", "momentum": "0"}, "completed", {"val_acc": 0.8}),
        ({"+lrr": "0.1", "seed": "1", "optimizer": "adam", "momentum": "0"}, "failed", None),
        ({"+lrr": "0.01", "seed": "0", "optimizer": "adam", "momentum": "0.9"}, "completed", same),
        ({"+lrr": "0.01", "seed": "0", "optimizer": "sgd", "momentum": "0"}, "completed", {"val_acc": 0.7}),
        ({"+lrr": "0.01", "seed": "0", "optimizer": "sgd", "momentum": "0.9"}, "completed", {"val_acc": 0.75}),
    ]
    for num, (overrides, status, final) in enumerate(jobs):
        _job(sweep, num, overrides, status, None if final is None else {**final, "epoch_time_s": 1.0 + num})
    text = summarize(sweep)
    flagged = [line for line in text.splitlines() if "looks unread" in line]
    assert flagged == ["lrr looks unread: the 2 jobs that differ only in lrr ended with identical metrics (Hydra "
                       "lets `+lrr=...` add a key that nothing reads); did you mean lr?"], text
    assert load_sweep(sweep).unread == flagged  # the report's rule is the same one

    failed = tmp_path / "failed"  # jobs that failed alike say nothing of the key that tells them apart
    for num, lr in enumerate(("0.01", "0.1")):
        _job(failed, num, {"+lrr": lr}, "failed", None)
    one = tmp_path / "one"  # one job: nothing to compare
    _job(one, 0, {"+lrr": "0.01"}, "completed", same)
    repeats = tmp_path / "repeats"  # a speed study's repeats train alike on purpose: only their times differ
    for num, repeat in enumerate(("0", "1")):
        _job(repeats, num, {"repeat": repeat, "trainer.gpus": "1"}, "completed", {**same, "epoch_time_s": 1.0 + num})
    for quiet in (failed, one, repeats):
        assert "looks unread" not in summarize(quiet)
        assert "looks unread" not in (build_report(quiet) / "summary.md").read_text()
