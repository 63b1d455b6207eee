"""The scaling report's recommendation on result rows written here: the device count to use per job (the largest
whose parallel efficiency stays at or above `min_efficiency`) and the cheapest in device-hours per epoch."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweepit.reporting import load_sweep, try_build_report
from sweepit.reporting.scaling import scaling_points
from sweepit.reporting.scaling_advice import recommendation
from sweepit_testing import write_scaling_sweep


def _sweep(root: Path, epoch_times: dict[int, list[float]], min_efficiency: object = None) -> Path:
    """Completed jobs with these mean epoch times; their config sets `min_efficiency` unless None (as
    sweeps/scaling.yaml does)."""
    return write_scaling_sweep(root, epoch_times,
                               config={} if min_efficiency is None else {"min_efficiency": min_efficiency})


def _advice(root: Path, epoch_times: dict[int, list[float]], floor: float = 0.7) -> str:
    return recommendation(scaling_points(load_sweep(_sweep(root, epoch_times))), floor)


# A small model on MareNostrum5's H100s: 1 -> 2 GPUs 38% faster (efficiency 0.69), no gain past 2.
MN5 = {1: [2.23, 2.25], 2: [1.58, 1.66], 4: [1.59, 1.60]}


def test_the_largest_count_whose_efficiency_stays_above_the_floor(tmp_path: Path) -> None:
    # 2 GPUs: 2.24 / 1.62 / 2 = 0.69, its spread from the two epoch times' (0.0141 s and 0.0566 s): 0.025.
    assert _advice(tmp_path / "a", MN5) == (
        "Recommendation: 1 GPU per job, the largest count whose parallel efficiency stays at or above 0.7 "
        "(min_efficiency=0.7); 2 GPUs reach 0.69 ± 0.025, within its spread of the floor: more repeats would tell. "
        "The cheapest in GPU-hours per epoch: 1 GPU (0.000622 ± 3.9e-06). ± is the standard deviation over each "
        "count's repeats (2 or more).")
    assert _advice(tmp_path / "b", MN5, floor=0.6).startswith(
        "Recommendation: 2 GPUs per job, the largest count whose parallel efficiency stays at or above 0.6 "
        "(min_efficiency=0.6): 0.69 ± 0.025; 4 GPUs reach 0.35 ± 0.0027. The cheapest in GPU-hours per epoch: "
        "1 GPU (0.000622 ± 3.9e-06; 2 GPUs: 0.0009 ± 3.1e-05).")


def test_all_counts_above_the_floor_and_a_cheaper_larger_count(tmp_path: Path) -> None:
    # The courses' V100s: ResNet-50 at 45, 24, 12 s an epoch on 1, 2, 4 GPUs.
    said = _advice(tmp_path / "a", {1: [45.0, 45.0], 2: [23.0, 25.0], 4: [12.0, 12.0]})
    assert "Recommendation: 4 GPUs per job, the largest count whose parallel efficiency stays at or above 0.7 " \
           "(min_efficiency=0.7): 0.94 ± 0; the most this study measured. The cheapest in GPU-hours per epoch: " \
           "1 GPU (0.0125 ± 0; 4 GPUs: 0.0133 ± 0)." in said
    # Superlinear (the batch of 2 GPUs fits a cache): 2 GPUs are cheaper than 1; run once, no spread.
    assert _advice(tmp_path / "b", {1: [10.0], 2: [4.5]}) == (
        "Recommendation: 2 GPUs per job, the largest count whose parallel efficiency stays at or above 0.7 "
        "(min_efficiency=0.7): 1.1; the most this study measured. The cheapest in GPU-hours per epoch: 2 GPUs "
        "(0.0025). No spread: a count ran once (repeat=0,1,2 runs each count three times).")


def test_a_count_under_the_floor_ends_the_walk(tmp_path: Path) -> None:
    """Efficiency must stay above the floor: a noisy larger count above it again does not count."""
    said = _advice(tmp_path, {1: [10.0], 2: [8.0], 4: [3.4]})
    assert said.startswith("Recommendation: 1 GPU per job") and "2 GPUs reach 0.62" in said


def test_the_end_of_the_study_prints_it_with_the_studys_floor(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert try_build_report(_sweep(tmp_path / "a", MN5, min_efficiency=0.6)) is not None
    printed = capsys.readouterr().out
    assert "\nGPU scaling:\ngpus  jobs" in printed
    assert "Recommendation: 2 GPUs per job, the largest count whose parallel efficiency stays at or above 0.6 " \
           "(min_efficiency=0.6)" in printed
    assert "Recommendation: 2 GPUs per job" in (tmp_path / "a" / "report" / "index.html").read_text()


def test_one_count_says_no_recommendation_can_be_made(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert try_build_report(_sweep(tmp_path / "a", {1: [2.0, 2.1]}, min_efficiency=0.7)) is not None
    printed = capsys.readouterr().out
    assert "GPU scaling:\nNo recommendation can be made: the jobs ran on one GPU count only (1); naming the count to " \
           "use needs the epoch times of two counts or more." in printed
    assert "Recommendation:" not in printed and not (tmp_path / "a" / "report" / "scaling.png").exists()
    # A sweep that is no scaling study (no min_efficiency in its config) and ran on one count has no such section.
    assert try_build_report(_sweep(tmp_path / "b", {1: [2.0, 2.1]})) is not None
    assert "recommendation" not in capsys.readouterr().out.lower()


def test_a_floor_that_is_no_efficiency_is_said_and_the_default_used(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert try_build_report(_sweep(tmp_path, MN5, min_efficiency=70)) is not None
    printed = capsys.readouterr().out
    assert "min_efficiency must be a parallel efficiency between 0 and 1, but is 70; 0.7 was used. Set it as " \
           "min_efficiency=0.8 in the sweep's command or its study file." in printed
    assert "Recommendation: 1 GPU per job" in printed
