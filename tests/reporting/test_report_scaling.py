"""The GPU-scaling report from fixture results: table, speedup, efficiency, plateau and slowdown flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweepit.cli import main as cli
from sweepit.reporting import build_report, load_sweep, try_build_report
from sweepit.reporting.scaling import ScalingPoint, scaling_flags, scaling_points
from sweepit.results import summarize
from sweepit_testing import write_scaling_sweep


def test_courses_v100_resnet50_figures(tmp_path: Path) -> None:
    # ResNet-50 on CIFAR-10 at 128 px on 1, 2, 4 V100s: 45, 24, 12 s per epoch, 3.75x.
    sweep = load_sweep(write_scaling_sweep(tmp_path, {1: [45.0, 45.0], 2: [23.0, 25.0], 4: [12.0, 12.0]}))
    points = scaling_points(sweep)
    assert [p.n_gpus for p in points] == [1, 2, 4]
    assert [p.n_jobs for p in points] == [2, 2, 2]
    assert points[1].epoch_time_s == pytest.approx(24.0)  # the warm-up epoch (3x slower) is left out
    assert points[1].epoch_time_std_s == pytest.approx(1.4142, rel=1e-3)
    assert points[2].speedup == pytest.approx(3.75)
    assert points[2].efficiency == pytest.approx(3.75 / 4)
    assert points[2].samples_per_s == pytest.approx(50_000 / 12)
    assert scaling_flags(points) == []


def test_plateau_and_slowdown_are_flagged(tmp_path: Path) -> None:
    # A small model on MareNostrum5 H100s: 2.23, 1.61, 1.59, 1.59 s; then a slowdown at 4.
    sweep = load_sweep(write_scaling_sweep(tmp_path, {1: [2.23], 2: [1.61], 3: [1.59], 4: [1.70]}))
    flags = scaling_flags(scaling_points(sweep))
    assert len(flags) == 2
    assert flags[0].startswith("plateau: going from 2 to 3 GPUs")
    assert flags[1].startswith("slower with more devices: 4 GPUs")


def test_report_has_the_scaling_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep_dir = write_scaling_sweep(tmp_path / "sweep", {1: [2.0], 2: [1.1], 4: [1.0]})
    out = build_report(sweep_dir)
    assert (out / "scaling.png").stat().st_size > 5_000
    html = (out / "index.html").read_text()
    assert "GPU scaling" in html and "plateau: going from 2 to 4 GPUs" in html
    assert cli(["report", str(sweep_dir)]) == 0
    printed = capsys.readouterr().out
    assert "GPU scaling:" in printed and "efficiency" in printed


def test_single_device_count_has_no_scaling_section(tmp_path: Path) -> None:
    out = build_report(write_scaling_sweep(tmp_path / "sweep", {1: [2.0, 2.1]}))
    assert not (out / "scaling.png").exists()


def test_a_slowdown_is_flagged_only_beyond_the_spread_between_repeats() -> None:
    """The CPU scaling study flagged "slower with more devices: 2 GPUs take 4.86 s per epoch, 1 took 4.86 s" on a
    0.002 s difference, inside a 0.3-0.4 s spread between repeats."""
    noise = [ScalingPoint(1, 3, 4.860, 0.31, 100.0, 5.0), ScalingPoint(2, 3, 4.862, 0.38, 100.0, 5.0)]
    (flag,) = scaling_flags(noise, "CPU ranks")
    assert flag.startswith("plateau: going from 1 to 2 CPU ranks does not change the epoch time beyond the spread "
                           "between repeats (4.86 ± 0.31 s -> 4.86 ± 0.38 s"), flag
    slower = [ScalingPoint(1, 3, 4.86, 0.31, 100.0, 5.0), ScalingPoint(2, 3, 5.70, 0.38, 100.0, 5.0)]
    assert scaling_flags(slower, "CPU ranks") == [
        "slower with more devices: 2 CPU ranks take 5.7 ± 0.38 s per epoch, 1 took 4.86 ± 0.31 s."]


def test_a_speed_study_on_cpu_says_what_it_measured_and_names_ranks(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The CPU variant of `make sweep-scaling` (random data, trainer.gpus x repeat) printed a "best" val_acc, drew a
    heatmap of gpus x repeat and called its CPU ranks GPUs."""
    sweep_dir = write_scaling_sweep(tmp_path / "sweep", {1: [2.0, 2.2], 2: [1.2, 1.3]}, device="cpu")
    out = try_build_report(sweep_dir)
    assert out is not None and not (out / "objective_heatmap.png").exists()
    printed = capsys.readouterr().out  # the end of the sweep: what it measured, not a best job
    assert "Scaling over CPU ranks:" in printed and "speedup" in printed and "efficiency" in printed
    assert "\nranks  jobs  epoch_time_s" in printed and "GPU" not in printed
    page = (out / "summary.md").read_text()
    assert "best (" not in page and "a speed study: the jobs differ only in trainer.gpus and repeat" in page
    assert summarize(sweep_dir).splitlines()[-2].startswith("a speed study: the jobs differ only in trainer.gpus")


def test_a_speed_study_with_weights_is_not_offered_a_best_job_to_keep(tmp_path: Path) -> None:
    """The scaling study's end said "`sweepit clean DIR` keeps only the best job's" right under "no best job"."""
    sweep_dir = write_scaling_sweep(tmp_path / "sweep", {1: [2.0], 2: [1.1]})
    for job_dir in sweep_dir.glob("*_*"):  # weights as the job's record lists them
        result = json.loads((job_dir / "result.json").read_text())
        (job_dir / "result.json").write_text(json.dumps({**result, "weights": {"model_best.pt": 1000}}))
    said = summarize(sweep_dir)
    assert "\na speed study: the jobs differ only in trainer.gpus, so no job is best" in said
    assert f"\nweights: 2.0 kB in 2 jobs (model_*.pt); `sweepit clean {sweep_dir} --all` deletes them\n" in said
    assert "best job's" not in said
