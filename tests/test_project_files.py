"""The project's metadata files agree with pyproject.toml: one version, one licence."""

from __future__ import annotations

from pathlib import Path

import tomllib
import yaml

import sweepit

ROOT = Path(__file__).resolve().parents[1]


def test_citation_licence_and_changelog_agree_with_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["version"] == project["version"] == sweepit.__version__
    assert citation["license"] == project["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog and f"## [{project['version']}]" in changelog
