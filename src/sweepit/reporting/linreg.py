"""The linreg section: each job's fitted line y = w x + b against the true line and the band its data lies in, and the
loss curves."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sweepit.reporting._report_data import Sweep
from sweepit.reporting.plots import Palette, cap, draw_lines, epoch_axis, figure, save
from sweepit.reporting.sections import Figure, Section, SectionBuilder
from sweepit.results import finite_number


class LinregSection(SectionBuilder):
    """Jobs of task linreg log the fitted `w` and `b` each epoch. Left: the data, the true line and the fitted lines of
    (at most 50) jobs. Right: loss per epoch."""

    title = "Linear regression fits"

    def build(self, sweep: Sweep, out_dir: Path) -> Section | None:
        from matplotlib.collections import LineCollection

        jobs = [j for j in sweep.jobs if "w" in j.last and "b" in j.last]
        if not jobs:
            return None
        nums = {j.num for j in jobs}
        best = sweep.best if sweep.best is not None and sweep.best.num in nums else jobs[0]
        config = best.config()
        drawn, note = cap(sweep, jobs, 50)
        fig = figure(13, 5)
        ax_fit, ax_loss = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        palette = Palette(sweep, drawn)
        task = config.get("task") or {}
        true_w, true_b = finite_number(task.get("true_w")), finite_number(task.get("true_b"))
        noise = finite_number(task.get("noise_std"))
        if true_w is not None and true_b is not None:
            xs = np.array([-1.0, 1.0])
            line = true_w * xs + true_b
            if noise is not None:
                # The data's own law (x uniform on [-1, 1], y = w x + b + N(0, noise^2)), drawn from the config: the
                # points themselves only torch's generator gives back, 1.7 s of import for each report.
                ax_fit.fill_between(xs, line - 2 * noise, line + 2 * noise, color="#999999", alpha=0.3,
                                    label=f"the data: \u00b12 noise std ({noise:g})")
            ax_fit.plot(xs, line, "k--", lw=2, label=f"true: y = {true_w:g} x + {true_b:g}")
        segs, colors = [], []
        for job in drawn:
            w, b = finite_number(job.last.get("w")), finite_number(job.last.get("b"))
            if w is not None and b is not None:
                segs.append([(-1.0, b - w), (1.0, b + w)])
                colors.append(palette.color(job))
        ax_fit.add_collection(LineCollection(segs, colors=colors, linewidths=1.2, alpha=0.9))
        ax_fit.autoscale_view()
        ax_fit.set(title="fitted lines (final w, b)", xlabel="x", ylabel="y")
        ax_fit.legend(loc="upper left", fontsize="small")
        loss = "val_loss" if any("val_loss" in r for j in drawn for r in j.epochs) else "train_loss"
        draw_lines(ax_loss, drawn, loss, palette, sweep.best)
        ax_loss.set(title=f"{loss} per epoch", xlabel="epoch", ylabel=loss)
        epoch_axis(ax_loss)
        ax_fit.grid(alpha=0.3)
        palette.finish(fig, [ax_fit, ax_loss], sweep, drawn)
        path = save(fig, out_dir / "linreg_fit.png")
        notes = [note] if note else []
        if any(k.startswith("task.true_") or k == "task.noise_std" for k in sweep.swept):
            notes.append(f"the true line and data are those of job {best.num}; the sweep varies them")
        return Section(self.title, figures=[Figure(path, "fitted lines against the data; loss per epoch")],
                       notes=notes)
