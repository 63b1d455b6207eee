"""The report's section of a sweep whose directory holds `optuna_study.yaml`: `optuna.visualization.matplotlib`'s
plots as PNG, the best parameters with the command that reproduces them, and the trials table."""

from __future__ import annotations

import math
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from sweepit.reporting._report_data import Sweep
from sweepit.reporting.sections import Figure, Section, SectionBuilder
from sweepit.reporting.table import Table
from sweepit.results import (
    SweepPaths,
    counts_text,
    default_direction_line,
    objective_direction,
    read_study_file,
)
from sweepit.search import best_command, best_trial, load_study_of, trials_table, write_results


def _complete(study: Any, n: int = 1) -> list[Any]:
    """The complete trials with a finite value; ValueError when there are fewer than `n`."""
    from optuna.trial import TrialState

    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.value is not None and math.isfinite(t.value)]
    if len(done) < n:
        raise ValueError(f"needs {n} complete trial(s)")
    return done


def _optuna_figure(draw: Any, path: Path, width_in: float, height_in: float) -> None:
    """Run one of optuna.visualization.matplotlib's plots on the Agg canvas, save its figure as PNG, close it.
    Their plots use pyplot's figures: each is closed once saved, so a report of many sweeps holds none."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a cluster; the driver draws nothing else through pyplot
    import matplotlib.pyplot as plt
    from optuna.exceptions import ExperimentalWarning

    # Optuna's plots switch pyplot to its ggplot style: rc_context puts every setting back afterwards, so the
    # report's other figures (and other reports in this process) keep theirs.
    with warnings.catch_warnings(), matplotlib.rc_context():
        warnings.simplefilter("ignore", ExperimentalWarning)
        warnings.simplefilter("ignore", UserWarning)  # "no trial to plot" kinds: the caller checks first
        axes = draw()
        first = axes.flat[0] if isinstance(axes, np.ndarray) else axes
        fig = first.figure
        try:
            for ax in fig.axes:
                _log_axis_labels(ax)
            fig.set_size_inches(width_in, height_in)
            fig.savefig(path, format="png", dpi=100, bbox_inches="tight")  # legends inside the saved image
        finally:
            plt.close(fig)


def _log_axis_labels(ax: Any) -> None:
    """A log axis spanning less than a few decades gets its minor ticks labelled (`2x10^-3`, `3x10^-3`, ...), which
    overlap in a narrow panel (the slice plot's lr): when two labelled decades are in view those labels go, else
    they are tilted."""
    from matplotlib.ticker import NullFormatter

    for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        if axis.get_scale() != "log":
            continue
        lo, hi = min(limits), max(limits)
        if sum(lo <= t <= hi for t in axis.get_majorticklocs()) >= 2:
            axis.set_minor_formatter(NullFormatter())
        elif axis is ax.xaxis:
            ax.tick_params(axis="x", which="both", labelrotation=40, labelsize="small")


def history_plot(study: Any, metric: str, path: Path) -> None:
    """Optuna's optimization history, with pruned trials added at their last reported value (Optuna draws
    complete trials only)."""
    from optuna.visualization.matplotlib import plot_optimization_history

    def draw() -> Any:
        ax = plot_optimization_history(study, target_name=metric)
        pruned = [(t.number, float(t.intermediate_values[max(t.intermediate_values)]))
                  for t in study.get_trials(deepcopy=False) if t.state.name == "PRUNED" and t.intermediate_values]
        kept = [(n, v) for n, v in pruned if math.isfinite(v)]
        if kept:
            ax.scatter([n for n, _ in kept], [v for _, v in kept], s=18, marker="x", color="tab:orange",
                       label="pruned (last reported value)", zorder=3)
            ax.legend(fontsize="small")
        return ax

    _complete(study)
    _optuna_figure(draw, path, 7, 4)


def intermediate_plot(study: Any, path: Path) -> None:
    from optuna.visualization.matplotlib import plot_intermediate_values

    if not any(t.intermediate_values for t in study.get_trials(deepcopy=False)):
        raise ValueError("no trial reported intermediate values")
    _optuna_figure(lambda: plot_intermediate_values(study), path, 7, 4)


def slice_plot(study: Any, metric: str, path: Path) -> None:
    from optuna.visualization.matplotlib import plot_slice

    n = len({k for t in _complete(study) for k in t.params})
    _optuna_figure(lambda: plot_slice(study, target_name=metric), path, 3.2 * max(1, n) + 1, 3.6)


def contour_plot(study: Any, metric: str, importances: dict[str, float], path: Path) -> None:
    import importlib.util

    from optuna.visualization.matplotlib import plot_contour

    if importlib.util.find_spec("scipy") is None:
        raise ValueError("Optuna's contour plot interpolates with scipy, which is not installed: "
                         "pip install -e '.[search]' (or pip install scipy)")
    params = list(importances)[:2] or sorted({k for t in _complete(study, 0) for k in t.params})[:2]
    if len(params) < 2:
        raise ValueError("needs two parameters")
    _complete(study, 2)
    _optuna_figure(lambda: plot_contour(study, params=params, target_name=metric), path, 6, 5)


def importance_plot(study: Any, path: Path) -> dict[str, float]:
    """PED-ANOVA importances of the parameters (no extra package; needs a few complete trials)."""
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances
    from optuna.visualization.matplotlib import plot_param_importances

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        importances = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator())
    _optuna_figure(lambda: plot_param_importances(study, evaluator=PedAnovaImportanceEvaluator()), path,
                   6, 0.8 + 0.45 * max(2, len(importances)))
    return dict(importances)


def parallel_plot(study: Any, metric: str, path: Path) -> None:
    from optuna.visualization.matplotlib import plot_parallel_coordinate

    n = len({k for t in _complete(study) for k in t.params})
    _optuna_figure(lambda: plot_parallel_coordinate(study, target_name=metric), path, 2.0 + 1.6 * (n + 1), 4.2)


def pareto_text(study: Any, names: list[str]) -> list[str]:
    directions = [d.name.lower() for d in study.directions]
    front = sorted(study.best_trials, key=lambda t: t.number)
    lines = [f"Pareto front ({', '.join(f'{d} {n}' for d, n in zip(directions, names, strict=False))}): "
             f"{len(front)} trial(s)."]
    for t in front:
        values = ", ".join(f"{n}={v:.4g}" for n, v in zip(names, t.values, strict=False))
        lines.append(f"trial {t.number} (job {t.user_attrs.get('job_num')}): {values}; "
                     + " ".join(f"{k}={v}" for k, v in t.params.items()))
    return lines


def pareto_plot(study: Any, names: list[str], path: Path) -> None:
    """The Pareto front of the first two objectives (Optuna's plot takes two or three)."""
    from optuna.trial import TrialState
    from optuna.visualization.matplotlib import plot_pareto_front

    if not [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.values]:
        raise ValueError("no trial completed yet")
    targets = None if len(study.directions) in (2, 3) else (lambda t: (t.values[0], t.values[1]))
    _optuna_figure(lambda: plot_pareto_front(study, target_names=names[:2] if targets else names,
                                             targets=targets), path, 6, 4.5)


class OptunaSection(SectionBuilder):
    title = "Optuna search"

    def build(self, sweep: Sweep, out_dir: Path) -> Section | None:
        info = read_study_file(sweep.sweep_dir)
        if info is None:
            return None
        study = load_study_of(sweep.sweep_dir)
        metric = str(info.get("metric") or sweep.metric)
        write_results(sweep.sweep_dir, study, info, out_dir)
        counts = Counter(t.state.name.lower() for t in study.get_trials(deepcopy=False))
        text = [f"study {study.study_name!r} in {info['storage']}: {counts_text(counts)}"
                + f"; sampler {_name(info.get('sampler'))}, pruner {_name(info.get('pruner'))}.",
                "Space: " + ", ".join(f"{k}={v}" for k, v in (info.get("space") or {}).items()),
                f"Best parameters: {SweepPaths.best_params}; every trial: {SweepPaths.trials}. Diverged trials are "
                "told to Optuna as FAIL (unless hydra.sweeper.diverged_value is set); pruned ones as PRUNED."]
        best = best_trial(study)
        command = ""
        if best is not None:
            text[1:1] = [f"best ({objective_direction(info.get('direction'))} {metric}): {best.value:.4g} "
                         f"(trial {best.number}): " + " ".join(f"{k}={v}" for k, v in best.params.items()),
                         *([default_direction_line(metric)] if info.get("direction_set") is False else [])]
            command = best_command(info, best)
        figures, notes = [], []
        importances: dict[str, float] = {}

        def importance(p: Path) -> None:
            importances.update(importance_plot(study, p))

        drawers = [
            ("optuna_history.png", "each trial's value and the best so far; pruned trials at their last report",
             lambda p: history_plot(study, metric, p)),
            ("optuna_intermediate.png", "each trial's value per epoch: pruned trials stop early",
             lambda p: intermediate_plot(study, p)),
            ("optuna_slice.png", "the objective against each parameter (numeric axes, log where sampled so)",
             lambda p: slice_plot(study, metric, p)),
            ("optuna_importances.png", "how much each parameter explains the objective (PED-ANOVA)", importance),
            ("optuna_contour.png", "the objective over the two most important parameters",
             lambda p: contour_plot(study, metric, importances, p)),
            ("optuna_parallel.png", "complete trials across the parameters, coloured by the objective",
             lambda p: parallel_plot(study, metric, p)),
        ]
        if len(study.directions) > 1:  # several objectives: the Pareto front instead of a single best
            names = list(info.get("metrics") or []) or [f"value {i}" for i in range(len(study.directions))]
            text[1:1] = pareto_text(study, names)
            drawers = [("optuna_pareto.png", "complete trials by their first two objectives; the Pareto front in red",
                        lambda p: pareto_plot(study, names, p))]
        for name, caption, draw in drawers:
            try:
                draw(out_dir / name)
                figures.append(Figure(out_dir / name, caption))
            except Exception as e:  # too few trials for importances, nothing complete yet, ...
                notes.append(f"{name} not drawn: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
        columns, rows = trials_table(study)
        keep = [i for i, c in enumerate(columns) if c not in ("job_dir", "datetime_start", "datetime_complete")]
        table = Table([columns[i] for i in keep], [[r[i] for i in keep] for r in rows],
                      best=None if best is None else next((i for i, r in enumerate(rows) if r[0] == best.number), None))
        return Section(self.title, text=text, command=command, table=table, figures=figures, notes=notes)


def _name(spec: Any) -> str:
    """The class name of a sampler or pruner as the study recorded it (`{_target_: ...TPESampler}`)."""
    return str(spec.get("_target_", "-")).rsplit(".", 1)[-1] if isinstance(spec, dict) else "-"
