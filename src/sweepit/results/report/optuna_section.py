"""The Optuna report section: optimization history, parameter importances, parallel coordinates (PNG),
best parameters as YAML with the command that reproduces them, and the trials table (CSV).

Applies to sweeps run by the Optuna sweeper (their directory holds `optuna_study.yaml`). The plots are
drawn with matplotlib's object API like the other sections; importances use Optuna's PED-ANOVA evaluator,
which needs no extra package.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from sweepit.results._study_file import read_study_file
from sweepit.results.report import plots
from sweepit.results.report._sweep import Sweep
from sweepit.results.report.sections import Figure, Section, SectionBuilder
from sweepit.results.report.table import Table
from sweepit.search._results import (
    BEST_FILE,
    TRIALS_FILE,
    best_command,
    best_trial,
    load_study_of,
    trials_table,
    write_results,
)

_STATE_COLORS = {"COMPLETE": "tab:blue", "PRUNED": "tab:orange", "FAIL": "tab:red", "RUNNING": "tab:grey"}


def _complete(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.value is not None and math.isfinite(t.value)]


def history_plot(study: Any, metric: str, path: Path) -> None:
    """Each trial's value (pruned ones at their last reported epoch) and the best so far."""
    maximize = study.direction.name == "MAXIMIZE"
    fig = plots.figure(7, 3.8)
    ax = fig.subplots()
    for state, color in _STATE_COLORS.items():
        pts = [(t.number, t.value if t.value is not None else _last(t)) for t in study.get_trials(deepcopy=False)
               if t.state.name == state]
        kept = [(n, float(v)) for n, v in pts if v is not None and math.isfinite(v)]
        if kept:
            ax.scatter([n for n, _ in kept], [v for _, v in kept], s=18, color=color, label=state.lower(), zorder=3)
    done = sorted(_complete(study), key=lambda t: t.number)
    if done:
        best = np.maximum.accumulate if maximize else np.minimum.accumulate
        ax.step([t.number for t in done], best(np.array([t.value for t in done])), where="post", color="red",
                label="best so far")
    ax.set(xlabel="trial", ylabel=metric, title="Optimization history")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    plots.save(fig, path)


def _last(trial: Any) -> float | None:
    if not trial.intermediate_values:
        return None
    return float(trial.intermediate_values[max(trial.intermediate_values)])


def importance_plot(study: Any, path: Path) -> dict[str, float]:
    """PED-ANOVA importances of the parameters (needs a few complete trials)."""
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        importances = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator())
    names = list(importances)[::-1]
    fig = plots.figure(6, 0.6 + 0.45 * max(2, len(names)))
    ax = fig.subplots()
    ax.barh(names, [importances[n] for n in names], color="tab:blue")
    ax.set(xlabel="importance (PED-ANOVA, normalized)", title="Parameter importances")
    ax.grid(alpha=0.3, axis="x")
    plots.save(fig, path)
    return dict(importances)


