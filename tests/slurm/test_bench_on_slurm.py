"""`make bench-slurm`, `make bench-slurm-jobs`, `make bench-optuna-workers` and `make bench-scale` on the local
cluster, tiny (two jobs, two trials, 50 and 200 generated jobs), their figures read back from the `--json` file each
wrote. The first three hold /tmp/slurm-bench.lock themselves, so a benchmark already running on the cluster is waited
for, not disturbed (the last only asks the cluster for its partition). A missed target (a figure) exits 1; a crash
writes no JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sweepit_testing import REPO

pytestmark = [pytest.mark.slow, pytest.mark.tier_slow]  # benchmark smokes: make test-slow


def make(target: str, args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run the target; return it and the JSON it wrote to the `--json` path in `args` (its last word)."""
    proc = subprocess.run(["make", "-C", str(REPO), target, f"ARGS={args}", f"PY={sys.executable}"],
                          capture_output=True, text=True, timeout=540)
    out = Path(args.split()[-1])
    assert out.is_file(), f"{target} wrote no {out}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc, json.loads(out.read_text())


def test_bench_slurm(tmp_path: Path) -> None:
    """sweepit's launcher alone (comparing with submitit_slurm would install hydra-submitit-launcher)."""
    work = tmp_path / "work"
    proc, record = make("bench-slurm", f"--launchers slurm --jobs 2 --cancel-jobs 2 --cancel-cap-s 60 "
                                       f"--work {work} --json {tmp_path / 'slurm.json'}")
    (run,) = record["runs"]
    assert run["launcher"] == "slurm" and run["returncode"] == 0 and run["n_completed"] == 2
    assert run["calls"]["sbatch"] == 1 and run["wall_s"] > 0  # both jobs in one array
    latency = record["cancel_latency_s"]["slurm"]
    assert latency is not None and latency > 0, "the driver did not report the scancelled job within 60 s"
    assert proc.returncode == 0 or (record["met"] is False and latency > record["target_cancel_s"]), proc.stderr
    assert "scancel of one running job until the driver reports it" in proc.stdout
    assert list(work.glob("sweep-slurm-2-*/*/result.json")), "the sweeps go under --work"


def test_bench_slurm_jobs(tmp_path: Path) -> None:
    """sweepit's launcher alone (comparing with submitit_slurm would install hydra-submitit-launcher)."""
    work = tmp_path / "work"
    proc, record = make("bench-slurm-jobs", f"--launchers slurm --jobs 2 --work-s 0.1 --pairs 1 --work {work} "
                                            f"--json {tmp_path / 'jobs.json'}")
    assert proc.returncode == 0 and record["all_completed"], proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = record["runs"]
    assert run["launcher"] == "slurm" and len(run["in_job_s"]) == 2 and len(run["job_ids"]) == 2
    assert run["driver_cpu_s"] > 0 and run["first_load_s"] > 0 and run["last_done_s"] >= run["first_load_s"]
    assert min(run["pickle_bytes"]) > 0 and len(run["job_cpu_s"]) == 2  # sacct's CPU of each job
    figures = record["figures"]["slurm"]
    assert 0 < figures["job_overhead_s"] < figures["in_job_s"] < figures["wall_s"]
    assert "2 Slurm jobs of 0.1 s" in proc.stdout


def test_bench_optuna_workers(tmp_path: Path) -> None:
    work = tmp_path / "work"
    proc, record = make("bench-optuna-workers", f"--trials 2 --parallel 2 --epochs 1 --work {work} "
                                                f"--json {tmp_path / 'workers.json'}")
    runs = {r["mode"]: r for r in record["runs"]}
    assert sorted(runs) == ["per_trial", "workers"]
    for r in runs.values():
        assert r["exit_code"] == 0 and r["n_completed"] + r["n_pruned"] == 2 and r["wall_s"] > 0, r
        assert Path(r["sweep_dir"]).parent == work
    assert runs["per_trial"]["calls"]["sbatch"] == 2 and runs["workers"]["calls"]["sbatch"] == 1
    assert record["ratio_workers_to_per_trial"] > 0 and record["verdict"] in ("met", "missed")
    assert record["argv"] and record["machine_info"]["code_version"]  # the command and the commit it ran
    assert proc.returncode == 0 or record["verdict"] == "missed", proc.stderr
    assert "worker / per-trial wall: " in proc.stdout


