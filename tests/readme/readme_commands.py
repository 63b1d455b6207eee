"""The commands README.md and the documentation pages (docs/*.md) show: every line of their ```bash blocks (a line
ending in `\\` joined with the next, a trailing `# comment` dropped) and every command of their tables' `command`
column. A module name no other test folder uses."""

from __future__ import annotations

import re

from sweepit_testing import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"


def shown_text() -> str:
    """The README and every page of the documentation site, one after the other."""
    return "\n".join(p.read_text() for p in [README, *sorted(DOCS.glob("*.md"))])
_FENCE = re.compile(r"^```(\w*)\s*$")


def strip_comment(line: str) -> str:
    """`line` without a trailing shell comment (a `#` after whitespace, outside quotes)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def code_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced block, in order."""
    blocks: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    language = ""
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if fence and current is None:
            language, current = fence.group(1), []
        elif fence and current is not None:
            blocks.append((language, current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def block_commands(lines: list[str]) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments dropped, blank lines skipped."""
    commands, pending = [], ""
    for raw in lines:
        line = strip_comment(raw)
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        command = (pending + line.strip()).strip()
        pending = ""
        if command:
            commands.append(command)
    return commands


def table_commands(text: str) -> list[str]:
    """The backticked commands in the `command` column of every Markdown table that has one."""
    commands: list[str] = []
    column: int | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if column is None:
            column = cells.index("command") if "command" in cells else -1
        elif column >= 0 and column < len(cells) and not set(cells[column]) <= set("-: "):
            commands += re.findall(r"`([^`]+)`", cells[column])
    return commands


def readme_commands(text: str | None = None) -> list[str]:
    """Every command the README and the documentation pages show, in order of appearance (a command shown twice is
    listed once)."""
    text = shown_text() if text is None else text
    found = [c for language, lines in code_blocks(text) if language in ("bash", "sh", "shell")
             for c in block_commands(lines)]
    return list(dict.fromkeys(found + table_commands(text)))


def sample_output(text: str | None = None) -> list[str]:
    """The lines of the README's first plain (language-less) block: what the set-up command prints."""
    text = README.read_text() if text is None else text
    return next(lines for language, lines in code_blocks(text) if not language)
