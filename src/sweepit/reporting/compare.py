"""`sweepit compare`: two sweeps (before and after a code change, two clusters, two seeds of one grid), or one sweep
along a key, job against job. Jobs match on their swept values (the overrides the report reads); each side's objective,
final metrics and epoch time stand in a column group of their own, then the differences from the first group."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from sweepit.errors import SweepitError
from sweepit.reporting._report_data import JobReport, Sweep, load_sweep
from sweepit.reporting.listing import sweep_folder
from sweepit.reporting.sections import Figure, Section
from sweepit.reporting.table import KEY_METRICS, Table, final_metric_keys, to_csv, to_text
from sweepit.results import SweepPaths, finite_number

Key = tuple[str | None, ...]
_LISTED = 10  # jobs without a match named one by one; more are counted


@dataclass
class Comparison:
    title: str
    keys: list[str]                            # the swept keys jobs are matched on
    groups: dict[str, list[JobReport]]         # the sides compared: A and B, or the values of --by's key
    rows: list[dict[str, JobReport]]           # one per match: a side's job, where it has one
    measures: list[str]                        # objective, the final metrics, epoch_time_s
    direction: str
    metric: str
    about: list[str]                           # what each side is and what differs between them

    def values(self, row: dict[str, JobReport]) -> list[str | None]:
        job = next(iter(row.values()))
        return [job.overrides.get(k) for k in self.keys]

    def label(self, row: dict[str, JobReport]) -> str:
        return " ".join(f"{k}={v}" for k, v in zip(self.keys, self.values(row), strict=True)) or "the one job"

    def table(self, measures: list[str] | None = None) -> Table:
        """Every measure (the page, compare.csv), or only `measures` (the terminal's)."""
        first, *others = self.groups
        measures = self.measures if measures is None else measures
        columns = [*self.keys, *(f"{m}:{g}" for g in self.groups for m in ("status", *measures)),
                   *(f"{m}:{g}-{first}" for g in others for m in measures)]
        rows = []
        for row in self.rows:
            cells: list[Any] = list(self.values(row))
            for g in self.groups:
                job = row.get(g)
                cells += [job.status if job else None, *(_measure(job, m) if job else None for m in measures)]
            for g in others:
                cells += [_difference(row.get(first), row.get(g), m) for m in measures]
            rows.append(cells)
        return Table(columns, rows)

    def findings(self) -> list[str]:
        """Per side after the first: the objective's mean difference and where it is better; then the unmatched."""
        first, *others = self.groups
        lines = []
        sign = 1.0 if self.direction == "maximize" else -1.0
        for g in others:
            diffs = [d for row in self.rows if (d := _difference(row.get(first), row.get(g), "objective")) is not None]
            if not diffs:
                lines.append(f"{g} against {first}: no matched pair of jobs both with a finite objective.")
                continue
            better = sum(sign * d > 0 for d in diffs)
            worse = sum(sign * d < 0 for d in diffs)
            lines.append(f"{g} against {first} on {len(diffs)} matched job(s): objective ({self.direction} "
                         f"{self.metric}) {statistics.fmean(diffs):+.4g} on average; {g} better in {better}, "
                         f"worse in {worse}, equal in {len(diffs) - better - worse}.")
        for g in self.groups:
            alone = [row for row in self.rows if set(row) == {g}]
            if alone:
                named = "; ".join(self.label(r) for r in alone[:_LISTED])
                more = f"; and {len(alone) - _LISTED} more" if len(alone) > _LISTED else ""
                lines.append(f"only in {g} ({len(alone)} job(s)): {named}{more}")
        return lines


def _measure(job: JobReport, measure: str) -> Any:
    if measure == "objective":
        return job.objective
    return job.epoch_time_s if measure == "epoch_time_s" else job.last.get(measure)


def _difference(a: JobReport | None, b: JobReport | None, measure: str) -> float | None:
    x = finite_number(_measure(a, measure)) if a else None
    y = finite_number(_measure(b, measure)) if b else None
    return None if x is None or y is None else y - x


def read_sweep(path: Path, run: str) -> Sweep:
    """The sweep in `path`; an error that says what `path` is when it holds no job (`run`: the command, `{}` for it)."""
    sweep = load_sweep(sweep_folder(path, run))
    if not sweep.jobs:
        raise SweepitError(f"a sweep to compare must hold jobs, but {path} holds none yet (a sweep.json listing no "
                           "job, or multirun.yaml alone); list sweeps with `sweepit ls`.")
    return sweep


def _matched(title: str, keys: list[str], groups: dict[str, list[JobReport]], sweep: Sweep,
             about: list[str]) -> Comparison:
    """Jobs with the same values of `keys` in the sides `groups`, the n-th such job of one side with the n-th of
    another (the repeats of a point pair up in order)."""
    rows: dict[tuple[Key, int], dict[str, JobReport]] = {}
    for g, jobs in groups.items():
        seen: dict[Key, int] = {}
        for job in jobs:
            values = tuple(job.overrides.get(k) for k in keys)
            n = seen[values] = seen.get(values, -1) + 1
            rows.setdefault((values, n), {})[g] = job
    everyone = [j for jobs in groups.values() for j in jobs]
    # The objective's own metric is its column already; a metric named like a matched key is that key's last value.
    measures = ["objective", *(m for m in final_metric_keys(everyone) if m not in (*keys, sweep.metric)),
                "epoch_time_s"]
    return Comparison(title, keys, groups, list(rows.values()), measures, sweep.direction, sweep.metric, about)


def _values_text(sweep: Sweep, keys: list[str]) -> str:
    def values(key: str) -> str:
        seen = list(dict.fromkeys(str(job.overrides.get(key, "(unset)")) for job in sweep.jobs))
        return ",".join(seen[:_LISTED]) + (f",... ({len(seen)} values)" if len(seen) > _LISTED else "")

    return " ".join(f"{k}={values(k)}" for k in keys) or "nothing (one job)"


def compare_two(a: Sweep, b: Sweep) -> Comparison:
    """A's jobs against B's, matched on the keys either sweeps."""
    keys = list(dict.fromkeys([*a.swept, *b.swept]))
    about = [f"A: {a.sweep_dir} ({a.counts_line()}; sweeps {', '.join(a.swept) or 'nothing'})",
             f"B: {b.sweep_dir} ({b.counts_line()}; sweeps {', '.join(b.swept) or 'nothing'})"]
    changed = [f"{k}={a.fixed.get(k, '(unset)')} in A, {b.fixed.get(k, '(unset)')} in B"
               for k in dict.fromkeys([*a.fixed, *b.fixed]) if k not in keys and a.fixed.get(k) != b.fixed.get(k)]
    if changed:
        about.append("the same in every job of each, but not between them: " + "; ".join(changed))
    if (a.direction, a.metric) != (b.direction, b.metric):
        about.append(f"the objectives differ: A's is {a.direction} {a.metric}, B's {b.direction} {b.metric}; the "
                     "objective columns compare different measures")
    comparison = _matched("Compare A and B", keys, {"A": a.jobs, "B": b.jobs}, a, about)
    if not any(len(row) > 1 for row in comparison.rows):
        raise SweepitError(
            f"A and B share no job: none of A's {len(a.jobs)} jobs has the values of "
            f"{', '.join(keys) or 'their overrides'} of one of B's {len(b.jobs)}. A ({a.sweep_dir}) has "
            f"{_values_text(a, keys)}; B ({b.sweep_dir}) has {_values_text(b, keys)}.\n"
            "Compare two sweeps of one grid (the same keys, some values in common), or one sweep along a key: "
            "sweepit compare DIR --by KEY.\n"
            "See docs/troubleshooting.md#compare-no-shared-job")
    return comparison


def compare_by(sweep: Sweep, key: str) -> Comparison:
    """The sweep's jobs along `key`: one side per value, matched on the other swept keys."""
    if key not in sweep.swept:
        fixed = f" ({key}={sweep.fixed[key]} in every job)" if key in sweep.fixed else ""
        fix = f"for example --by {sweep.swept[0]}." if sweep.swept else "compare it with another: sweepit compare A B."
        raise SweepitError(f"--by must name a key the sweep sweeps ({', '.join(sweep.swept) or 'none: it has one job'}"
                           f"), but got {key!r}{fixed}; {fix}")
    groups: dict[str, list[JobReport]] = {}
    for job in sweep.jobs:
        groups.setdefault(str(job.overrides.get(key, "(unset)")), []).append(job)
    others = [k for k in sweep.swept if k != key]
    about = [f"{sweep.sweep_dir} ({sweep.counts_line()}): along {key}, matched on {', '.join(others) or 'nothing'}"]
    comparison = _matched(f"Compare along {key}", others, groups, sweep, about)
    if not any(len(row) > 1 for row in comparison.rows):
        raise SweepitError(f"values of {key} compare where they share the other swept keys' values, but no two do: "
                           f"{_values_text(sweep, sweep.swept)}.\n"
                           f"Compare along another key: sweepit compare DIR --by {others[0] if others else 'KEY'}.\n"
                           "See docs/troubleshooting.md#compare-by-no-match")
    return comparison


def comparison_plot(comparison: Comparison, path: Path) -> bool:
    """Each side's objective and epoch time against the first's, a point per matched job (on the diagonal: equal);
    False when no pair has both."""
    from sweepit.reporting import plots

    first, *others = comparison.groups
    panels = [m for m in ("objective", "epoch_time_s")
              if any(_difference(r.get(first), r.get(g), m) is not None for r in comparison.rows for g in others)]
    if not panels:
        return False
    fig = plots.figure(5.2 * len(panels), 4.4)
    for ax, measure in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels, strict=True):
        low, high = float("inf"), float("-inf")
        for g in others:
            pairs = [(x, y) for r in comparison.rows if g in r and first in r
                     if (x := finite_number(_measure(r[first], measure))) is not None
                     and (y := finite_number(_measure(r[g], measure))) is not None]
            if pairs:
                ax.scatter(*zip(*pairs, strict=True), label=g, alpha=0.8)
                low, high = min(low, *(min(p) for p in pairs)), max(high, *(max(p) for p in pairs))
        ax.plot([low, high], [low, high], linestyle="--", color="grey", label="equal")
        name = f"{comparison.metric} (objective)" if measure == "objective" else measure
        ax.set(xlabel=f"{name}: {first}", ylabel=f"{name}: {', '.join(others)}", title=name)
        ax.grid(alpha=0.3)
        ax.legend()
    plots.save(fig, path)
    return True


