"""Large and unusual sweeps: 1,000 jobs, one parameter over decades, failing sections, a missing directory."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from report_helpers import assert_plot

from sweepit.reporting import Section, SectionBuilder, Sweep, build_report, load_sweep, try_build_report
from sweepit.reporting.plots import MAX_CURVES, _axis, figure
from sweepit.reporting.table import reproduce_command
from synthetic_sweep import write_synthetic_sweep


def test_thousand_jobs_are_reported(tmp_path: Path) -> None:
    write_synthetic_sweep(tmp_path / "sweep", n_jobs=1000, n_epochs=10)
    out = build_report(tmp_path / "sweep")
    with open(out / "results.csv") as f:
        assert sum(1 for _ in csv.DictReader(f)) == 1000
    assert_plot(out / "learning_curves.png")
    assert_plot(out / "objective_by_param.png")  # three swept parameters: one panel each
    assert f"the best {MAX_CURVES} of 1000 jobs are drawn" in (out / "summary.md").read_text()
    page = (out / "index.html").read_text()
    assert page.count("<tr") - page.count('<tr class="note-row">') == 1001  # a job's note is a row under its own


def test_one_parameter_sweep_plots_objective_and_epoch_time(tmp_path: Path) -> None:
    sizes = ["32", "64", "128", "256", "512", "1024", "2048", "4096", "8192"]
    write_synthetic_sweep(tmp_path / "sweep", n_jobs=9, n_epochs=3, grid={"batch_size": sizes})
    out = build_report(tmp_path / "sweep")
    assert_plot(out / "objective_by_param.png")
    assert not (out / "objective_heatmap.png").exists()


@pytest.mark.parametrize(("values", "scale"), [(["32", "8192"], "log"), (["16", "32", "64"], "linear"),
                                               (["adam", "sgd"], "linear")])
def test_x_axis_is_log_when_numbers_span_over_a_decade(values: list[str], scale: str) -> None:
    ax = figure(4, 3).add_subplot()
    _axis(ax, values, numeric=values[0].isdigit())
    assert ax.get_xscale() == scale


def test_study_command_names_config_dir_and_name(tmp_path: Path) -> None:
    """As `make sweep-optimizers` leaves it: Hydra's multirun.yaml names the study file and its directory."""
    write_synthetic_sweep(tmp_path / "sweep", n_jobs=4, n_epochs=2, grid={"lr": ["0.1", "0.01"], "seed": ["0", "1"]},
                          study="optimizers")
    (tmp_path / "sweep" / "multirun.yaml").write_text(
        "hydra:\n  job:\n    config_name: optimizers\n  runtime:\n    cwd: /repo\n    config_sources:\n"
        "    - {path: /repo/conf, provider: main}\n    - {path: /repo/sweeps, provider: command-line}\n"
        "  overrides:\n    task: [epochs=3]\n")
    sweep = load_sweep(tmp_path / "sweep")
    best = sweep.best
    assert best is not None
    command = reproduce_command(sweep, best)
    assert command.startswith("python train.py --config-dir sweeps --config-name optimizers lr=")
    assert sweep.study == "optimizers"  # from the jobs' config
    assert "# Sweep `optimizers`" in (build_report(tmp_path / "sweep") / "summary.md").read_text()


class _Broken(SectionBuilder):
    title = "Broken"

    def build(self, sweep: Sweep, out_dir: Path) -> Section | None:
        raise ZeroDivisionError("no plot today")


def test_a_failing_section_becomes_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_synthetic_sweep(tmp_path / "sweep", n_jobs=2, n_epochs=2)
    out = build_report(tmp_path / "sweep", builders=[_Broken()])
    assert "not drawn: ZeroDivisionError: no plot today" in (out / "index.html").read_text()
    assert "warning: report section 'Broken' not drawn" in capsys.readouterr().err


def test_try_build_report_never_raises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert try_build_report(tmp_path / "missing") is None
    assert "warning: no report written" in capsys.readouterr().err
    write_synthetic_sweep(tmp_path / "sweep", n_jobs=2, n_epochs=2)
    assert try_build_report(tmp_path / "sweep") == tmp_path / "sweep" / "report"
    assert "report in" in capsys.readouterr().out


def test_many_curves_are_coloured_by_a_swept_parameter_with_few_values(tmp_path: Path) -> None:
    from sweepit.reporting.plots import colour_key

    grid = {"optimizer": ["sgd", "adam", "rmsprop"], "lr": [str(10 ** -k) for k in range(1, 5)], "seed": ["0", "1"]}
    write_synthetic_sweep(tmp_path / "sweep", n_jobs=24, n_epochs=3, grid=grid)
    sweep = load_sweep(tmp_path / "sweep")
    assert colour_key(sweep, sweep.jobs) == ("optimizer", ["sgd", "adam", "rmsprop"])  # categories first
    out = build_report(tmp_path / "sweep")
    assert_plot(out / "learning_curves.png")
    seeds = {"seed": [str(s) for s in range(30)]}  # no parameter with 2 to 10 values: coloured by objective
    write_synthetic_sweep(tmp_path / "seeds", n_jobs=30, n_epochs=3, grid=seeds)
    only_seeds = load_sweep(tmp_path / "seeds")
    assert colour_key(only_seeds, only_seeds.jobs) is None


def test_a_sweep_beyond_the_metrics_threshold_reads_only_the_metrics_it_needs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above READ_ALL_METRICS_UP_TO jobs: metrics.jsonl of the drawn (best) jobs and of jobs whose result lacks
    final metrics or the mean epoch time, no other; the pages list the best MAX_PAGE_ROWS rows, the CSV all."""
    import sweepit.reporting._report_data as sweep_module
    import sweepit.reporting.table as table_module

    monkeypatch.setattr(sweep_module, "READ_ALL_METRICS_UP_TO", 10)
    monkeypatch.setattr(sweep_module, "METRICS_DRAWN", 3)
    monkeypatch.setattr(table_module, "MAX_PAGE_ROWS", 5)
    write_synthetic_sweep(tmp_path / "sweep", n_jobs=24, n_epochs=4, seed=3)
    sweep = load_sweep(tmp_path / "sweep")
    with_epochs = {j.num for j in sweep.jobs if j.epochs}
    best = sorted((j for j in sweep.jobs if j.objective is not None), key=lambda j: -(j.objective or 0.0))[:3]
    unsettled = {j.num for j in sweep.jobs if not j.final}
    assert with_epochs == {j.num for j in best} | unsettled
    assert all(j.epoch_time_s is not None for j in sweep.jobs if j.final)  # from result.json's epoch_time_s_mean
    out = build_report(tmp_path / "sweep")
    with open(out / "results.csv") as f:
        assert sum(1 for _ in csv.DictReader(f)) == 24
    page = (out / "index.html").read_text()
    assert page.count("<tr") == 6 and "The best 5 of 24 jobs by objective (maximize)" in page
    assert "The best 5 of 24 jobs" in (out / "summary.md").read_text()
    assert_plot(out / "learning_curves.png")
