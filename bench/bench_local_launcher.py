"""Wall time, CPU time and process-tree memory of one sweep under three Hydra launchers; per-job overhead.

Run: python bench/bench_local_launcher.py [--jobs 32] [--epochs 5] [--repeat 3] [--keep-submitit] [--json F]
     (or: make bench-launcher; about 7 minutes and, for submitit_local, about 10 GB of memory)

The sweep is `train.py -m task=linreg epochs=5 seed=range(32)`: 32 short real trainings (a few tenths of a
second of work each), run by
- sweepit's local launcher (`hydra/launcher=local`, its defaults: 2 workers on this 2-core machine),
- Hydra's basic launcher (`hydra/launcher=basic`: one process, jobs one after another),
- hydra-submitit-launcher's `submitit_local` (a process per job, all started at once). It is not a
  dependency of sweepit: when missing, this script installs it with
  `python -m pip install hydra-submitit-launcher==1.2.0 --no-deps` (submitit itself is already one) and
  uninstalls it at the end, because its plugin would otherwise be scanned by every Hydra start.
  psutil, which samples memory, is installed the same way when missing (and kept).
Timed runs give wall time and CPU time (the user + system time of the driver and every descendant, from
wait4) and nothing else: nothing runs beside them. Memory comes from one more run of the main sweep per launcher
(`memory` in the output and the JSON), whose process tree (the driver and every descendant) is sampled every
50 ms: the peak of the summed RSS (pages shared after fork count once per process, so this overstates forked
workers) and of the summed PSS (shared pages split between their users: the memory the tree really holds).
The sampler is kept out of the timed runs because it is not free: reading one process's PSS takes ~2.6 ms of CPU
on this machine, every 50 ms for every process of the tree, and on 2 cores it takes CPU from the local launcher's
workers, which use both cores, but not from the basic launcher, which leaves one idle; the memory run's wall
ratio is printed too, to show how much. Then per-job overhead: N trivial jobs (`epochs=1
data.n_synthetic=100`) and 1 such job, giving wall/N and the marginal (wall(N) - wall(1)) / (N - 1).

The local and basic runs alternate `--repeat` times, so that load from other processes on a shared machine
hits both alike, and the fastest run of each is reported (the least disturbed), with the run-by-run
ratios and their median; submitit_local runs once, last, because the load it leaves behind lasts a while, and
sampled (its only run also gives its memory): local / submitit_local compares the two memory runs.
`--baseline DIR` adds `local@baseline`: the local launcher of another checkout (DIR holds its train.py, conf/
and src/, e.g. `git archive <commit> src conf train.py | tar -x -C DIR`), run with this interpreter and
PYTHONPATH=DIR/src, in the same alternation: a before/after comparison under the same load.
Targets (issue 14): local / basic wall <= 0.5x on the main sweep, marginal per-job cost <= 50 ms.
`--json F` writes every run and the summary to F (the raw output that bench/RESULTS.md links to); the sweeps and
their logs go under `--work DIR` (default bench/out/launcher/).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "launcher"  # --work replaces it
LAUNCHERS = ("local", "basic", "submitit_local")
BASELINE = "local@baseline"
SUBMITIT_SPEC = "hydra-submitit-launcher==1.2.0"
SAMPLE_S = 0.05
TARGET_VS_BASIC = 0.5  # issue 14 (issue 3: 0.75)
TARGET_MARGINAL_S = 0.05  # issue 14: one more job costs the local launcher at most 50 ms of wall time
TARGET_VS_SUBMITIT = 0.2
TARGET_PEAK_GB = 1.5
GB = 1024**3


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "-q", *args]
    print(f"$ {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True)


def ensure_installed(module: str, spec: str) -> bool:
    """Install `spec` (no dependencies) when `module` cannot be imported; True when this call installed it."""
    if importlib.util.find_spec(module) is not None:
        return False
    pip("install", spec, "--no-deps")
    importlib.invalidate_caches()
    return True


@dataclass
class Run:
    launcher: str
    n_jobs: int
    wall_s: float
    cpu_s: float
    peak_rss_gb: float | None        # None: a timed run, not sampled
    peak_pss_gb: float | None
    max_processes: int | None
    returncode: int
    label: str = ""
    loadavg_1min: float = 0.0
    sampled: bool = False


def measure(cmd: list[str], log: Path, cwd: Path = REPO, env: dict[str, str] | None = None,
            sample: bool = False) -> tuple[float, float, float | None, float | None, int | None, int]:
    """Run `cmd`: wall s, CPU s (user + system, every process of the tree), and with `sample` (else None) its
    tree's peak RSS GB, peak PSS GB and most processes at once; then the exit status."""
    import psutil

    with open(log, "w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        root = psutil.Process(proc.pid)
        peak_rss = peak_pss = 0
        most = 0
        while not sample:
            # wait4 rather than wait(): its resource usage covers the driver and every descendant it reaped.
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            returncode = os.waitstatus_to_exitcode(status)
            return wall, usage.ru_utime + usage.ru_stime, None, None, None, _exit_status(proc, returncode, log)
        while True:
            # wait4 rather than poll(): its resource usage covers the driver and every descendant it reaped.
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            rss = pss = 0
            for p in tree:
                try:
                    info = p.memory_full_info()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                rss += info.rss
                pss += info.pss
            peak_rss, peak_pss, most = max(peak_rss, rss), max(peak_pss, pss), max(most, len(tree))
            time.sleep(SAMPLE_S)
        wall = time.perf_counter() - t0
    returncode = _exit_status(proc, os.waitstatus_to_exitcode(status), log)
    return wall, usage.ru_utime + usage.ru_stime, peak_rss / GB, peak_pss / GB, most, returncode


def _exit_status(proc: subprocess.Popen[bytes], returncode: int, log: Path) -> int:
    proc.returncode = returncode  # reaped by wait4: Popen must not wait for it again
    if returncode != 0:
        print(f"  {log.stem}: exit status {returncode}; see {log}", flush=True)
    return returncode


def sweep(launcher: str, n_jobs: int, overrides: list[str], tag: str, work: Path,
          baseline: Path | None = None, sample: bool = False) -> Run:
    label = f"{tag}-{launcher}-{n_jobs}-{time.strftime('%H%M%S')}".replace("@", "-")
    cwd, env = REPO, None
    if launcher == BASELINE:
        assert baseline is not None
        cwd, env = baseline, {**os.environ, "PYTHONPATH": str(baseline / "src")}
    cmd = [sys.executable, "train.py", "-m", "task=linreg", f"seed=range({n_jobs})", *overrides,
           f"hydra/launcher={launcher.split('@')[0]}", f"hydra.sweep.dir={work / label}"]
    wall, cpu, rss, pss, most, rc = measure(cmd, work / f"{label}.log", cwd, env, sample)
    run = Run(launcher, n_jobs, wall, cpu, rss, pss, most, rc, label, os.getloadavg()[0], sample)
    memory = f", peak RSS {rss:5.2f} GB, peak PSS {pss:5.2f} GB, {most} processes" if sample else ""
    print(f"  {tag:8s} {launcher:15s} {n_jobs:3d} jobs: {wall:6.1f} s wall, {cpu:6.1f} s CPU{memory}, "
          f"loadavg {os.getloadavg()[0]:.1f}", flush=True)
    return run


def best_run(runs: list[Run]) -> Run:
    """The fastest run: on a shared machine, the one least slowed down by other processes."""
    return min(runs, key=lambda r: r.wall_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=32, help="jobs in the main sweep")
    parser.add_argument("--epochs", type=int, default=5, help="epochs of each linreg job in the main sweep")
    parser.add_argument("--trivial-jobs", type=int, default=32, help="N for the per-job overhead (0: skip)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each measurement (submitit_local: one); the fastest is shown")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS),
                        help="comma-separated subset of " + ",".join(LAUNCHERS))
    parser.add_argument("--keep-submitit", action="store_true", help="do not uninstall hydra-submitit-launcher")
    parser.add_argument("--json", type=Path, help="write every run and the summary to this JSON file")
    parser.add_argument("--work", type=Path, default=OUT, help=f"the sweeps and their logs (default {OUT})")
    parser.add_argument("--baseline", type=Path,
                        help="a checkout (train.py, conf/, src/) whose local launcher runs as local@baseline")
    args = parser.parse_args(argv)
    launchers = [name for name in args.launchers.split(",") if name]
    if args.baseline is not None:
        args.baseline = args.baseline.resolve()
        launchers.insert(launchers.index("local") + 1 if "local" in launchers else 0, BASELINE)
    unknown = sorted(set(launchers) - {*LAUNCHERS, BASELINE})
    if unknown:
        parser.error(f"--launchers must name some of {', '.join(LAUNCHERS)}, but got {', '.join(unknown)}")

    ensure_installed("psutil", "psutil")
    installed_submitit = "submitit_local" in launchers and ensure_installed(
        "hydra_plugins.hydra_submitit_launcher", SUBMITIT_SPEC)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO / "bench"))
    try:
        # The machine's line comes from the process that warms the caches for the timed runs (torch and torch._dynamo
        # imported once): this one imports no torch of its own.
        subprocess.run([sys.executable, "-c", "import torch, torch._dynamo; from machine import machine_line; "
                        "print(machine_line(), flush=True)"], cwd=REPO / "bench", check=True)
        main_runs: dict[str, list[Run]] = {name: [] for name in launchers}
        memory_runs: dict[str, Run] = {}
        trivial: dict[str, dict[int, list[Run]]] = {name: {} for name in launchers if name != "submitit_local"}
        quick = [name for name in launchers if name != "submitit_local"]
        for _ in range(args.repeat):  # interleaved, so that load from elsewhere hits both launchers alike
            for name in quick:
                main_runs[name].append(sweep(name, args.jobs, [f"epochs={args.epochs}"], "sweep", work, args.baseline))
                save_json(args, main_runs, trivial, None, memory_runs)  # each run as it ends: a stop keeps them
            for name in quick:
                for n in (1, args.trivial_jobs) if args.trivial_jobs > 1 else ():
                    trivial[name].setdefault(n, []).append(
                        sweep(name, n, ["epochs=1", "data.n_synthetic=100"], "trivial", work, args.baseline))
                    save_json(args, main_runs, trivial, None, memory_runs)
        # memory: one sampled run each; submitit_local last (its load lingers), and only this one
        for name in sorted(launchers, key=lambda name: name == "submitit_local"):
            memory_runs[name] = sweep(name, args.jobs, [f"epochs={args.epochs}"], "memory", work, args.baseline,
                                      sample=True)
            save_json(args, main_runs, trivial, None, memory_runs)
    finally:
        if installed_submitit and not args.keep_submitit:
            pip("uninstall", "-y", "hydra-submitit-launcher")
    main_runs = {name: runs for name, runs in main_runs.items() if runs}
    summary = report(main_runs, trivial, memory_runs, args)
    save_json(args, main_runs, trivial, summary, memory_runs)
    if args.json is not None:
        print(f"raw runs and summary: {args.json}")
    return 0


