"""A synthetic sweep directory in the layout train.py leaves, for the tests and benchmarks of the reports (not
shipped in the package: tests/ imports it through pytest's pythonpath, bench/ as its sibling).

    write_synthetic_sweep(tmp / "sweep", n_jobs=1000, n_epochs=20)

No training runs: metrics follow a noisy decay, so a 1,000-job sweep is written in about a second.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from pathlib import Path

from sweepit.results import JobPaths

DEFAULT_GRID = {
    "optimizer": ["sgd", "momentum", "nesterov", "adagrad", "rmsprop", "adam", "adamw", "adamax", "adadelta", "nadam"],
    "lr": ["0.3", "0.1", "0.03", "0.01", "0.003", "0.001", "0.0003", "0.0001", "3e-05", "1e-05"],
    "seed": [str(s) for s in range(10)],
}


def write_synthetic_sweep(sweep_dir: Path, n_jobs: int = 1000, n_epochs: int = 20,
                          grid: dict[str, list[str]] | None = None, seed: int = 0,
                          study: str = "synthetic") -> list[Path]:
    """Job directories for the first `n_jobs` points of `grid` (mostly completed; a few diverged, failed, running)."""
    rng = random.Random(seed)
    grid = DEFAULT_GRID if grid is None else grid
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "multirun.yaml").write_text(f"study: {study}\nhydra:\n  job:\n    config_name: config\n")
    dirs = []
    for num, values in enumerate(itertools.islice(itertools.product(*grid.values()), n_jobs)):
        overrides = [f"{k}={v}" for k, v in zip(grid, values, strict=True)]
        job_dir = sweep_dir / f"{num}_{','.join(sorted(overrides))}"
        (job_dir / ".hydra").mkdir(parents=True, exist_ok=True)
        (job_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
        (job_dir / ".hydra" / "config.yaml").write_text(
            f"study: {study}\nmetric: val_acc\ndirection: maximize\ntrainer:\n  gpus: 1\n")
        fate = rng.random()
        epochs = n_epochs if fate > 0.02 else rng.randrange(1, n_epochs)
        rate = rng.uniform(0.05, 0.5)
        rows = []
        for epoch in range(1, epochs + 1):
            loss = 2.3 * (1 - rate) ** epoch + rng.uniform(0, 0.05)
            rows.append({"epoch": epoch, "train_loss": loss, "train_acc": 1 - loss / 2.5,
                         "val_loss": loss * 1.1, "val_acc": 1 - loss * 1.1 / 2.5,
                         "epoch_time_s": rng.uniform(0.9, 1.1), "samples_per_s": rng.uniform(9e3, 1.1e4)})
        (job_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        dirs.append(job_dir)
        if fate < 0.01:
            continue  # still running: no result.json yet
        status = "completed" if fate > 0.02 else "failed" if fate < 0.015 else "diverged"
        best = max(rows, key=lambda r: r["val_acc"])
        times = [r["epoch_time_s"] for r in rows][1:] or [rows[0]["epoch_time_s"]]  # as train.py: warm-up left out
        result = {"status": status, "metric": "val_acc", "direction": "maximize", "world_size": 1,
                  "objective": rows[-1]["val_acc"] if status == "completed" else None,
                  "final": rows[-1], "epochs_completed": len(rows), "best_epoch": best["epoch"],
                  "best_value": best["val_acc"], "wall_time_s": sum(r["epoch_time_s"] for r in rows) + 2.0,
                  "epoch_time_s_mean": sum(times) / len(times)}
        if status == "failed":
            result["error"] = "RuntimeError: synthetic failure"
        # Not write_result: plain writes, to generate 100,000 jobs quickly (nothing reads them while written).
        JobPaths(job_dir).result.write_text(json.dumps(result, indent=2, sort_keys=True))
    return dirs


def write_followed_sweep(sweep_dir: Path, n_jobs: int, n_running: int = 4,
                         grid: dict[str, list[str]] | None = None) -> float:
    """sweep.json and its journal as a packed sweep's driver leaves them halfway, written by sweepit's own record
    writes: every job planned (queued, its logs in its folder, the sweep's settings: `slurm/_pack.py`), the first
    half claimed by one of 4 workers, started and completed one write at a time, the next `n_running` running. No
    job folders (a look at a followed sweep reads none but those it lists). Returns the CPU seconds of the writes."""
    from sweepit.results._manifest import JobEntry, Manifest, write_manifest

    grid = grid or {**DEFAULT_GRID, "seed": [str(s) for s in range(max(1, -(-n_jobs // 100)))]}
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    jobs = {}
    for num, values in enumerate(itertools.islice(itertools.product(*grid.values()), n_jobs)):
        overrides = [f"{k}={v}" for k, v in zip(grid, values, strict=True)]
        job_dir = f"{sweep_dir}/{num}_{','.join(sorted(overrides))}"
        jobs[num] = JobEntry(num=num, overrides=overrides, job_dir=job_dir, state="queued", extra={
            "packed": 0, "generation": 1, "stdout": f"{job_dir}/stdout.log", "stderr": f"{job_dir}/stderr.log",
            "gpus": 0, "nodes": 1, "timeout_min": 60, "metric": "val_acc", "direction": "maximize",
            "result_grace_s": 60.0})
    m = Manifest(sweep_dir=str(sweep_dir), argv=["python", "train.py", "-m"], cwd=str(sweep_dir.parent),
                 launcher="local", jobs=jobs)
    start = time.process_time()
    write_manifest(m)
    half = n_jobs // 2
    for num in range(half + n_running):
        entry = jobs[num]
        entry.extra.update(slurm_job_id=f"1001_{num % 4}", slurm_array_job_id="1001", slurm_job_name="sweep")
        entry.state, entry.started_at = "running", "2026-11-26T17:00:00.000+00:00"
        write_manifest(m, [num])
        if num < half:
            entry.state, entry.ended_at = "completed", "2026-11-26T17:00:01.000+00:00"
            write_manifest(m, [num])
    return time.process_time() - start
