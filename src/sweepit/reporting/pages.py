"""The sections as pages: `summary.md` (figures linked) and `index.html`, one self-contained page (styles inline, PNGs
embedded as data: URIs) to open or copy off a cluster."""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path
from typing import Any

from sweepit.reporting._report_data import Sweep
from sweepit.reporting.sections import Figure, Section
from sweepit.reporting.table import Table, fmt, kept_rows
from sweepit.results import SweepPaths

_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1400px;
       padding: 1em 2em; color: #1d1d1f; }
h1 { margin-bottom: .1em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 1.6em; }
.meta { color: #666; margin-top: 0; }
pre { background: #f4f4f6; padding: .6em .9em; border-radius: 6px; overflow-x: auto; }
.table-wrap { max-height: 70vh; overflow: auto; border: 1px solid #ddd; border-radius: 6px; }
table { border-collapse: collapse; font-size: 13px; width: 100%; }
th, td { padding: 3px 4px; border-bottom: 1px solid #eee; text-align: left; white-space: nowrap; }
th { position: sticky; top: 0; background: #fafafa; border-bottom: 1px solid #ccc; white-space: normal;
     vertical-align: bottom; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.path { max-width: 8em; overflow: hidden; text-overflow: ellipsis; }
td.note { white-space: normal; color: #8a1c1c; padding-left: 2.5em; }
tr.noted td { border-bottom: none; }
tr.best td { background: #e8f6e8; font-weight: 600; }
.status { padding: 0 6px; border-radius: 8px; font-size: 12px; background: #eee; }
.status-completed { background: #d8f0d8; } .status-failed, .status-corrupt { background: #f8d0d0; }
.status-diverged, .status-interrupted { background: #fbe6c2; } .status-running { background: #d6e6fb; }
.status-pruned { background: #e6dcf5; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 13px; }
.notes { color: #8a5a00; }
"""


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
            lines += [_markdown_table(section.table, sweep.direction), ""]
        for figure in section.figures:
            lines += [f"![{figure.caption}]({figure.path.name})", ""]
            if figure.caption:
                lines += [f"*{figure.caption}*", ""]
        lines += [f"> {note}" for note in section.notes]
        if section.notes:
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _markdown_table(table: Table, direction: str) -> str:
    def cell(value: Any) -> str:
        return fmt(value).replace("|", "\\|").replace("\n", " ")

    kept, said = kept_rows(table, direction)
    lines = ([said, ""] if said else []) + ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    for i in kept:
        row = table.rows[i]
        cells = [cell(v) for v in row]
        if i == table.best:
            cells = [f"**{c}**" for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _table(table: Table, direction: str) -> str:
    # So that a table of twenty columns fits a 1280-pixel window, the last ones (wall time, GPU-hours, the job's
    # folder) without a scrollbar: a column name may break after `_` or `.` (`epoch_time_s`, `trainer.gpus`), and a
    # job's note (an error and its fix) is a row of its own under the job's, the table's width.
    note_col = table.columns.index("note") if "note" in table.columns else -1
    head = "".join(f"<th>{_breakable(c)}</th>" for k, c in enumerate(table.columns) if k != note_col)
    width = len(table.columns) - (note_col >= 0)
    status_col = table.columns.index("status") if "status" in table.columns else -1
    kept, said = kept_rows(table, direction)
    rows = []
    for i in kept:
        row = table.rows[i]
        cells = []
        for k, value in enumerate(row):
            if k == note_col:
                continue
            text = escape(fmt(value, empty=""))
            if k == status_col:
                cells.append(f'<td><span class="status status-{escape(str(value))}">{text}</span></td>')
            elif table.columns[k] == "job_dir":
                cells.append(f'<td class="path" title="{text}">{text}</td>')
            elif isinstance(value, int | float) and not isinstance(value, bool):
                cells.append(f'<td class="num" title="{escape(repr(value))}">{text}</td>')
            elif text != escape(str(value)):  # a swept value shortened: the exact one on hover
                cells.append(f'<td class="num" title="{escape(str(value))}">{text}</td>')
            else:
                cells.append(f"<td>{text}</td>")
        noted = note_col >= 0 and bool(row[note_col])
        classes = " ".join(c for c, on in (("best", i == table.best), ("noted", noted)) if on)
        attrs = f' class="{classes}"' if classes else ""
        rows.append(f"<tr{attrs}>{''.join(cells)}</tr>")
        if noted:
            rows.append(f'<tr class="note-row"><td colspan="{width}" class="note">note: '
                        f"{escape(str(row[note_col]))}</td></tr>")
    return ((f"<p>{escape(said)}</p>" if said else "")
            + f'<div class="table-wrap"><table class="results"><thead><tr>{head}</tr></thead>'
            f"<tbody>\n{chr(10).join(rows)}\n</tbody></table></div>")


def _breakable(name: str) -> str:
    return escape(name).replace("_", "_<wbr>").replace(".", ".<wbr>")


def _figure(figure: Figure) -> str:
    data = base64.b64encode(Path(figure.path).read_bytes()).decode("ascii")
    caption = escape(figure.caption)
    return (f'<figure><img alt="{caption}" src="data:image/png;base64,{data}">'
            f"<figcaption>{caption}</figcaption></figure>")


def _section(section: Section, direction: str) -> str:
    anchor = escape(section.title.lower().replace(" ", "-"))
    parts = [f'<section id="{anchor}"><h2>{escape(section.title)}</h2>']
    parts += [f"<p>{escape(p)}</p>" for p in section.text]
    if section.command:
        parts.append(f"<p>The best configuration, as one run:</p><pre><code>{escape(section.command)}</code></pre>")
    if section.table is not None:
        parts.append(_table(section.table, direction))
    parts += [_figure(f) for f in section.figures]
    if section.notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in section.notes) + "</ul>")
    parts.append("</section>")
    return "\n".join(parts)


def render_html(sweep: Sweep, sections: list[Section]) -> str:
    meta = (f"{sweep.sweep_dir} · started {sweep.created_at.astimezone():%Y-%m-%d %H:%M}"
            + (f" · launcher {sweep.launcher}" if sweep.launcher else "") + f" · {sweep.counts_line()}")
    files = " · ".join(f'<a href="{f.name}">{f.name}</a>' for f in (SweepPaths.report_csv, SweepPaths.report_summary))
    return html_page(f"Sweep {sweep.study}", [escape(meta), f"Files beside this page: {files}"], sections,
                     sweep.direction)


def html_page(title: str, meta: list[str], sections: list[Section], direction: str) -> str:
    """The page of `sections` under `title` and lines of `meta` (HTML); `direction` ranks a long table's rows."""
    body = "\n".join(_section(s, direction) for s in sections)
    lines = "\n".join(f'<p class="meta">{line}</p>' for line in meta)
    return f"""<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title><style>{_STYLE}</style></head>
<body>
<header><h1>{escape(title)}</h1>{lines}
</header>
{body}
</body>
</html>
"""
