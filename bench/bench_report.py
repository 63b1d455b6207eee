"""Time to report a 1,000-job sweep, against reading the same sweep with `summary.collect` alone.

Run: python bench/bench_report.py [--jobs 1000] [--epochs 20] [--rounds 3] [--json PATH]   (or: make bench-report)

The sweep is synthetic (`bench/synthetic_sweep.py`: three swept parameters, 20 epochs of four metrics per job,
a few failed, diverged and running jobs) in a temporary directory. Two figures for each side:
- cold: a new process, as a user types it (`sweepit report DIR`; `python -c "collect(DIR)"` for the baseline),
  interpreter start and imports (matplotlib) included;
- warm: in this process, imports done, the median of `--rounds` runs.
The goal (issue 5) is a few seconds for 1,000 jobs. `--json PATH` writes the raw figures with the command and the
machine, for bench/RESULTS.md to link to.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from machine import machine_info, machine_line, write_json
from sweepit.reporting import build_report
from sweepit.results._summary import collect
from synthetic_sweep import write_synthetic_sweep

GOAL_S = 5.0  # "a few seconds" for 1,000 jobs, cold, on the project's 2-core machines


def _cold(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _warm(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="warm runs of each side; the median is shown")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures, command and machine here")
    args = parser.parse_args()
    started = machine_info()

    with tempfile.TemporaryDirectory() as tmp:
        sweep = Path(tmp) / "outputs" / "synthetic" / "2026-01-01_00-00-00"
        t0 = time.perf_counter()
        write_synthetic_sweep(sweep, n_jobs=args.jobs, n_epochs=args.epochs)
        print(f"sweep: {args.jobs} jobs x {args.epochs} epochs written in {time.perf_counter() - t0:.1f} s")

        cold_base = _cold(f"from sweepit.results._summary import collect; collect({str(sweep)!r})")
        cold_report = _cold(f"import sys; from sweepit.cli import main; sys.exit(main(['report', {str(sweep)!r}]))")
        warm_base = _warm(lambda: collect(sweep), args.rounds)
        warm_report = _warm(lambda: build_report(sweep), args.rounds)
        plots = sorted(p.name for p in (sweep / "report").glob("*.png"))

    print(f"{'':34}{'cold (new process)':>20}{'warm (median)':>16}")
    print(f"{'summary.collect (baseline)':34}{cold_base:>18.2f} s{warm_base:>14.2f} s")
    print(f"{'sweepit report (CSV, MD, HTML, plots)':34}{cold_report:>18.2f} s{warm_report:>14.2f} s")
    print(f"{'ratio report / baseline':34}{cold_report / cold_base:>18.1f} x{warm_report / warm_base:>14.1f} x")
    print(f"plots: {', '.join(plots)}")
    verdict = "meets" if cold_report <= GOAL_S else "misses"
    print(f"{verdict} the goal: {args.jobs} jobs reported in {cold_report:.2f} s cold (goal <= {GOAL_S:.0f} s)")
    print(machine_line())
    if args.json is not None:
        write_json(args.json, {
            "benchmark": "report", "settings": {"jobs": args.jobs, "epochs": args.epochs, "rounds": args.rounds},
            "cold_s": {"baseline_collect": cold_base, "sweepit_report": cold_report},
            "warm_median_s": {"baseline_collect": warm_base, "sweepit_report": warm_report},
            "ratio_cold": cold_report / cold_base, "ratio_warm": warm_report / warm_base, "plots": plots,
            "goal_s": GOAL_S, "met": cold_report <= GOAL_S}, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
