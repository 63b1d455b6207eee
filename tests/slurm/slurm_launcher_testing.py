"""Helpers of the Slurm launcher's tests: run a sweep driver, watch its output, read what it left behind."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweepit.results._manifest import Manifest, read_manifest
from sweepit_testing import SWEEPIT, child_env, run_command
from sweepit_testing import wait_until as wait_until  # the tests here import it from this module

ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).parent / "app" / "slurm_test_app.py"
TRAIN = ROOT / "train.py"
# A real training job of a few seconds: two epochs of linear regression, on the CPU.
LINREG = ["task=linreg", "epochs=2", "device=cpu", "timeout_min=5", "hydra/launcher=slurm"]
CPU_ONLY = "hydra.launcher.gpus_key=null"  # jobs ask for no GPU: a CPU-only request (packed workers hold none)


def driver_env(**extra: str) -> dict[str, str]:
    env = child_env(**extra)
    env.pop("SLURM_APP_FAIL_ON", None)
    env.update(extra)
    return env


def run(script: Path, sweep_dir: Path, *overrides: str, env: dict[str, str] | None = None,
        timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    """One sweep driver, to its end."""
    return run_command([sys.executable, script, "-m", f"hydra.sweep.dir={sweep_dir}", *overrides], ROOT,
                env or driver_env(), timeout_s)


def sweepit(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return run_command([SWEEPIT, *args], ROOT, driver_env(), timeout_s)


class Driver:
    """A sweep driver in the background; its stderr and stdout lines are kept with the time each arrived."""

    def __init__(self, script: Path, sweep_dir: Path, *overrides: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, str(script), "-m", f"hydra.sweep.dir={sweep_dir}", *overrides],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                     env=env or driver_env())
        self.lines: list[tuple[float, str]] = []      # stderr
        self.out_lines: list[tuple[float, str]] = []  # stdout
        self.stdout = ""
        self._readers = [threading.Thread(target=self._read, args=(stream, kept), daemon=True)
                         for stream, kept in ((self.proc.stderr, self.lines), (self.proc.stdout, self.out_lines))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, kept: list[tuple[float, str]]) -> None:
        for line in stream:
            kept.append((time.monotonic(), line))

    def wait_for_line(self, predicate: Callable[[str], bool], timeout_s: float, stdout: bool = False) -> float:
        """When (time.monotonic()) the first stderr (or stdout) line matching `predicate` arrived."""
        lines = self.out_lines if stdout else self.lines
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for at, line in list(lines):
                if predicate(line):
                    return at
            time.sleep(0.05)
        raise AssertionError(f"no such line in {timeout_s} s; stderr so far:\n{self.stderr}")

    def finish(self, timeout_s: float = 240) -> int:
        code = self.proc.wait(timeout=timeout_s)
        for reader in self._readers:
            reader.join(timeout=10)
        self.stdout = "".join(line for _, line in self.out_lines)
        return code

    @property
    def stderr(self) -> str:
        return "".join(line for _, line in self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def manifest(sweep_dir: Path) -> Manifest:
    return read_manifest(sweep_dir)


def job_dirs(sweep_dir: Path) -> dict[int, Path]:
    return {int(p.name.split("_")[0]): p for p in sweep_dir.iterdir() if p.is_dir() and p.name[0].isdigit()}


def read_json(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def result(job_dir: Path) -> dict[str, Any]:
    return read_json(job_dir / "result.json")


def tasks(job_dir: Path) -> list[dict[str, Any]]:
    """The `.slurm/task-<rank>.json` records of a job, by rank."""
    return [read_json(p) for p in sorted((job_dir / ".slurm").glob("task-*.json"))]


def slurm_ids(sweep_dir: Path) -> dict[int, str]:
    return {n: str(e.extra["slurm_job_id"]) for n, e in manifest(sweep_dir).jobs.items()}


def scancel(*args: str) -> None:
    subprocess.run(["scancel", *args], check=True, timeout=30)


# What differs between two runs of the same training: the clock.
TIMING = ("epoch_time_s", "samples_per_s", "step_time_s")


def epochs(job_dir: Path) -> list[int]:
    return [json.loads(line)["epoch"] for line in (job_dir / "metrics.jsonl").read_text().splitlines()]


def rows(job_dir: Path) -> list[dict[str, float]]:
    lines = (job_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]


def only_job_dir(sweep: Path, num: int) -> Path:
    return next(p for p in sweep.iterdir() if p.is_dir() and p.name.startswith(f"{num}_"))


def assert_whole(job_dir: Path) -> None:
    """Nothing half-written: no temporary file of an atomic write, and the metrics are epochs 1..n once each,
    as many as the result says."""
    assert not list(job_dir.glob(".*.tmp")), list(job_dir.glob(".*.tmp"))
    seen = epochs(job_dir)
    assert seen == list(range(1, len(seen) + 1)), seen
    assert result(job_dir)["epochs_completed"] == len(seen)


def only_job_dir_when(sweep: Path, num: int, timeout_s: float = 120) -> Path:
    wait_until(lambda: sweep.is_dir() and any(p.name.startswith(f"{num}_") for p in sweep.iterdir()),
               f"job {num}'s directory", timeout_s)
    return only_job_dir(sweep, num)
