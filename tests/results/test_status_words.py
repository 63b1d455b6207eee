"""A job's state is a member of `JobState` (`sweepit.results._status`) everywhere in the package: no module spells a
status or a state as a string of its own, so that a word renamed or added there cannot leave a reader behind."""

from __future__ import annotations

import ast
from pathlib import Path

from sweepit.results import JobState

SRC = Path(__file__).resolve().parents[2] / "src"
ENUM_MODULE = Path("sweepit/results/_status.py")
# (module, word): why that string equal to a status is no status.
EXCEPTIONS = {
    (Path("sweepit/cli.py"), "ended"): "`sweepit status --watch` says in English that the sweep ended",
    (Path("sweepit/reporting/testing.py"), "completed"): "the generator of test sweeps, which leaves the package",
    (Path("sweepit/reporting/testing.py"), "diverged"): "the generator of test sweeps, which leaves the package",
    (Path("sweepit/reporting/testing.py"), "failed"): "the generator of test sweeps, which leaves the package",
}


def status_literals(root: Path) -> list[str]:
    """`path:line: 'word'` for each string constant under `root` equal to a JobState value, outside the enum
    module and EXCEPTIONS."""
    words = {str(w) for w in JobState}
    found = []
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root)
        if module == ENUM_MODULE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in words and (module, node.value) not in EXCEPTIONS:
                found.append(f"{module}:{node.lineno}: {node.value!r}")
    return found


def test_no_status_is_spelled_outside_its_enum() -> None:
    found = status_literals(SRC)
    assert not found, (f"a job's status or state must be a member of JobState ({ENUM_MODULE}), but "
                       f"{len(found)} string(s) spell one: {found[:20]}; write JobState.X instead")


def test_the_scan_finds_a_status_spelled_as_a_string(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text('def f(s: str) -> bool:\n    return s == "completed"\n')
    assert status_literals(tmp_path) == ["m.py:2: 'completed'"]
