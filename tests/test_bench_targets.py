"""The `make bench-*` targets run for real (tiny ARGS: each script's own size flags), and their figures are read back
from the `--json` file each wrote and the lines it printed, so a benchmark that rots fails CI (`make test-slow`), not
the day its numbers are needed. `make bench` is these two of them (checked with `make -n`); bench-gpu is run by
test_bench_gpu.py, bench-slurm, bench-slurm-jobs, bench-optuna-workers, bench-packing and bench-scale by
tests/slurm/test_bench_on_slurm.py. Sweeps and raw
figures go under tmp_path, never into bench/results/."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sweepit_testing import REPO, write_mnist_subset

pytestmark = pytest.mark.slow

RUN_HERE = {"bench-throughput", "bench-report", "bench-launcher", "bench-optuna", "bench-mnist-best", "bench-halving"}
# the modules named above
RUN_ELSEWHERE = {"bench-gpu", "bench-slurm", "bench-slurm-jobs", "bench-optuna-workers", "bench-packing", "bench-scale"}


def make(target: str, args: str, *variables: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """`make -C REPO <target> ARGS=<args> PY=<this interpreter> [VAR=value...]`, asserted to succeed."""
    proc = subprocess.run(["make", "-C", str(REPO), target, f"ARGS={args}", f"PY={sys.executable}", *variables],
                          capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def read_json(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(path.read_text())
    return record


@pytest.fixture(scope="module")
def mnist_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 2,000 training and 500 test images of the real MNIST (random where it is not at hand)."""
    return write_mnist_subset(tmp_path_factory.mktemp("mnist"), 2000, 500)


def test_every_bench_target_is_run_by_a_test() -> None:
    shown = subprocess.run(["make", "-C", str(REPO), "help"], capture_output=True, text=True, timeout=60).stdout
    targets = set(re.findall(r"^\s+(bench-[\w-]+)\s", shown, re.MULTILINE))
    assert targets == RUN_HERE | RUN_ELSEWHERE, "a new bench target needs its tiny run in a test"


