"""The `sweepit` command: turn sweep directories into tables, fetch data sets, resume sweeps."""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sweepit.errors import SweepitError
from sweepit.results import MAX_ROWS

DEFAULT_ROOTS = (Path("outputs"), Path("multirun"))  # where `sweepit ls` looks: sweepit's folder, Hydra's own


def _summary(args: argparse.Namespace) -> int:
    from sweepit.reporting import sweep_folder
    from sweepit.results import summarize

    print(summarize(sweep_folder(Path(args.sweep_dir), "sweepit summary {}"), max_rows=args.rows))
    return 0


def _ls(args: argparse.Namespace) -> int:
    from sweepit.reporting.listing import format_listing, list_sweeps

    # sweepit's folder, else Hydra's own default (multirun/<date>/<time>, where a plain Hydra app's sweeps go)
    roots = [Path(args.root)] if args.root is not None else [p for p in DEFAULT_ROOTS if p.is_dir()]
    if not roots or not roots[0].is_dir():
        what = f"{args.root} does not" if args.root else "neither outputs nor multirun (Hydra's) is here"
        raise SweepitError(f"the directory to list must exist, but {what}.\nRun `sweepit ls` in the folder the app "
                           "ran in (its sweeps go to outputs/ or multirun/), or name the folder: `sweepit ls DIR`.")
    sweeps = sorted((s for root in roots for s in list_sweeps(root)), key=lambda s: s.created_at, reverse=True)
    print(format_listing(sweeps) if sweeps else
          f"No sweeps under {' or '.join(map(str, roots))} (a sweep directory holds multirun.yaml, sweep.json or job "
          "directories).")
    return 0


def _report(args: argparse.Namespace) -> int:
    from sweepit.reporting import load_sweep, section_text, sweep_folder, write_report
    from sweepit.reporting.table import best_lines, to_text
    from sweepit.results import SweepPaths

    sweep_dir = sweep_folder(Path(args.sweep_dir), "sweepit report {}")
    sweep = load_sweep(sweep_dir)
    gc.freeze()  # the jobs read live until the end: the collector need not walk them again while plotting
    if not sweep.jobs:
        raise SweepitError(f"a sweep directory must hold job directories (<num>_<overrides>/), but {sweep_dir} "
                           "holds none; list sweeps with `sweepit ls`.")
    sections = write_report(sweep)
    table = next(s.table for s in sections if s.table is not None)
    print(to_text(table, max_rows=args.rows), "", sweep.counts_line(), *sweep.unread, *best_lines(sweep), sep="\n")
    for section in sections[1:]:  # further tables (GPU scaling, ...) with their findings
        if section.table is not None:
            print(f"\n{section_text(section)}")
    figures = sum(len(s.figures) for s in sections)
    print(f"report: {SweepPaths(sweep_dir).report_page} (with results.csv, summary.md and {figures} plots)")
    return 0


def _status(args: argparse.Namespace) -> int:
    from sweepit.reporting import sweep_folder
    from sweepit.reporting.sweep_status import sweep_status
    from sweepit.results import read_manifest, report_shows

    sweep_dir = sweep_folder(Path(args.sweep_dir), "sweepit status {}")
    if args.watch is None:
        print(sweep_status(sweep_dir, max_rows=args.rows)[0])
        return 0
    if args.watch <= 0:
        raise SweepitError(f"--watch takes the seconds between looks, a number > 0, but got {args.watch:g}.")
    if _watch(sweep_dir, args.watch, args.rows) and not report_shows(sweep_dir, read_manifest(sweep_dir).jobs.values()):
        from sweepit.reporting import try_build_report

        try_build_report(sweep_dir)  # as a driver does at the end of the sweep it follows
    return 0


def _watch(sweep_dir: Path, every_s: float, max_rows: int) -> bool:
    """Look again every `every_s` until the sweep ends (True) or Ctrl-C stops watching (False). On a terminal the
    table is redrawn in place (rich); elsewhere (a log file, CI) each look that changed anything is printed."""
    import time
    from contextlib import nullcontext
    from datetime import datetime

    from rich.live import Live
    from rich.text import Text

    from sweepit.reporting.sweep_status import sweep_status
    from sweepit.results import LiveReader

    live_reader, last = LiveReader(), ""
    live = Live(auto_refresh=False, vertical_overflow="visible") if sys.stdout.isatty() else None
    try:
        with live or nullcontext():
            while True:
                text, going = sweep_status(sweep_dir, live_reader, max_rows, writes_report=True)
                stamp = datetime.now().strftime("%H:%M:%S")
                if live is not None:
                    hint = f"every {every_s:g} s; Ctrl-C stops watching (the sweep goes on)" if going else "ended"
                    live.update(Text(f"{text}\n[{stamp}] {hint}", no_wrap=True, overflow="ellipsis"), refresh=True)
                elif text != last:
                    print(f"[{stamp}]\n{text}\n", flush=True)
                    last = text
                if not going:
                    return True
                time.sleep(every_s)
    except KeyboardInterrupt:
        return False


