"""`summary.md`: the sweep in Markdown, every section with its table, command and figures (linked, not embedded)."""

from __future__ import annotations

from sweepit.reporting._report_data import Sweep
from sweepit.reporting.sections import Section
from sweepit.reporting.table import to_markdown


def render_markdown(sweep: Sweep, sections: list[Section]) -> str:
    lines = [f"# Sweep `{sweep.study}`", "",
             f"`{sweep.sweep_dir}`, started {sweep.created_at.astimezone():%Y-%m-%d %H:%M}"
             + (f", launcher `{sweep.launcher}`" if sweep.launcher else ""), ""]
    for section in sections:
        lines += [f"## {section.title}", ""]
        for paragraph in section.text:
            lines += [paragraph, ""]
        if section.command:
            lines += ["The best configuration, as one run:", "", "```bash", section.command, "```", ""]
        if section.table is not None:
            lines += [to_markdown(section.table, sweep.direction), ""]
        for figure in section.figures:
            lines += [f"![{figure.caption}]({figure.path.name})", ""]
            if figure.caption:
                lines += [f"*{figure.caption}*", ""]
        lines += [f"> {note}" for note in section.notes]
        if section.notes:
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"
