"""What the plots must show: a legend wholly inside the figure however long the swept values, a job of one epoch
(pruned after its first) as a dot, Optuna's log axes with labels that do not overlap, no matplotlib INFO lines, and
accuracies on a linear colour scale."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import optuna
import pytest

from sweepit.reporting import load_sweep, write_report
from sweepit.reporting.optuna_section import _log_axis_labels, slice_plot
from sweepit.reporting.plots import Palette, draw_lines, figure, log_scale
from sweepit_testing import TINY, run_train
from synthetic_sweep import write_synthetic_sweep

LONG = {"optimizer": ["adam", "sgd"], "lr": ["0.014979790991763152", "0.0012367478733290436"],
        "model.hidden": ["128", "256"]}  # three swept keys, Optuna's 17-digit floats


def test_the_legend_of_long_overrides_is_inside_the_figure_and_the_axes_make_room(tmp_path: Path) -> None:
    write_synthetic_sweep(tmp_path / "sweep", n_jobs=8, n_epochs=3, grid=LONG)
    sweep = load_sweep(tmp_path / "sweep")
    fig = figure(12, 4, constrained=False)
    ax = fig.add_subplot()
    palette = Palette(sweep, sweep.jobs)
    draw_lines(ax, sweep.jobs, "val_acc", palette, sweep.best)
    palette.finish(fig, [ax], sweep, sweep.jobs)
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    box = fig.legends[0].get_window_extent(renderer)
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width, (box, fig.bbox)  # it ran off the right edge
    assert ax.get_window_extent(renderer).x1 < box.x0  # the axes end before it begins
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "0: optimizer=adam lr=0.01498 model.hidden=128" in labels  # numbers shortened, jobs told apart


def test_a_job_of_one_epoch_is_a_dot(tmp_path: Path) -> None:
    """A trial pruned after its first epoch was a line of one point: nothing was drawn."""
    dirs = write_synthetic_sweep(tmp_path / "sweep", n_jobs=3, n_epochs=3, grid={"lr": ["0.1", "0.01", "0.001"]})
    rows = [json.loads(line) for line in (dirs[2] / "metrics.jsonl").read_text().splitlines()]
    (dirs[2] / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    sweep = load_sweep(tmp_path / "sweep")
    ax = figure(6, 4).add_subplot()
    assert draw_lines(ax, sweep.jobs, "val_acc", Palette(sweep, sweep.jobs), sweep.best)
    dots = [c for c in ax.collections if type(c).__name__ == "PathCollection"]
    assert len(dots) == 1 and dots[0].get_offsets().tolist() == [[1.0, rows[0]["val_acc"]]]


@pytest.mark.parametrize(("limits", "minor_labels"), [((1e-3, 3e-2), False), ((2e-3, 8e-3), True)],
                         ids=["two-decades", "within-one-decade"])
def test_a_narrow_log_axis_has_no_overlapping_labels(limits: tuple[float, float], minor_labels: bool) -> None:
    from matplotlib.ticker import NullFormatter

    ax = figure(3, 3).add_subplot()
    ax.set_xscale("log")
    ax.set_xlim(*limits)
    _log_axis_labels(ax)
    assert isinstance(ax.xaxis.get_minor_formatter(), NullFormatter) is not minor_labels
    if minor_labels:  # no decade label to read: the minor ones stay, tilted
        ax.figure.canvas.draw()
        assert {round(t.get_rotation()) for t in ax.get_xticklabels(minor=True) if t.get_text()} == {40}


def test_optunas_plots_of_numeric_choices_log_no_matplotlib_info(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Two `Using categorical units ...` lines printed at the end of every such Optuna sweep (and matplotlib's font
    cache line at the first report on a machine)."""
    write_synthetic_sweep(tmp_path / "sweep", n_jobs=2, n_epochs=2, grid={"lr": ["0.1", "0.01"]})
    write_report(load_sweep(tmp_path / "sweep"))  # what a sweep's end does, which quietens matplotlib's logger
    study = optuna.create_study(direction="maximize")
    for width, lr, value in ((8, 1e-3, 0.5), (16, 3e-2, 0.7), (8, 5e-3, 0.6)):
        study.enqueue_trial({"width": width, "lr": lr})
        study.optimize(lambda t, v=value: v + 0 * t.suggest_categorical("width", [8, 16])
                       + 0 * t.suggest_float("lr", 1e-4, 1e-1, log=True), n_trials=1)
    with caplog.at_level(logging.INFO):
        slice_plot(study, "val_acc", tmp_path / "slice.png")
    assert [r.getMessage() for r in caplog.records if r.name.startswith("matplotlib")] == []
    assert (tmp_path / "slice.png").stat().st_size > 5000


@pytest.mark.slow
def test_the_heatmap_of_accuracies_is_linear_and_tells_the_best_cells_apart(tmp_path: Path) -> None:
    """Accuracies from 0.07 to 0.85 span more than a decade: the heatmap took a log colour scale, on which the best
    cells share one yellow. Each cell of the real report's PNG must have the colour of its value on a linear scale."""
    import matplotlib
    from matplotlib.image import imread

    sweep = tmp_path / "sweep"
    done = run_train(["-m", "optimizer=adam,sgd", "lr=0.1,0.0001", *TINY, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    write_report(load_sweep(sweep))
    accuracies = [json.loads(p.read_text())["objective"] for p in sweep.glob("*/result.json")]
    lo, hi = min(accuracies), max(accuracies)
    assert len(accuracies) == 4 and hi / lo > 10, accuracies  # what made it log
    pixels = imread(sweep / "report" / "objective_heatmap.png")[:, :, :3]
    viridis, linear = matplotlib.colormaps["viridis"], matplotlib.colors.Normalize(lo, hi)
    for value in accuracies:
        colour = np.array(viridis(linear(value))[:3])
        area = np.count_nonzero(np.abs(pixels - colour).max(axis=2) < 2 / 255)
        assert area > 5000, f"val_acc {value}: {area} pixels of its colour on a linear scale"
    # A loss over decades keeps its log scale.
    assert log_scale("val_loss", 0.01, 2.3) and not log_scale("val_acc", lo, hi)