def _resume(args: argparse.Namespace) -> int:
    from sweepit.reporting import sweep_folder
    from sweepit.results import command_line, read_manifest, read_study_file, rerun_argv

    # An Optuna study goes on with its sweeper's keys too (n_trials counts the whole study: raised, it searches on).
    # The keys are checked first: a job's key is wrong whatever the folder holds.
    study = read_study_file(Path(args.sweep_dir)) is not None
    kinds = ("hydra.launcher.", "hydra.sweeper.") if study else ("hydra.launcher.",)
    wrong = [a for a in args.overrides if not a.startswith(kinds) or "=" not in a]
    if wrong:  # a job's own key would give its jobs another config than the ones that ran
        allowed = "the launcher's and the Optuna sweeper's keys" if study else "only the launcher's keys"
        raise SweepitError(f"a resume takes {allowed} ({' or '.join(k + 'KEY=VALUE' for k in kinds)}), but got "
                           f"{' '.join(wrong)}. Drop them; e.g. `sweepit resume {args.sweep_dir} "
                           + ("hydra.sweeper.n_trials=40`." if study else "hydra.launcher.budget_gpu_hours=200`."))
    # the directory given, wherever the sweep ran first
    m = read_manifest(sweep_folder(Path(args.sweep_dir), "sweepit resume {}"))
    argv, cwd = _runnable(m.argv, m.cwd)
    argv = rerun_argv(argv, Path(m.sweep_dir), args.overrides)
    if args.wait is not None and m.launcher != "slurm":
        raise SweepitError(f"--wait/--no-wait applies to Slurm sweeps only, but {m.sweep_dir} ran with the "
                           f"{m.launcher} launcher; drop the option.")
    if m.launcher == "slurm":  # a resume follows its jobs, also of a sweep first submitted with wait=false
        argv = [a for a in argv if not a.startswith("hydra.launcher.wait=")]
        argv.append(f"hydra.launcher.wait={'false' if args.wait is False else 'true'}")
    line = command_line(argv, cwd, m.env)
    print(f"sweepit: running {line}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    # The driver takes this process's place (same pid): a signal sent to `sweepit resume` (kill, `timeout`, a batch
    # script, the end of a login session) is the driver's, which stops its jobs and records them, as a first run does.
    try:
        os.chdir(cwd)
        os.execve(argv[0], argv, {**os.environ, **m.env})
    except OSError as e:
        raise SweepitError(f"the sweep's command must be runnable to resume it, but {argv[0]} in {cwd} is not "
                           f"({e.strerror}). Run it by hand: {line}") from None


def _runnable(argv: list[str], cwd: str) -> tuple[list[str], str]:
    """The sweep's recorded command and folder, or, when the repository moved since, the same script under
    this folder (where `sweepit resume` runs) and this Python."""
    python, script, rest = argv[0], argv[1] if len(argv) > 1 else "", argv[2:]
    if not os.path.exists(python):
        python = sys.executable
    if script.endswith(".py") and not os.path.exists(script):
        here = Path.cwd() / os.path.relpath(script, cwd)
        if not here.is_file():
            raise SweepitError(f"the sweep's script must still exist to resume it, but {script} does not (was the "
                               f"repository moved?), nor {here}. Run `sweepit resume` from the folder the sweep ran "
                               f"in at its new place (it ran in {cwd}).")
        return [python, str(here), *rest], os.getcwd()
    return [python, script, *rest], cwd if os.path.isdir(cwd) else os.getcwd()


def _clean(args: argparse.Namespace) -> int:
    from sweepit.reporting import sweep_folder
    from sweepit.results import clean

    sweep_dir = sweep_folder(Path(args.sweep_dir), "sweepit clean {}")
    print(*clean(sweep_dir, keep_best=not args.all, dry_run=args.dry_run).lines(args.dry_run), sep="\n")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from sweepit.reporting.compare import compare

    print(compare(Path(args.sweep_dir), args.other and Path(args.other), args.by, args.out and Path(args.out),
                  args.rows))
    return 0


def _download(args: argparse.Namespace) -> int:
    from sweepit.train.data.download import download

    download(args.dataset, Path(args.root), base_url=args.base_url)
    print(f"Set data.root={args.root} (or pass it on the command line) to train on it.")
    return 0


def _rows(text: str) -> int:
    """`--rows`: a count of rows, 0 for all."""
    if not text.isdecimal():
        raise argparse.ArgumentTypeError(f"must be a count of rows (0: all), but is {text!r}; for example --rows 20")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    import sweepit

    parser = argparse.ArgumentParser(prog="sweepit", description=__doc__)
    parser.add_argument("--version", action="version", version=f"sweepit {sweepit.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(parent: Any, name: str, func: Callable[[argparse.Namespace], int], help: str) -> Any:
        p = parent.add_parser(name, help=help)
        p.set_defaults(func=func)
        return p

    p = command(sub, "summary", _summary, help="print the results table of a sweep directory")
    p.add_argument("sweep_dir", help="e.g. outputs/multirun/2026-11-21_10-00-00")
    p.add_argument("--rows", type=_rows, default=MAX_ROWS,
                   help=f"jobs listed at most (0: all; default {MAX_ROWS}): beyond, the best ones by objective, best "
                        "first")

    p = command(sub, "ls", _ls, help="list the sweeps under a directory, newest first, with counts and best job")
    p.add_argument("root", nargs="?", default=None, help="where to look (default: outputs, and multirun, Hydra's)")

    p = command(sub, "report", _report, help="write DIR/report/: results.csv, summary.md, PNG plots and index.html")
    p.add_argument("sweep_dir", help="e.g. outputs/optimizer_lr/2026-11-21_10-00-00")
    p.add_argument("--rows", type=_rows, default=MAX_ROWS,
                   help=f"table rows printed in the terminal (0: all; default {MAX_ROWS})")

    p = command(sub, "status", _status, help="refresh a sweep's job states (from Slurm and the results) and print the "
                                            "table, with each running job's epoch, metric and ETA")
    p.add_argument("sweep_dir", help="a sweep directory holding sweep.json")
    p.add_argument("--watch", nargs="?", type=float, const=5.0, default=None, metavar="SECONDS",
                   help="look again every SECONDS (default 5) until the sweep ends; redrawn in place on a terminal")
    p.add_argument("--rows", type=_rows, default=MAX_ROWS,
                   help=f"jobs listed at most (0: all; default {MAX_ROWS}): beyond, those that did not finish, the "
                        "finished ones counted")

    p = command(sub, "resume", _resume,
                help="run again only the jobs of a sweep that did not complete, in the same directory")
    p.add_argument("sweep_dir", help="a sweep directory holding sweep.json")
    p.add_argument("--wait", action=argparse.BooleanOptionalAction, default=None,
                   help="Slurm: follow the jobs until they end (--wait, the default) or submit and exit (--no-wait)")
    p.add_argument("overrides", nargs="*", metavar="hydra.launcher.KEY=VALUE",
                   help="launcher keys to change for this run, e.g. hydra.launcher.budget_gpu_hours=200; an Optuna "
                        "study's sweeper keys too, e.g. hydra.sweeper.n_trials=40 to search on")

    p = command(sub, "clean", _clean, help="delete trained weights (model_*.pt) of every job but the best, and "
                                          "checkpoints of finished jobs")
    p.add_argument("sweep_dir", help="a sweep directory")
    p.add_argument("--all", action="store_true", help="the best job's weights too")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")

    p = command(sub, "compare", _compare, help="two sweeps job against job (matched by their swept values), or one "
                                              "sweep along a key: a table, a plot and a page")
    p.add_argument("sweep_dir", help="a sweep directory (A)")
    p.add_argument("other", nargs="?", help="the sweep directory to compare it with (B)")
    p.add_argument("--by", metavar="KEY", help="compare one sweep along a swept key: a column group per value")
    p.add_argument("--out", metavar="DIR", help="where compare.html, .csv and .png go (default: in A's report folder)")
    p.add_argument("--rows", type=_rows, default=MAX_ROWS, help=f"table rows printed (0: all; default {MAX_ROWS})")

    data = sub.add_parser("data", help="data sets").add_subparsers(dest="data_command", required=True, metavar="ACTION")
    p = command(data, "download", _download, help="fetch a data set from its public mirror and verify checksums")
    p.add_argument("dataset", choices=["mnist", "cifar10"])
    p.add_argument("--root", required=True, help="directory to put the files in (then set data.root to it)")
    p.add_argument("--base-url", default=None, help="a mirror to fetch from instead of the public one")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # (a closed pipe is found here, not in the interpreter's own flush at exit)
        return code
    except SweepitError as e:
        print(f"sweepit: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader stopped reading (`sweepit status DIR | head`): end quietly, as cat does, with the status of a
        # process SIGPIPE ended. What is left in stdout's buffer goes nowhere, not into a second error at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
