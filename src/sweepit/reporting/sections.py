"""A report is a list of sections; each builder decides whether its section applies to a sweep. To add one, subclass
`SectionBuilder` and append an instance to `sweepit.reporting.DEFAULT_SECTIONS`: both pages render every section."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from sweepit.reporting._report_data import Sweep
from sweepit.reporting.table import Table, best_lines, reproduce_command, results_table
from sweepit.results import SweepPaths


@dataclass
class Figure:
    path: Path                        # a PNG in the report directory
    caption: str = ""


@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)     # paragraphs of plain text
    command: str = ""                                 # a shell line shown as code
    table: Table | None = None
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)    # what was left out or could not be drawn
    printed: bool = False                             # the end of a sweep prints its table and text: its answer


class SectionBuilder(ABC):
    title: str = ""

    @abstractmethod
    def build(self, sweep: Sweep, out_dir: Path) -> Section | None:
        """Build this section for `sweep`.

        Args:
            sweep: the sweep as read from its directory (broken jobs included, with notes).
            out_dir: the report directory, where figures are written.

        Returns:
            The section, or None when it does not apply to this sweep (e.g. a heatmap of one parameter).
        """


class ResultsSection(SectionBuilder):
    title = "Results"

    def build(self, sweep: Sweep, out_dir: Path) -> Section:
        best = sweep.best
        text = [sweep.counts_line()]
        if sweep.fixed:
            text.append("same in every job: " + " ".join(f"{k}={v}" for k, v in sweep.fixed.items()))
        text += sweep.unread
        text += [line for line in best_lines(sweep) if not line.startswith("reproduce: ")]  # the command: below
        if SweepPaths(sweep.sweep_dir).budget.exists():  # Slurm code (sacct) only for a sweep with a GPU budget
            from sweepit.slurm import budget_line

            text += [line] if (line := budget_line(sweep.sweep_dir)) else []
        return Section(self.title, text=text, table=results_table(sweep),
                       command="" if best is None else reproduce_command(sweep, best))