def save_json(args: Any, main_runs: dict[str, list[Run]], trivial: dict[str, dict[int, list[Run]]],
              summary: dict[str, Any] | None, memory_runs: dict[str, Run]) -> None:
    """`--json`: every run so far, and the summary once there is one (None: the runs are not all done)."""
    if args.json is None:
        return
    from machine import cpu_model

    raw = {"command": [Path(sys.executable).name, *sys.argv], "nproc": os.cpu_count(), "cpu": cpu_model(),
           "args": {k: str(v) for k, v in vars(args).items()}, "summary": summary,
           "runs": [dataclasses.asdict(r) for rs in main_runs.values() for r in rs]
           + [dataclasses.asdict(r) for by_n in trivial.values() for rs in by_n.values() for r in rs]
           + [dataclasses.asdict(r) for r in memory_runs.values()]}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(raw, indent=1) + "\n")


def report(main_runs: dict[str, list[Run]], trivial: dict[str, dict[int, list[Run]]], memory_runs: dict[str, Run],
           args: Any) -> dict[str, Any]:
    """Print the tables; return the same figures for the JSON file."""
    summary: dict[str, Any] = {}
    runs = {name: best_run(rs) for name, rs in main_runs.items()}
    print(f"\n{args.jobs}-job sweep `train.py -m task=linreg epochs={args.epochs} seed=range({args.jobs})`: wall "
          f"and CPU the fastest of {args.repeat} timed run(s); memory from the sampled run (submitit_local: that run "
          "only):")
    print(f"{'launcher':16s} {'wall s':>7s} {'CPU s':>7s} {'peak RSS GB':>12s} {'peak PSS GB':>12s} "
          f"{'processes':>10s} {'exit':>5s}")
    for name, m in memory_runs.items():
        r = runs.get(name, m)
        print(f"{name:16s} {r.wall_s:7.1f} {r.cpu_s:7.1f} {m.peak_rss_gb or 0:12.2f} {m.peak_pss_gb or 0:12.2f} "
              f"{m.max_processes or 0:10d} {max(r.returncode, m.returncode, key=abs):5d}")
    local = runs.get("local")
    if local is not None:
        for other, target in (("basic", TARGET_VS_BASIC), ("submitit_local", TARGET_VS_SUBMITIT), (BASELINE, None)):
            timed = other in runs
            if not timed and not (other in memory_runs and "local" in memory_runs):
                continue
            # submitit_local has no timed run: its ratio compares the two sampled runs, like with like
            mine, theirs = (local, runs[other]) if timed else (memory_runs["local"], memory_runs[other])
            ratio = mine.wall_s / theirs.wall_s
            verdict = "no target"
            if target is not None:
                verdict = f"target <= {target}x: {'met' if ratio <= target else 'MISSED'}"
            line = (f"sweepit local / {other}: wall {ratio:.2f}x ({verdict}), CPU {mine.cpu_s / theirs.cpu_s:.2f}x"
                    + ("" if timed else " (the sampled runs)"))
            pairs = [a.wall_s / b.wall_s for a, b in zip(main_runs["local"], main_runs[other], strict=False)] \
                if timed else []
            pairs = pairs or [ratio]
            if len(pairs) > 1:  # runs made one after the other saw about the same load
                line += (f"; run by run: {', '.join(f'{r:.2f}x' for r in pairs)}, median "
                         f"{statistics.median(pairs):.2f}x")
            entry = {"fastest_ratio": ratio, "pair_ratios": pairs, "median_pair_ratio": statistics.median(pairs),
                     "target": target, "met_fastest": None if target is None else ratio <= target,
                     "met_median": None if target is None else statistics.median(pairs) <= target}
            if timed and other in memory_runs and "local" in memory_runs:
                a, b = memory_runs["local"], memory_runs[other]
                entry["sampled_run_ratio"] = sampled = a.wall_s / b.wall_s
                pss, rss = (a.peak_pss_gb or 0) / (b.peak_pss_gb or 1), (a.peak_rss_gb or 0) / (b.peak_rss_gb or 1)
                line += f"; the memory runs (sampled): wall {sampled:.2f}x, peak PSS {pss:.2f}x, peak RSS {rss:.2f}x"
            print(line)
            summary[f"local_vs_{other}"] = entry
    m = memory_runs.get("local")
    if m is not None and m.peak_pss_gb is not None and m.peak_rss_gb is not None:
        print(f"sweepit local tree peak: PSS {m.peak_pss_gb:.2f} GB, RSS {m.peak_rss_gb:.2f} GB "
              f"(target <= {TARGET_PEAK_GB} GB: {'met' if m.peak_pss_gb <= TARGET_PEAK_GB else 'MISSED'} "
              f"by PSS, {'met' if m.peak_rss_gb <= TARGET_PEAK_GB else 'missed'} even by RSS)")
    if any(trivial.values()):
        n = args.trivial_jobs
        print(f"\nPer-job overhead, trivial jobs (`epochs=1 data.n_synthetic=100`), N={n}, fastest runs:")
        for name, by_n in trivial.items():
            one, many = best_run(by_n[1]), best_run(by_n[n])
            marginal = (many.wall_s - one.wall_s) / (n - 1)
            paired = [(b.wall_s - a.wall_s) / (n - 1) for a, b in zip(by_n[1], by_n[n], strict=False)]
            # CPU seconds one more job costs (driver and job together): far less disturbed by other processes
            # than wall time; on C cores, the wall marginal of C parallel workers cannot go below it / C.
            cpu_paired = [(b.cpu_s - a.cpu_s) / (n - 1) for a, b in zip(by_n[1], by_n[n], strict=False)]
            verdict = ""
            if name == "local":
                met = "met" if marginal <= TARGET_MARGINAL_S else "MISSED"
                verdict = f" (target <= {TARGET_MARGINAL_S:.3f} s: {met})"
            print(f"{name:16s} wall(1) {one.wall_s:5.1f} s, wall(N) {many.wall_s:5.1f} s, wall/N "
                  f"{many.wall_s / n:.3f} s, marginal (wall(N)-wall(1))/(N-1) {marginal:.3f} s{verdict}, "
                  f"CPU/N {many.cpu_s / n:.3f} s; marginal run by run {', '.join(f'{m:.3f}' for m in paired)} s, "
                  f"median {statistics.median(paired):.3f} s; "
                  f"CPU marginal median {statistics.median(cpu_paired):.3f} s")
            summary[f"marginal_s_{name}"] = {"fastest": marginal, "pairs": paired,
                                             "median": statistics.median(paired),
                                             "cpu_marginal_pairs": cpu_paired,
                                             "cpu_marginal_median": statistics.median(cpu_paired),
                                             "cpu_per_job_s": many.cpu_s / n}
            if name == "local":
                summary["marginal_s_local"].update(target=TARGET_MARGINAL_S, met=marginal <= TARGET_MARGINAL_S)
        if "submitit_local" in memory_runs:
            s = memory_runs["submitit_local"]
            print(f"{'submitit_local':16s} (from the main sweep) wall/N {s.wall_s / s.n_jobs:.3f} s")
    return summary


if __name__ == "__main__":
    sys.exit(main())
