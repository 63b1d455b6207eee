"""PNG figures of a sweep, drawn with matplotlib's object API (the Agg canvas, no pyplot state), imported inside the
functions so that `import sweepit.reporting` and `sweepit ls` stay quick. Each returns a note of what was left out."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sweepit._files import atomic_write
from sweepit.reporting._report_data import METRICS_DRAWN, JobReport, Sweep, best_first
from sweepit.reporting.sections import Figure, Section, SectionBuilder
from sweepit.results import JobState, finite_number, read_study_file

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure as MplFigure

# More lines than this are unreadable and slow to draw: the best ones by objective are drawn, and the caption says so.
MAX_CURVES = METRICS_DRAWN
# Points of one scatter plot: more are drawn as an even sample (every k-th job); means are over every job.
MAX_POINTS = 5000
# Cells of a heatmap annotated with their value; larger grids are read from the colour bar.
MAX_ANNOTATED_CELLS = 150
# Colours of the first jobs when few enough to tell apart in a legend; more are coloured by objective.
_FEW = 10


def preload() -> None:
    """The plotting modules a report draws with, imported ahead of it (a driver does it while its jobs run): most of
    a small sweep's report is importing matplotlib."""
    import matplotlib.backends.backend_agg
    import matplotlib.figure  # noqa: F401


