"""Reports of a sweep directory in `<sweep>/report/`: `results.csv`, `summary.md`, PNG plots and a self-contained
`index.html`. Partial and broken sweeps are reported as they are; matplotlib is imported only when plots are drawn."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from sweepit._files import atomic_write
from sweepit.reporting._report_data import JobReport, Sweep, load_sweep
from sweepit.reporting.linreg import LinregSection
from sweepit.reporting.listing import find_sweeps, format_listing, sweep_folder
from sweepit.reporting.optuna_section import OptunaSection
from sweepit.reporting.plots import CurvesSection, ParamsSection, preload
from sweepit.reporting.scaling import ScalingSection
from sweepit.reporting.sections import Figure, ResultsSection, Section, SectionBuilder
from sweepit.results import SweepPaths, write_records

# The report's sections, in order; to add one, subclass SectionBuilder (sections.py) and append an instance.
DEFAULT_SECTIONS: list[SectionBuilder] = [ResultsSection(), CurvesSection(), ParamsSection(), LinregSection(),
                                          ScalingSection(), OptunaSection()]

__all__ = [
    "DEFAULT_SECTIONS", "Figure", "JobReport", "Section", "SectionBuilder", "Sweep",
    "build_report", "find_sweeps", "format_listing", "load_sweep", "preload", "section_text", "sweep_folder",
    "try_build_report", "write_report",
]


def write_report(sweep: Sweep, builders: Sequence[SectionBuilder] | None = None) -> list[Section]:
    """Write `results.csv`, the plots, `summary.md` and `index.html` into `<sweep>/report/`; return the sections.
    A section that fails (a plot of odd data) becomes a note on the page and a warning, not an error."""
    from sweepit.reporting.pages import render_html, render_markdown
    from sweepit.reporting.table import to_csv

    # matplotlib's INFO lines (its font cache, "Using categorical units ...") would print through Hydra's log handler
    # at the end of a sweep; its warnings still show.
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    paths = SweepPaths(sweep.sweep_dir)
    out_dir = paths.report
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.png"):  # a plot that no longer applies must not linger
        old.unlink(missing_ok=True)
    sections: list[Section] = []
    for builder in DEFAULT_SECTIONS if builders is None else builders:
        try:
            section = builder.build(sweep, out_dir)
        except Exception as e:
            print(f"sweepit: warning: report section {builder.title!r} not drawn: {type(e).__name__}: {e}",
                  file=sys.stderr)
            section = Section(builder.title, notes=[f"not drawn: {type(e).__name__}: {e}"])
        if section is not None:
            sections.append(section)
    table = next((s.table for s in sections if s.table is not None), None)
    if table is not None:
        atomic_write(paths.report_csv, to_csv(table), fsync=False)
    atomic_write(paths.report_summary, render_markdown(sweep, sections), fsync=False)
    atomic_write(paths.report_page, render_html(sweep, sections), fsync=False)
    write_records(out_dir, sweep.records)  # what `sweepit status` asks to know whether the report is current
    return sections


def build_report(sweep_dir: Path | str, builders: Sequence[SectionBuilder] | None = None) -> Path:
    """Report the sweep in `sweep_dir`; returns the report directory (open its `index.html`)."""
    write_report(load_sweep(Path(sweep_dir)), builders)
    return SweepPaths(Path(sweep_dir)).report


def section_text(section: Section) -> str:
    """A section's table and findings for the terminal (`sweepit report`; the end of a sweep for a `printed` one)."""
    from sweepit.reporting.table import to_text

    table = [to_text(section.table)] if section.table is not None else []
    return "\n".join([f"{section.title}:", *table, *section.text])


def try_build_report(sweep_dir: Path | str) -> Path | None:
    """build_report for the end of a sweep, which also prints the sections that are the sweep's answer (a speed
    study's scaling table): never raises; a failure prints a warning and returns None."""
    try:
        sections = write_report(load_sweep(Path(sweep_dir)))
    except Exception as e:
        print(f"sweepit: warning: no report written for {sweep_dir}: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)
        return None
    paths = SweepPaths(Path(sweep_dir))
    for section in sections:
        if section.printed:
            print(f"\n{section_text(section)}\n", flush=True)
    print(f"sweepit: report in {paths.report_page}", flush=True)
    return paths.report
