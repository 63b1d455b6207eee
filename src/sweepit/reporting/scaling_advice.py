"""The scaling study's answer as a sentence to read before submitting: the device count to use per job (the largest
whose parallel efficiency stays at or above a floor) and the cheapest in device-hours per epoch, with the repeats'
spread. The floor is the study's `min_efficiency` key (sweeps/scaling.yaml), so that it is set where the study is."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sweepit.results import finite_number

if TYPE_CHECKING:
    from sweepit.reporting.scaling import ScalingPoint

MIN_EFFICIENCY_KEY = "min_efficiency"
# Under this efficiency, a count's epoch costs over 1/0.7 = 1.43 times the device-hours of the smallest count's.
DEFAULT_MIN_EFFICIENCY = 0.7


def min_efficiency(configs: Iterable[dict[str, Any]]) -> tuple[float, bool, str]:
    """The floor the jobs' configs set (the first that has the key), whether one set it, and a note when its value
    is no fraction (the default is used then)."""
    for config in configs:
        if MIN_EFFICIENCY_KEY in config:
            value = finite_number(config[MIN_EFFICIENCY_KEY])
            if value is not None and 0 < value <= 1:
                return value, True, ""
            return DEFAULT_MIN_EFFICIENCY, True, (
                f"{MIN_EFFICIENCY_KEY} must be a parallel efficiency between 0 and 1, but is "
                f"{config[MIN_EFFICIENCY_KEY]!r}; {DEFAULT_MIN_EFFICIENCY:g} was used. Set it as "
                f"{MIN_EFFICIENCY_KEY}=0.8 in the sweep's command or its study file.")
    return DEFAULT_MIN_EFFICIENCY, False, ""


def _count(n: int, devices: str) -> str:
    """`1 GPU`, `2 GPUs`, `1 CPU rank`."""
    return f"{n} {devices if n != 1 else devices[:-1]}"


def _spread(value: float, std: float, repeats: bool, digits: int = 3) -> str:
    return f"{value:.{digits}g} ± {std:.2g}" if repeats else f"{value:.{digits}g}"


def _efficiency_std(base: ScalingPoint, p: ScalingPoint) -> float:
    """The efficiency's standard deviation from the two epoch times' (first-order error propagation of t_0 / t_n)."""
    if p is base:
        return 0.0
    return p.efficiency * math.hypot(base.epoch_time_std_s / base.epoch_time_s, p.epoch_time_std_s / p.epoch_time_s)


def recommendation(points: list[ScalingPoint], floor: float, devices: str = "GPUs") -> str:
    """The sentence: which count to use per job and which is cheapest, or why no count can be named."""
    if len(points) < 2:
        counts = ", ".join(str(p.n_gpus) for p in points) or "none completed"
        return (f"No recommendation can be made: the jobs ran on one {devices[:-1]} count only ({counts}); naming the "
                f"count to use needs the epoch times of two counts or more.")
    base = points[0]
    repeats = all(p.n_jobs > 1 for p in points)
    chosen, below = base, None
    for p in points:  # efficiency "stays" above the floor: the first count under it ends the walk
        if p.efficiency < floor:
            below = p
            break
        chosen = p
    unit = "GPU-hours" if devices == "GPUs" else "rank-hours"

    def cost(p: ScalingPoint) -> str:
        return _spread(p.n_gpus * p.epoch_time_s / 3600, p.n_gpus * p.epoch_time_std_s / 3600, repeats)

    def efficiency(p: ScalingPoint) -> str:
        return _spread(p.efficiency, _efficiency_std(base, p), repeats, 2)

    cheapest = min(points, key=lambda p: p.n_gpus * p.epoch_time_s)
    text = (f"Recommendation: {_count(chosen.n_gpus, devices)} per job, the largest count whose parallel efficiency "
            f"stays at or above {floor:g} ({MIN_EFFICIENCY_KEY}={floor:g})")
    if chosen is not base:
        text += f": {efficiency(chosen)}"
    if below is not None:
        near = repeats and below.efficiency + _efficiency_std(base, below) >= floor
        text += (f"; {_count(below.n_gpus, devices)} reach {efficiency(below)}"
                 + (", within its spread of the floor: more repeats would tell" if near else ""))
    elif chosen is points[-1]:
        text += "; the most this study measured"
    text += (f". The cheapest in {unit} per epoch: {_count(cheapest.n_gpus, devices)} ({cost(cheapest)}"
             + (f"; {_count(chosen.n_gpus, devices)}: {cost(chosen)}" if cheapest is not chosen else "") + ").")
    if repeats:
        fewest = min(p.n_jobs for p in points)
        return text + f" ± is the standard deviation over each count's repeats ({fewest} or more)."
    return text + " No spread: a count ran once (repeat=0,1,2 runs each count three times)."
