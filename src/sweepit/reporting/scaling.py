"""The GPU-scaling section: epoch time (each job's warm-up epoch left out, as the courses time it), throughput, speedup
and efficiency per device count, over the repeats of each; speedup is against the smallest device count."""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from sweepit.reporting._report_data import Sweep
from sweepit.reporting.scaling_advice import min_efficiency, recommendation
from sweepit.reporting.sections import Figure, Section, SectionBuilder
from sweepit.reporting.table import Table
from sweepit.results import JobState

# Adding devices that buys less than this fraction of the ideal extra speed is called a plateau.
PLATEAU_GAIN = 0.25


@dataclass
class ScalingPoint:
    n_gpus: int
    n_jobs: int
    epoch_time_s: float
    epoch_time_std_s: float
    samples_per_s: float
    samples_per_s_std: float
    speedup: float = math.nan
    efficiency: float = math.nan


def _std(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def scaling_points(sweep: Sweep) -> list[ScalingPoint]:
    """One point per device count, from the jobs that completed."""
    groups: dict[int, list[tuple[float, float]]] = {}
    for job in sweep.jobs:
        time_s, rate = job.epoch_time_s, job.warm_mean("samples_per_s")
        if job.status == JobState.COMPLETED and time_s is not None and rate is not None:
            groups.setdefault(job.n_devices, []).append((time_s, rate))
    points = [
        ScalingPoint(n, len(v), statistics.fmean(t for t, _ in v), _std([t for t, _ in v]),
                     statistics.fmean(r for _, r in v), _std([r for _, r in v]))
        for n, v in sorted(groups.items())
    ]
    if points:
        base = points[0]
        for p in points:
            p.speedup = base.epoch_time_s / p.epoch_time_s
            p.efficiency = p.speedup / (p.n_gpus / base.n_gpus)
    return points


def scaling_flags(points: list[ScalingPoint], devices: str = "GPUs") -> list[str]:
    """Plain-words warnings where adding devices slows training down or buys little. A slowdown is one only where
    the epoch times differ by more than their spread between repeats (their standard deviations together: the
    plot's error bars do not meet); a smaller difference is no change at all."""
    flags = []
    for a, b in itertools.pairwise(points):
        ideal_gain = b.n_gpus / a.n_gpus - 1
        gain = a.epoch_time_s / b.epoch_time_s - 1
        times = f"{_time(a)} -> {_time(b)}"
        if b.epoch_time_s - a.epoch_time_s > a.epoch_time_std_s + b.epoch_time_std_s:
            flags.append(f"slower with more devices: {b.n_gpus} {devices} take {_time(b)} per epoch, "
                         f"{a.n_gpus} took {_time(a)}.")
        elif gain <= 0:
            flags.append(f"plateau: going from {a.n_gpus} to {b.n_gpus} {devices} does not change the epoch time "
                         f"beyond the spread between repeats ({times}; ideal {ideal_gain:.0%} faster).")
        elif gain < PLATEAU_GAIN * ideal_gain:
            flags.append(f"plateau: going from {a.n_gpus} to {b.n_gpus} {devices} cuts the epoch time by only "
                         f"{gain:.0%} ({times}; ideal {ideal_gain:.0%}).")
    return flags


def _time(p: ScalingPoint) -> str:
    """`4.86 s`, or with repeats `4.86 ± 0.31 s`."""
    return f"{p.epoch_time_s:.3g} ± {p.epoch_time_std_s:.2g} s" if p.n_jobs > 1 else f"{p.epoch_time_s:.3g} s"


def scaling_plot(points: list[ScalingPoint], path: Path, devices: str = "GPUs") -> None:
    from sweepit.reporting import plots

    fig = plots.figure(12, 3.6)
    ax_time, ax_rate, ax_speed = fig.subplots(1, 3)
    gpus = [p.n_gpus for p in points]
    ax_time.errorbar(gpus, [p.epoch_time_s for p in points], yerr=[p.epoch_time_std_s for p in points],
                     marker="o", capsize=3)
    ax_time.set(xlabel=devices, ylabel="epoch time (s, first epoch excluded)", title="Epoch time")
    ax_rate.errorbar(gpus, [p.samples_per_s for p in points], yerr=[p.samples_per_s_std for p in points],
                     marker="o", capsize=3)
    ax_rate.set(xlabel=devices, ylabel="samples / s", title="Throughput")
    ax_speed.plot(gpus, [p.speedup for p in points], marker="o", label="measured")
    ax_speed.plot(gpus, [g / gpus[0] for g in gpus], linestyle="--", color="grey", label="ideal")
    ax_speed.set(xlabel=devices, ylabel=f"speedup over {gpus[0]}", title="Speedup")
    ax_speed.legend()
    for ax in (ax_time, ax_rate, ax_speed):
        ax.set_xticks(gpus)
        ax.grid(alpha=0.3)
    plots.save(fig, path)


class ScalingSection(SectionBuilder):
    """Applies to sweeps whose completed jobs ran on more than one device count (GPUs, or ranks on CPU). The end of
    the sweep prints it: it is what a speed study measured."""

    title = "GPU scaling"

    def build(self, sweep: Sweep, out_dir: Path) -> Section | None:
        points = scaling_points(sweep)
        done = [j for j in sweep.jobs if j.status == JobState.COMPLETED]  # their ranks are no GPUs when all ran on CPU
        devices = "CPU ranks" if done and all(j.on_cpu for j in done) else "GPUs"
        title = self.title if devices == "GPUs" else f"Scaling over {devices}"
        floor, asked, note = min_efficiency(j.config() for j in done[:1])
        advice = [recommendation(points, floor, devices), *([note] if note else [])]
        if len(points) < 2:  # a scaling study (it sets the floor) says why it names no count; other sweeps are silent
            return Section(title, text=advice, printed=True) if asked else None
        path = out_dir / "scaling.png"
        scaling_plot(points, path, devices)
        flags = scaling_flags(points, devices)
        text = [f"Speedup and efficiency against {points[0].n_gpus} {devices[:-1]}(s); epoch times exclude the first "
                "epoch; mean and standard deviation over repeats."]
        if any(p.n_jobs < 2 for p in points):
            text.append("A device count ran once: with no repeats to show the noise, any difference is taken as real.")
        text += flags or ["No plateau: every step up in devices cut the epoch time by at least "
                          f"{PLATEAU_GAIN:.0%} of the ideal gain."]
        text += advice
        columns = ["gpus" if devices == "GPUs" else "ranks", "jobs", *[f.name for f in fields(ScalingPoint)][2:]]
        table = Table(columns, [list(astuple(p)) for p in points])
        return Section(title, text=text, table=table, printed=True,
                       figures=[Figure(path, f"epoch time, throughput and speedup (dashed: ideal) per {devices[:-1]} "
                                              "count")])