def figure(width_in: float, height_in: float, constrained: bool = True) -> MplFigure:
    """A figure on the Agg canvas. Constrained layout fits labels of any length but costs about one extra
    draw; figures whose labels are known (epochs, metric values) lay themselves out for speed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(width_in, height_in), dpi=100, layout="constrained" if constrained else None)
    FigureCanvasAgg(fig)  # a renderer to measure text with (a legend's width), before the figure is saved
    return fig


def save(fig: MplFigure, path: Path) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return atomic_write(path, buffer.getvalue(), fsync=False)


def cap(sweep: Sweep, jobs: list[JobReport], limit: int = MAX_CURVES) -> tuple[list[JobReport], str]:
    """Few jobs in job order (for the legend); many ranked best first, at most `limit` of them."""
    if len(jobs) <= _FEW:
        return jobs, ""
    note = f"the best {limit} of {len(jobs)} jobs are drawn" if len(jobs) > limit else ""
    ranked = best_first(jobs, lambda j: j.objective, sweep.direction)  # then those without one, in job order
    return (ranked + [j for j in jobs if finite_number(j.objective) is None])[:limit], note


def colour_key(sweep: Sweep, jobs: list[JobReport]) -> tuple[str, list[str]] | None:
    """The swept parameter to colour many lines by: one with 2 to 10 values among `jobs`, categories (such as
    the optimizer) before numbers; None when no parameter has so few values."""
    candidates = []
    for key in sweep.swept:
        values, numeric = _values(jobs, key)
        if 2 <= len(values) <= _FEW:
            candidates.append((numeric, len(values), key, values))
    if not candidates:
        return None
    _, _, key, values = min(candidates, key=lambda c: (c[0], -c[1]))
    return key, values


class Palette:
    """Few jobs: one colour each and a legend of their overrides. Many: coloured by a swept parameter with
    few values (a legend of its values), else by objective (a colour bar); the best job is the thick line."""

    def __init__(self, sweep: Sweep, jobs: list[JobReport]) -> None:
        import matplotlib

        self.few = len(jobs) <= _FEW
        self.by = None if self.few else colour_key(sweep, jobs)
        self.best = sweep.best
        scores = [s for s in (finite_number(j.objective) for j in jobs) if s is not None]
        self.cmap = matplotlib.colormaps["viridis" if sweep.direction == "maximize" else "viridis_r"]
        self.norm = matplotlib.colors.Normalize(min(scores, default=0.0), max(scores, default=1.0))
        self._index = {j.num: i for i, j in enumerate(jobs)}
        self._tab = matplotlib.colormaps["tab10"]

    def color(self, job: JobReport) -> Any:
        if self.few:
            return self._tab(self._index.get(job.num, 0) % 10)
        if self.by is not None:
            key, values = self.by
            value = job.overrides.get(key)
            return self._tab(values.index(value)) if value in values else (0.6, 0.6, 0.6, 0.5)
        if self.best is not None and job.num == self.best.num:
            return "red"
        score = finite_number(job.objective)
        return (0.6, 0.6, 0.6, 0.5) if score is None else self.cmap(self.norm(score))

    def finish(self, fig: MplFigure, axes: list[Axes], sweep: Sweep, jobs: list[JobReport]) -> None:
        from matplotlib.cm import ScalarMappable
        from matplotlib.lines import Line2D

        if self.few:
            title = "job"
            handles = [Line2D([], [], color=self.color(j), label=f"{j.num}: {sweep.job_label(j, 60, short=True)}")
                       for j in jobs]
        elif self.by is not None:
            title, values = self.by
            handles = [Line2D([], [], color=self._tab(i), label=v[:30]) for i, v in enumerate(values)]
            if self.best is not None:
                handles.append(Line2D([], [], color="black", linewidth=2.5, label=f"best: job {self.best.num}"))
        else:
            fig.colorbar(ScalarMappable(norm=self.norm, cmap=self.cmap), ax=axes, label=sweep.metric, shrink=0.8)
            return
        if fig.get_layout_engine() is None:
            # At the figure's right edge, and the axes end where it begins, however long its labels are (at a fixed
            # place, labels of three swept keys or Optuna's 17-digit floats would run off the figure).
            legend = fig.legend(handles=handles, loc="upper right", bbox_to_anchor=(0.995, 0.93), fontsize="small",
                                title=title)
            width = legend.get_window_extent(fig.canvas.get_renderer()).width / fig.bbox.width  # type: ignore[attr-defined]
            fig.subplots_adjust(right=max(0.45, 0.99 - width - 0.02))
        else:
            fig.legend(handles=handles, loc="outside right upper", fontsize="small", title=title)


def _series(job: JobReport, key: str) -> np.ndarray:
    pts = [(e, v) for r in job.epochs if (e := finite_number(r.get("epoch"))) is not None
           and (v := finite_number(r.get(key))) is not None]
    return np.array(pts, dtype=float).reshape(-1, 2)


def draw_lines(ax: Axes, jobs: list[JobReport], key: str, palette: Palette, best: JobReport | None) -> bool:
    """One line per job in a single LineCollection (fast for hundreds of lines); the best job on top."""
    from matplotlib.collections import LineCollection

    segs, colors, widths = [], [], []
    for job in jobs:
        xy = _series(job, key)
        if len(xy):
            is_best = best is not None and job.num == best.num
            segs.append(xy)
            colors.append(palette.color(job))
            widths.append(2.5 if is_best else 1.2)
    if not segs:
        return False
    # A job with one epoch (pruned after its first) is a line of one point, which draws nothing: a dot instead.
    dots = [i for i, xy in enumerate(segs) if len(xy) == 1]
    if dots:
        ax.scatter([segs[i][0, 0] for i in dots], [segs[i][0, 1] for i in dots], s=[9 * widths[i] ** 2 for i in dots],
                   c=[colors[i] for i in dots], zorder=3)
    # Drawn worst first, so the best lines (and the thick best job) end up on top.
    order = sorted(reversed(range(len(segs))), key=lambda i: widths[i])
    ax.add_collection(LineCollection([segs[i] for i in order], colors=[colors[i] for i in order],
                                     linewidths=[widths[i] for i in order]))
    allpts = np.concatenate(segs)
    ax.update_datalim(allpts)
    ax.autoscale_view()
    ys = allpts[:, 1]
    if log_scale(key, float(ys.min()), float(ys.max())):
        ax.set_yscale("log")
    return True


def log_scale(metric: str, lo: float, hi: float) -> bool:
    """Whether values of `metric` from `lo` to `hi` are drawn on a log scale: a loss spanning more than a decade,
    whose small values are the ones to tell apart. Any other metric is linear: an accuracy (or another bounded
    score) from 0.08 to 0.975 spans a decade too, but on a log scale its best values, near the top, share one
    colour."""
    return metric.endswith("loss") and lo > 0 and hi / lo > 10


def epoch_axis(ax: Axes) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)


class CurvesSection(SectionBuilder):
    """Loss and accuracy per epoch, one panel per metric (train/val), one line per job."""

    title = "Learning curves"

    def build(self, sweep: Sweep, out_dir: Path) -> Section | None:
        drawn, note = cap(sweep, [j for j in sweep.jobs if j.epochs])
        if not drawn:
            return None
        keys = [k for k in ("train_loss", "val_loss", "train_acc", "val_acc")
                if any(k in r for j in drawn for r in j.epochs)]
        ncols = 2
        nrows = max(1, math.ceil(len(keys) / ncols))
        height_in = 3.6 * nrows + 0.6
        fig = figure(12, height_in, constrained=False)
        palette = Palette(sweep, drawn)
        fig.subplots_adjust(left=0.07, right=0.97, bottom=0.55 / height_in, top=1 - 0.6 / height_in, wspace=0.22,
                            hspace=0.45)  # the legend, when there is one, takes its room from the right (finish)
        axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(len(keys))]
        for ax, key in zip(axes, keys, strict=True):
            draw_lines(ax, drawn, key, palette, sweep.best)
            ax.set(title=key, xlabel="epoch", ylabel=key)
            epoch_axis(ax)
        palette.finish(fig, axes, sweep, drawn)
        coloured = f"; colour: {palette.by[0]}" if palette.by is not None else ""
        fig.suptitle(f"Learning curves: {len(drawn)} jobs{coloured}" + (f" ({note})" if note else ""))
        path = save(fig, out_dir / "learning_curves.png")
        return Section(self.title, figures=[Figure(path, "loss and accuracy per epoch, one line per job")],
                       notes=[note] if note else [])


def _values(jobs: list[JobReport], key: str) -> tuple[list[str], bool]:
    """The distinct values of an override, in numeric order when all are numbers."""
    seen = list(dict.fromkeys(v for j in jobs if (v := j.overrides.get(key))))
    try:
        return sorted(seen, key=float), True
    except ValueError:
        return seen, False


def objective_heatmap(sweep: Sweep, path: Path) -> str:
    """Two swept parameters: objective per cell (mean over its completed jobs); the best cell outlined."""
    import matplotlib
    from matplotlib.patches import Rectangle

    a, b = sweep.swept[:2]
    (va, num_a), (vb, num_b) = _values(sweep.jobs, a), _values(sweep.jobs, b)
    if (num_a and not num_b) or (num_a == num_b and len(va) > len(vb)):
        a, b, va, vb = b, a, vb, va  # categories (e.g. optimizer) down the side, numbers across
    ia, ib = {v: i for i, v in enumerate(va)}, {v: i for i, v in enumerate(vb)}
    total, count = np.zeros((len(va), len(vb))), np.zeros((len(va), len(vb)))
    status = np.full((len(va), len(vb)), "", dtype=object)
    for job in sweep.jobs:
        if a not in job.overrides or b not in job.overrides:
            continue  # its overrides could not be read
        i, k = ia[job.overrides[a]], ib[job.overrides[b]]
        score = finite_number(job.objective)
        if job.status == JobState.COMPLETED and score is not None:
            total[i, k] += score
            count[i, k] += 1
        else:
            status[i, k] = status[i, k] or job.status
    grid = np.ma.masked_invalid(np.divide(total, count, out=np.full_like(total, np.nan), where=count > 0))
    if grid.count() == 0:
        raise ValueError(f"no completed job with a finite {sweep.metric}")
    cmap = matplotlib.colormaps["viridis" if sweep.direction == "maximize" else "viridis_r"]
    cmap = cmap.with_extremes(bad="#dddddd")  # cells with no completed job
    lo, hi = float(grid.min()), float(grid.max())
    norm: Any = (matplotlib.colors.LogNorm(lo, hi) if log_scale(sweep.metric, lo, hi)
                 else matplotlib.colors.Normalize(lo, hi))
    fig = figure(min(16.0, max(6.0, 1.5 + 0.9 * len(vb))), min(12.0, max(4.0, 1.5 + 0.45 * len(va))))
    ax = fig.add_subplot()
    image = ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto")
    xs, ys = range(0, len(vb), math.ceil(len(vb) / 30)), range(0, len(va), math.ceil(len(va) / 40))
    ax.set_xticks(list(xs), labels=[vb[i] for i in xs], rotation=45 if len(vb) > 8 else 0)
    ax.set_yticks(list(ys), labels=[va[i] for i in ys])
    ax.set(xlabel=b, ylabel=a, title=f"{sweep.metric} ({sweep.direction}): {a} x {b}")
    fig.colorbar(image, ax=ax, label=sweep.metric)
    if grid.size <= MAX_ANNOTATED_CELLS:
        for (i, k), value in np.ndenumerate(grid.filled(np.nan)):
            if math.isfinite(value):
                r, g, bl, _ = cmap(norm(value))
                ink = "black" if 0.299 * r + 0.587 * g + 0.114 * bl > 0.5 else "white"
                ax.text(k, i, f"{value:.3g}", ha="center", va="center", fontsize=8, color=ink)
            elif status[i, k]:
                ax.text(k, i, str(status[i, k]), ha="center", va="center", fontsize=7, color="#aa0000")
    best = sweep.best
    if best is not None and a in best.overrides and b in best.overrides:
        i, k = ia[best.overrides[a]], ib[best.overrides[b]]
        ax.add_patch(Rectangle((k - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2.5))
    save(fig, path)
    return "" if grid.size <= MAX_ANNOTATED_CELLS else f"{grid.size} cells: values are not written in"


def _axis(ax: Axes, values: list[str], numeric: bool) -> dict[str, float]:
    """Positions of the values on the x axis: the numbers themselves (log when over a decade), else 0..n-1."""
    if not numeric:
        ax.set_xticks(range(len(values)), labels=values, rotation=30 if len(values) > 6 else 0)
        return {v: float(i) for i, v in enumerate(values)}
    nums = [float(v) for v in values]
    if min(nums) > 0 and max(nums) / min(nums) > 10:
        ax.set_xscale("log")
    if len(values) <= 12:
        ax.set_xticks(nums, labels=values, rotation=30 if len(values) > 6 else 0)
        ax.minorticks_off()
    return dict(zip(values, nums, strict=True))


def objective_by_param(sweep: Sweep, path: Path) -> str:
    """Per swept parameter (the first 4): the objective and the epoch time against its value (a line through the
    means)."""
    keys = sweep.swept[:4]
    fig = figure(max(6.0, 4.5 * len(keys)), 7.0)
    # One pass over the jobs per quantity (100,000 jobs in a large sweep), then arrays.
    objective = np.array([v if j.status == JobState.COMPLETED and (v := finite_number(j.objective)) is not None
                          else np.nan for j in sweep.jobs], dtype=float)
    epoch_time = np.array([np.nan if (t := j.epoch_time_s) is None else t for j in sweep.jobs], dtype=float)
    n_done = int(np.count_nonzero(~np.isnan(objective)))
    for col, key in enumerate(keys):
        values, numeric = _values(sweep.jobs, key)
        for row, (ys_all, ylabel) in enumerate(((objective, sweep.metric), (epoch_time, "epoch time (s)"))):
            ax = fig.add_subplot(2, len(keys), row * len(keys) + col + 1)
            pos = _axis(ax, values, numeric)
            if row == 0:
                xs_all = np.array([pos.get(j.overrides.get(key, ""), np.nan) for j in sweep.jobs], dtype=float)
            keep = ~np.isnan(xs_all) & ~np.isnan(ys_all)
            xs, ys = xs_all[keep], ys_all[keep]
            if len(xs):
                step = math.ceil(len(xs) / MAX_POINTS)  # every k-th point: a sample that keeps the spread
                ax.scatter(xs[::step], ys[::step], s=14, alpha=0.5 if len(xs) // step > 50 else 0.9,
                           color="tab:blue")
                at, where = np.unique(xs, return_inverse=True)  # the means over every job, at each value
                means = np.bincount(where, weights=ys) / np.bincount(where)
                ax.plot(at, means, color="tab:orange", label="mean")
            ax.set(xlabel=key, ylabel=ylabel)
            ax.grid(alpha=0.3)
    sampled = f"; {MAX_POINTS} of them drawn, the means over all" if n_done > MAX_POINTS else ""
    fig.suptitle(f"{sweep.metric} and epoch time per parameter ({n_done} completed jobs{sampled})")
    save(fig, path)
    left = len(sweep.swept) - len(keys)
    return f"{left} more swept parameters are not drawn" if left > 0 else ""


class ParamsSection(SectionBuilder):
    """Two swept parameters: a heatmap of the objective. One (or more than two): objective and epoch time per value."""

    title = "Objective per parameter"

    def build(self, sweep: Sweep, out_dir: Path) -> Section | None:
        if not sweep.swept or sweep.measures_speed or not any(j.status == JobState.COMPLETED for j in sweep.jobs):
            return None  # a speed study's device counts and repeats are the scaling section's
        if read_study_file(sweep.sweep_dir) is not None:
            return None  # sampled values are not a grid: the Optuna section's slice and contour plots show them
        if len(sweep.swept) == 2:
            path = out_dir / "objective_heatmap.png"
            note = objective_heatmap(sweep, path)
            caption = f"{sweep.metric} for each {sweep.swept[0]} and {sweep.swept[1]}; best outlined in red"
        else:
            path = out_dir / "objective_by_param.png"
            note = objective_by_param(sweep, path)
            caption = f"{sweep.metric} and epoch time (first epoch excluded) against " + ", ".join(sweep.swept)
        return Section(self.title, figures=[Figure(path, caption)], notes=[note] if note else [])