def test_make_bench_is_throughput_then_report() -> None:
    """`bench` has no recipe of its own: it runs the two targets below with the same ARGS."""
    proc = subprocess.run(["make", "-n", "bench", "ARGS=--rounds 1", f"PY={sys.executable}"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    commands = [line for line in proc.stdout.splitlines() if "bench/" in line]  # not make's directory lines
    assert commands == [f"{sys.executable} bench/bench_throughput.py --rounds 1",
                        f"{sys.executable} bench/bench_report.py --rounds 1"], proc.stdout


@pytest.mark.tier_slow
def test_bench_throughput(tmp_path: Path, mnist_root: Path) -> None:
    out = tmp_path / "throughput.json"
    proc = make("bench-throughput", f"--root {mnist_root} --steps 2 --batch-size 32 --rounds 1 --precision fp32 "
                                    f"--threads 1 --json {out}")
    record = read_json(out)
    assert record["settings"]["real_mnist"] and record["settings"]["n_train"] == 64
    pipelines = ["sweepit train() [fp32]", "DataLoader w=0 [fp32]", "DataLoader w=2 [fp32]", "compute only [fp32]"]
    for group in ("none", "rot/shift/zoom"):
        rates = record["epochs_samples_per_s"][group]
        assert sorted(rates) == sorted(pipelines)
        assert all(len(r) == 2 and min(r) > 0 for r in rates.values()), rates  # warm-up + 1 timed epoch
        assert min(record["data_only_samples_per_s"][group].values()) > 0
    verdicts = [r for r in record["ratios"] if r["kind"] == "verdict, like for like"]
    assert len(verdicts) == 2 and all(r["paired_median"] > 0 and r["met"] in (True, False) for r in verdicts)
    assert "rot/shift/zoom, fp32, like for like: sweepit train() [fp32] / DataLoader w=" in proc.stdout
    assert "(target >= 2x: " in proc.stdout


@pytest.mark.tier_slow
def test_bench_report(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = make("bench-report", f"--jobs 12 --epochs 2 --rounds 1 --json {out}")
    record = read_json(out)
    assert record["settings"] == {"jobs": 12, "epochs": 2, "rounds": 1}
    for side in ("baseline_collect", "sweepit_report"):
        assert record["cold_s"][side] > 0 and record["warm_median_s"][side] > 0
    assert record["ratio_cold"] > 0 and record["plots"] and all(p.endswith(".png") for p in record["plots"])
    assert re.search(r"^ratio report / baseline\s+[\d.]+ x\s+[\d.]+ x$", proc.stdout, re.MULTILINE), proc.stdout
    assert re.search(r"(meets|misses) the goal: 12 jobs reported in [\d.]+ s cold", proc.stdout), proc.stdout


@pytest.mark.tier_slow
def test_bench_launcher(tmp_path: Path) -> None:
    out, work = tmp_path / "launcher.json", tmp_path / "work"
    proc = make("bench-launcher", f"--jobs 2 --epochs 1 --trivial-jobs 0 --repeat 1 --launchers local,basic "
                                  f"--work {work} --json {out}")
    record = read_json(out)
    # each launcher: one timed run (nothing sampled beside it) and one run sampled for memory
    timed = {r["launcher"]: r for r in record["runs"] if not r["sampled"]}
    sampled = {r["launcher"]: r for r in record["runs"] if r["sampled"]}
    assert sorted(timed) == sorted(sampled) == ["basic", "local"] and len(record["runs"]) == 4
    for run in [*timed.values(), *sampled.values()]:
        assert run["returncode"] == 0 and run["wall_s"] > 0 and run["cpu_s"] > 0
        results = [json.loads(p.read_text()) for p in (work / run["label"]).glob("*/result.json")]
        assert [r["status"] for r in results] == ["completed"] * 2, results
    assert all(r["peak_pss_gb"] is None and r["max_processes"] is None for r in timed.values())
    assert all(r["peak_pss_gb"] > 0 for r in sampled.values())
    assert sampled["local"]["max_processes"] >= 2  # the driver and its workers (basic runs the jobs in its own process)
    summary = record["summary"]["local_vs_basic"]
    assert summary["fastest_ratio"] == pytest.approx(timed["local"]["wall_s"] / timed["basic"]["wall_s"])
    assert summary["sampled_run_ratio"] == pytest.approx(sampled["local"]["wall_s"] / sampled["basic"]["wall_s"])
    assert re.search(r"sweepit local / basic: wall [\d.]+x \(target <= 0.5x: (met|MISSED)\)"
                     r".*the memory runs \(sampled\): wall [\d.]+x, peak PSS [\d.]+x", proc.stdout), proc.stdout


@pytest.mark.tier_slow
def test_bench_optuna(tmp_path: Path) -> None:
    """The digits grid (3 optimizers x 2 rates, 1 epoch, in one process: each imports torch), the replay, and one run
    of the study itself; a tolerance of 1 makes any completed trial reach the target, so the sweeper's run stops at its
    first."""
    out, work = tmp_path / "optuna.json", tmp_path / "work"
    proc = make("bench-optuna", f"--grid-lrs 2 --epochs 1 --processes 1 --seeds 1 --verify 1 --tolerance 1 "
                                f"--sweeper-seeds 1 --sweeper-methods random --work {work} --json {out}", "MNIST_ROOT=")
    record = read_json(out)
    assert record["task"] == "digits" and len(record["grid"]) == 6 and record["grid_epochs"] == 6
    assert 0 < record["grid_best"] <= 1 and record["verify"][0]["same_curve"] is True
    assert sorted(record["methods"]) == ["random", "tpe", "tpe+hyperband"]
    assert all(m["reached"] == 1 for m in record["methods"].values())
    (run,) = record["sweeper"]["random"]["runs"]
    assert run["reached"] and run["epochs"] >= 1 and run["trials"] >= 1
    assert Path(run["sweep_dir"]).parent.parent == work and (Path(run["sweep_dir"]) / "optuna.journal").is_file()
    assert "sweeper random seed 0: reached the target with" in proc.stdout
    assert list(work.glob("grid-*.json")), "the grid's cache goes under --work"


@pytest.mark.tier_slow
def test_bench_halving(tmp_path: Path) -> None:
    """2 optimizers x 2 rates for 3 epochs (eta 3: one rung, at epoch 1), against one full grid."""
    out, work = tmp_path / "halving.json", tmp_path / "work"
    proc = make("bench-halving", f"--optimizers adam,sgd --lrs 0.1,0.001 --epochs 3 --seeds 1 --work {work} "
                                 f"--json {out}")
    record = read_json(out)
    assert record["epochs"] == {"halving": 4 * 1 + 1 * 2, "grid": 4 * 3}
    assert sorted(record["runs"]) == ["grid-seed0", "halving"] and record["spread"] == 0.0
    assert record["pick_same_as_grid_bit_for_bit"] is True and record["within_spread"] is True
    assert 0 < record["epoch_s"]["halving"] < record["epoch_s"]["grid"]
    assert record["epoch_s_ratio"] == pytest.approx(record["epoch_s"]["halving"] / record["epoch_s"]["grid"])
    assert record["runs"]["halving"]["saved_line"].startswith("halving: 6 of 12 epochs, ")
    assert re.search(r"^epoch-seconds measured: halving [\d.]+, full grid seed 0 [\d.]+ \([\d.]+x; goal <= 0.35x: "
                     r"(met|MISSED)\)$", proc.stdout, re.MULTILINE), proc.stdout
    assert sorted(p.name for p in work.glob("*/*")) == ["grid-seed0", "halving"], "the sweeps go under --work"


@pytest.mark.tier_slow
def test_bench_mnist_best(tmp_path: Path, mnist_root: Path) -> None:
    """The study as it stands (CNN, augmentation, stratified batches) for one epoch on the MNIST slice."""
    out, work = tmp_path / "mnist_best.json", tmp_path / "work"
    proc = make("bench-mnist-best", f"--threads 1 --work {work} --json {out} epochs=1 "
                                    "hydra.callbacks.summary.report=false", f"MNIST_ROOT={mnist_root}")
    record = read_json(out)
    assert record["exit_code"] == 0 and record["target_acc"] == 0.994
    (job,) = record["jobs"]
    assert Path(job["job_dir"]).parent.parent == work
    assert job["result"]["status"] == "completed" and job["result"]["epochs_completed"] == 1
    (epoch,) = job["epochs"]
    assert 0 < epoch["val_acc"] <= 1 and epoch["samples_per_s"] > 0
    assert re.search(r"^final test accuracy: 0\.\d{4}$", proc.stdout, re.MULTILINE), proc.stdout
    assert re.search(r"^target: final test accuracy >= 99\.4%: (MET|MISSED)$", proc.stdout, re.MULTILINE)


@pytest.mark.tier_slow
def test_bench_job_overhead(tmp_path: Path) -> None:
    # Not a make target: the per-job costs alone, which bench/RESULTS.md quotes.
    out = tmp_path / "overhead.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "bench_job_overhead.py"), "--jobs", "3", "--forks", "2",
                           "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())["figures"]
    for key in ("hydra_ms", "sweepit_ms", "hydra_run_job_ms", "sweepit_run_job_ms", "fork_ms_with_torch._dynamo"):
        assert figures[key] > 0, key
    assert re.search(r"sweepit's run_forked_job [\d.]+ ms CPU \([\d.]+x less\)", proc.stdout), proc.stdout
