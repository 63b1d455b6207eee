"""scripts/count_lines.py, whose figures bench/RESULTS.md quotes for the size of src/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_each_line_is_counted_once_by_its_kind(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        '"""Module doc,\non two lines."""\n\n# a comment\nimport os\n\n\ndef f() -> str:\n'
        '    """Its doc."""\n    return os.sep  # trailing comment: code\n')
    out = subprocess.run([sys.executable, "scripts/count_lines.py", str(tmp_path)], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    assert json.loads(out) == {"lines": 10, "code": 3, "doc": 3, "comment": 1, "blank": 3, "stmts": 5,
                               "mean_code_line": round((9 + 15 + 39) / 3, 1)}


def test_src_adds_up_to_its_files_lines() -> None:
    out = subprocess.run([sys.executable, "scripts/count_lines.py", "src"], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    counts = json.loads(out)
    assert counts["lines"] == sum(len(p.read_text().splitlines()) for p in (REPO / "src").rglob("*.py"))
    assert counts["lines"] == sum(counts[k] for k in ("code", "doc", "comment", "blank"))
