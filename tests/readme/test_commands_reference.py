"""docs/commands.md is generated from the `sweepit` command's parser (`make commands-reference`), docs/api.md from
`sweepit.__all__` and its docstrings (`make api-reference`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sweepit_testing import REPO

PAGE = REPO / "docs" / "commands.md"


@pytest.mark.parametrize(("target", "page"), [("commands-reference", "commands.md"), ("api-reference", "api.md")])
def test_make_reference_writes_the_committed_page(tmp_path: Path, target: str, page: str) -> None:
    """The target, run in a scratch copy, rewrites the page exactly as committed: an option added to
    src/sweepit/cli.py, or a docstring of the API changed, without running it fails here."""
    for name in ("Makefile", "scripts", "src"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, tmp_path / name)
    (tmp_path / "docs").mkdir()
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    proc = subprocess.run(["make", target], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "docs" / page).read_text() == (REPO / "docs" / page).read_text()


def test_the_page_has_every_command_the_parser_has() -> None:
    from sweepit.cli import build_parser

    text = PAGE.read_text()
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in commands:
        assert f"## `sweepit {name}" in text, name


def test_the_api_page_has_every_public_name() -> None:
    import sweepit

    text = (REPO / "docs" / "api.md").read_text()
    assert [n for n in sweepit.__all__ if not n.startswith("_") and f"## `sweepit.{n}`" not in text] == []
