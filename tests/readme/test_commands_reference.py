"""docs/commands.md is generated from the `sweepit` command's parser; `make commands-reference` rewrites it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from sweepit_testing import REPO

PAGE = REPO / "docs" / "commands.md"


def test_make_commands_reference_writes_the_committed_page(tmp_path: Path) -> None:
    """The target, run in a scratch copy, rewrites the page exactly as committed: an option added to
    src/sweepit/cli.py without running it fails here."""
    for name in ("Makefile", "scripts", "src"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, tmp_path / name)
    (tmp_path / "docs").mkdir()
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    proc = subprocess.run(["make", "commands-reference"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "docs" / "commands.md").read_text() == PAGE.read_text()


def test_the_page_has_every_command_the_parser_has() -> None:
    from sweepit.cli import build_parser

    text = PAGE.read_text()
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in commands:
        assert f"## `sweepit {name}" in text, name