def parallel_plot(study: Any, metric: str, path: Path) -> None:
    """One polyline per complete trial across one axis per parameter and the objective; log axes in log10."""
    import matplotlib

    trials = _complete(study)
    if not trials:
        raise ValueError("no complete trial to draw")
    names = sorted({n for t in trials for n in t.params})
    columns: list[tuple[str, list[float], list[str] | None]] = []
    for name in names:
        dist = next(t.distributions[name] for t in trials if name in t.distributions)
        if hasattr(dist, "choices"):
            labels = [str(c) for c in dist.choices]
            columns.append((name, [float(dist.choices.index(t.params[name])) if name in t.params else math.nan
                                   for t in trials], list(labels)))
        else:
            log = bool(getattr(dist, "log", False))
            values = [float(t.params.get(name, math.nan)) for t in trials]
            columns.append((f"log10 {name}" if log else name, [math.log10(v) if log else v for v in values], None))
    columns.append((metric, [float(t.value) for t in trials], None))
    data = np.array([c[1] for c in columns], dtype=float)
    lo, hi = np.nanmin(data, axis=1, keepdims=True), np.nanmax(data, axis=1, keepdims=True)
    scaled = (data - lo) / np.where(hi > lo, hi - lo, 1.0)
    fig = plots.figure(2.0 + 1.6 * len(columns), 4.2)
    ax = fig.subplots()
    maximize = study.direction.name == "MAXIMIZE"
    cmap = matplotlib.colormaps["viridis" if maximize else "viridis_r"]
    values = data[-1]
    norm = matplotlib.colors.Normalize(float(np.nanmin(values)), float(np.nanmax(values)))
    x = np.arange(len(columns))
    for i in np.argsort(values if maximize else -values):  # best drawn last, on top
        ax.plot(x, scaled[:, i], color=cmap(norm(values[i])), alpha=0.8, linewidth=1.2)
    for j, (_, _, axis_labels) in enumerate(columns):
        ax.axvline(j, color="black", linewidth=0.8)
        if axis_labels is not None:
            span = (hi[j, 0] - lo[j, 0]) or 1.0
            for k, label in enumerate(axis_labels):
                ax.text(j + 0.03, (k - lo[j, 0]) / span, label, fontsize="small", va="center")
        else:
            ax.text(j + 0.03, 0, f"{lo[j, 0]:.3g}", fontsize="small", va="bottom")
            ax.text(j + 0.03, 1, f"{hi[j, 0]:.3g}", fontsize="small", va="top")
    ax.set_xticks(x, [c[0] for c in columns])
    ax.set_yticks([])
    ax.set(title=f"Parallel coordinates ({len(trials)} complete trials, coloured by {metric})")
    fig.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=metric, shrink=0.8)
    plots.save(fig, path)


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
    """Complete trials by their first two objectives, the front joined in red."""
    from optuna.trial import TrialState

    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.values]
    if not done:
        raise ValueError("no trial completed yet")
    front = sorted(study.best_trials, key=lambda t: t.values[0])
    fig = plots.figure(6, 4.2)
    ax = fig.subplots()
    ax.scatter([t.values[0] for t in done], [t.values[1] for t in done], s=18, color="tab:blue", label="trial")
    ax.plot([t.values[0] for t in front], [t.values[1] for t in front], "o-", color="red", label="Pareto front")
    for t in front:
        ax.annotate(str(t.number), (t.values[0], t.values[1]), fontsize="small", xytext=(3, 3),
                    textcoords="offset points")
    directions = [d.name.lower() for d in study.directions]
    ax.set(xlabel=f"{names[0]} ({directions[0]})", ylabel=f"{names[1]} ({directions[1]})", title="Pareto front")
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    plots.save(fig, path)


class OptunaSection(SectionBuilder):
    title = "Optuna search"

    def build(self, sweep: Sweep, out_dir: Path) -> Section | None:
        info = read_study_file(sweep.sweep_dir)
        if info is None:
            return None
        study = load_study_of(sweep.sweep_dir)
        metric = str(info.get("metric") or sweep.metric)
        write_results(sweep.sweep_dir, study, info, out_dir)
        counts: dict[str, int] = {}
        for t in study.get_trials(deepcopy=False):
            counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
        text = [f"study {study.study_name!r} in {info['storage']}: " + ", ".join(f"{n} {s}" for s, n in counts.items())
                + f"; sampler {_name(info.get('sampler'))}, pruner {_name(info.get('pruner'))}.",
                "Space: " + ", ".join(f"{k}={v}" for k, v in (info.get("space") or {}).items()),
                f"Best parameters: {BEST_FILE}; every trial: {TRIALS_FILE}. Diverged trials are told to Optuna "
                "as FAIL (unless hydra.sweeper.diverged_value is set); pruned ones as PRUNED."]
        best = best_trial(study)
        command = ""
        if best is not None:
            text.insert(1, f"best {metric}: {best.value:.4g} (trial {best.number}): "
                        + " ".join(f"{k}={v}" for k, v in best.params.items()))
            command = best_command(info, best)
        figures, notes = [], []
        drawers = [
            ("optuna_history.png", "each trial's value and the best so far",
             lambda p: history_plot(study, metric, p)),
            ("optuna_importances.png", "how much each parameter explains the objective (PED-ANOVA)",
             lambda p: importance_plot(study, p)),
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
                      best=None if best is None else next((i for i, r in enumerate(rows) if r[0] == best.number), None),
                      statuses=[str(r[2] or r[1]).lower() for r in rows])
        return Section(self.title, text=text, command=command, table=table, figures=figures, notes=notes)


def _name(spec: Any) -> str:
    """A sampler's or pruner's name as recorded: `{name: tpe}` (older studies) or `{_target_: ...TPESampler}`."""
    if not isinstance(spec, dict):
        return "-"
    return str(spec.get("name") or str(spec.get("_target_", "-")).rsplit(".", 1)[-1])
