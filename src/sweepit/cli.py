"""The `sweepit` command: turn sweep directories into tables, fetch data sets, resume sweeps."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from sweepit.errors import SweepitError


def _summary(args: argparse.Namespace) -> int:
    from sweepit.summary import summarize

    sweep_dir = Path(args.sweep_dir)
    if not sweep_dir.is_dir():
        raise SweepitError(f"sweep directory must exist, but {sweep_dir} does not. List sweeps with `ls outputs/*/`.")
    print(summarize(sweep_dir))
    return 0


def _download(args: argparse.Namespace) -> int:
    from sweepit.data.download import download

    download(args.dataset, Path(args.root), base_url=args.base_url)
    print(f"Set data.root={args.root} (or pass it on the command line) to train on it.")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sweepit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("summary", help="print the results table of a sweep directory")
    p.add_argument("sweep_dir", help="e.g. outputs/multirun/2026-11-21_10-00-00")
    p.set_defaults(func=_summary)

    data = sub.add_parser("data", help="data sets").add_subparsers(dest="data_command", required=True, metavar="ACTION")
    p = data.add_parser("download", help="fetch a data set from its public mirror and verify checksums")
    p.add_argument("dataset", choices=["mnist", "cifar10"])
    p.add_argument("--root", required=True, help="directory to put the files in (then set data.root to it)")
    p.add_argument("--base-url", default=None, help="a mirror to fetch from instead of the public one")
    p.set_defaults(func=_download)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except SweepitError as e:
        print(f"sweepit: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