def write_comparison(comparison: Comparison, out_dir: Path) -> Path:
    """compare.csv, compare.png and compare.html in `out_dir`; returns the page."""
    from sweepit._files import atomic_write
    from sweepit.reporting.pages import html_page

    table, page = comparison.table(), out_dir / "compare.html"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(out_dir / "compare.csv", to_csv(table), fsync=False)
        figures = []
        if comparison_plot(comparison, out_dir / "compare.png"):
            figures.append(Figure(out_dir / "compare.png", "each side against the first, a point per matched job; "
                                                           "dashed: equal"))
        section = Section("Matched jobs", text=comparison.findings(), table=table, figures=figures)
        atomic_write(page, html_page(comparison.title, [escape(line) for line in comparison.about], [section],
                                     comparison.direction), fsync=False)
    except OSError as e:
        raise SweepitError(f"the comparison's folder must be writable, but {out_dir} is not ({e.strerror}); "
                           "pass another with --out DIR.") from None
    return page


def compare(first: Path, second: Path | None = None, by: str | None = None, out: Path | None = None,
            max_rows: int = 0) -> str:
    """`sweepit compare`: prints the comparison, writes its files to `out` (default: a folder in the first sweep's
    report folder) and returns the line that says where."""
    if (second is None) == (by is None):
        got = "two and --by" if by else "one and no --by"
        raise SweepitError("compare takes two sweep directories (sweepit compare A B), or one and the key to compare "
                           f"it along (sweepit compare A --by KEY), but got {got}.")
    sweep = read_sweep(first, f"sweepit compare {{}} {f'--by {by}' if by is not None else second}")
    if by is not None:
        comparison, name = compare_by(sweep, by), f"compare_by_{by}"
    else:
        assert second is not None
        other = read_sweep(second, f"sweepit compare {first} {{}}")
        comparison, name = compare_two(sweep, other), f"compare_{second.resolve().name}"
    # Printed before the files are written: a folder that cannot be written loses nothing already computed.
    shown = [m for m in comparison.measures if m in ("objective", *KEY_METRICS, "epoch_time_s")]
    print(*comparison.about, "", to_text(comparison.table(shown), max_rows), "", *comparison.findings(), sep="\n",
          flush=True)
    page = write_comparison(comparison, out or SweepPaths(first).report / name)
    return f"compare: {page} (with compare.csv and compare.png)"
