"""MkDocs hook of the documentation site (mkdocs.yml): the benchmarks page is bench/RESULTS.md itself, added to the
site as `benchmarks.md` when it is built (one file, not a copy kept in docs/). Its links to raw output under
bench/results/ name the file instead (the site holds no raw output)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

_LINK = re.compile(r"\[([^\]]+)\]\((?!https?://|#)([^)\s#]+)(#[^)]*)?\)")


def benchmarks_page(results: Path) -> str:
    """RESULTS.md with each relative link written as the repository path it points to."""
    def path_of(match: re.Match[str]) -> str:
        label, target = match.group(1), match.group(2)
        path = (Path("bench") / target).as_posix()
        return f"`{path}`" if label.strip("`") in (target, Path(target).name) else f"{label} (`{path}`)"

    return _LINK.sub(path_of, results.read_text())


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    results = Path(config.config_file_path).parent / "bench" / "RESULTS.md"
    files.append(File.generated(config, "benchmarks.md", content=benchmarks_page(results)))
    return files