def test_bench_scale(tmp_path: Path) -> None:
    """Two tiny sizes: every step runs, in its own process, and the growth between them is judged (the Slurm
    launcher's planning asks the local cluster for its partition once, as a real sweep does)."""
    proc, record = make("bench-scale", f"--jobs 50,200 --epochs 2 --real 400 --work {tmp_path} "
                                       f"--json {tmp_path / 'scale.json'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    small, large = record["sizes"]
    assert (small["jobs"], large["jobs"]) == (50, 200)
    for size in (small, large):
        plan = size["plan"]
        assert plan["sbatch_calls"] == 1 and plan["max_array_size"] == 1001  # the cluster's MaxArraySize
        assert plan["submit_user_s"] > 0 and plan["peak_mb"] > 0
        assert size["writes"]["n_writes"] == 2 * size["jobs"] and size["writes"]["journal_writes_s"] > 0
        assert size["fs"]["fs_s"] > 0
        for step in ("status", "ls", "report"):
            assert size[step]["cpu_s"] > 0, step
        assert size["report"]["html_mb"] > 0 and size["report"]["csv_mb"] > 0
    assert "growth from 50 to 200 jobs (x4):" in proc.stdout
    assert proc.stdout.count("(linear or better)") + proc.stdout.count("(faster than linear)") == 8
    assert "no verdict" in proc.stdout  # the goals are for 100,000 jobs
    # a real sweep of examples/any_hydra_app: every job ran, and the driver's RSS was sampled while they ran
    (real,) = record["real"]
    assert real["real_jobs"] == real["real_completed"] == 400 and real["real_peak_mb"] > 0
    assert real["real_samples"] and all(n <= 400 and mb > 0 for n, mb in real["real_samples"])
    # the second half of the jobs (200) takes several seconds: enough samples, one a second, for a slope
    assert real["real_samples_used"] >= 3 and real["real_growth_kb_per_job"] is not None
    assert "KB a job (least squares over" in proc.stdout
    assert not list(tmp_path.glob("tmp*/")), "the generated sweeps are removed"


def test_bench_packing(tmp_path: Path) -> None:
    work = tmp_path / "work"
    proc, record = make("bench-packing", f"--jobs 6 --work-s 0.1 --workers 2 --work {work} --status-every 1 "
                                         f"--json {tmp_path / 'packing.json'}")
    runs = {r["mode"]: r for r in record["runs"]}
    assert sorted(runs) == ["packed", "per_job"]
    for r in runs.values():
        assert r["exit_code"] == 0 and r["n_completed"] == 6 and r["wall_s"] > 0, r
        assert Path(r["sweep_dir"]).parent == work
    assert runs["packed"]["slurm_jobs_created"] == 2 and runs["per_job"]["slurm_jobs_created"] == 6
    assert runs["packed"]["calls"]["sbatch"] == 1 and runs["per_job"]["calls"]["sbatch"] == 1
    assert record["ideal_s"] == 0.3 and record["overhead_packed_to_ideal"] > 1  # 6 x 0.1 s on 2 workers
    phases = runs["packed"]["phases"]  # from the workers' logs: every job seen started and ended
    assert phases["jobs_seen"] == 6 and 0 < phases["driver_start_to_first_job_s"] < runs["packed"]["wall_s"], phases
    assert phases["job_start_to_end_ms_median"] >= 100 and runs["per_job"]["phases"] is None  # a job sleeps 0.1 s
    assert record["argv"] and record["machine_info"]["code_version"]
    assert runs["packed"]["driver_rss_mb_every_5s"][0][1] > 0  # (seconds from the command, MB), from the start
    looks = runs["packed"]["status_cpu_s"]  # `sweepit status` run during the sweep: each look's CPU, beside its wall
    assert looks["n"] >= 1 and looks["n"] == runs["packed"]["status_s"]["n"] and min(looks["all"]) > 0, looks
    assert proc.returncode == 0 or record["verdict"] == "missed", proc.stderr
    assert "packed / ideal: " in proc.stdout and "packed / one Slurm job per job: " in proc.stdout


def test_bench_packing_to_the_first_job_only(tmp_path: Path) -> None:
    """`--first-job-only` times the command to the first job's start, with the driver's memory until then (its
    plan), then cancels the sweep: the other jobs never run."""
    work = tmp_path / "work"
    proc, record = make("bench-packing", f"--jobs 6 --work-s 30 --workers 2 --first-job-only --work {work} "
                                         f"--json {tmp_path / 'first.json'}")
    (run,) = record["runs"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert run["command_to_first_job_s"] > 0 and run["driver_peak_rss_mb_to_first_job"] > 0, run
    assert "driver peak RSS until then" in proc.stdout
    ended = [p for p in Path(run["sweep_dir"]).glob("*/result.json") if '"completed"' in p.read_text()]
    assert not ended, "the sweep was cancelled at its first job's start: no job of 30 s could have completed"
