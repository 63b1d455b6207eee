"""The own-loop project of docs/own-code.md, built from the page's code blocks alone: a block whose first line names
its file (`# train.py`, `# conf/config.yaml`) is that file of the project. Its tests sweep it locally
(tests/examples/test_own_code_page.py) and on Slurm (tests/slurm/test_examples_on_slurm.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from sweepit_testing import REPO, child_env, run_command

PAGE = REPO / "docs" / "own-code.md"
FILES = ("train.py", "conf/config.yaml")
_BLOCK = re.compile(r"^```\w*\n# ([\w./]+)[^\n]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def write_page_app(root: Path) -> Path:
    """The page's project written under `root`; its train.py."""
    blocks = {name: match.group(2) for match in _BLOCK.finditer(PAGE.read_text()) if (name := match.group(1)) in FILES}
    assert sorted(blocks) == sorted(FILES), f"{PAGE.name} must show {FILES} as code blocks, not {sorted(blocks)}"
    for name, block in blocks.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block)
    return root / "train.py"


def run_app(script: Path, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """The app run from its own folder, as its user runs it (`python train.py ...`)."""
    return run_command([sys.executable, script.name, *args], script.parent, child_env(), timeout_s)


def sweep_dirs(root: Path) -> list[Path]:
    """The sweeps under `root`/outputs/train/ (the one-line config's folders), oldest first."""
    base = root / "outputs" / "train"
    return sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
