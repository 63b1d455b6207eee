"""Every option of a launcher, sweeper, sampler, pruner or config group that `python train.py --help` lists is named
in the documentation (README.md or a page under docs/, as code: `hydra/launcher=sweepit_slurm`, `logger=many`), so
that a name a user meets in `--help` can be looked up. Hydra's own groups (hydra/env, hydra/job_logging, ...) are
Hydra's to document."""

from __future__ import annotations

import re
import subprocess
import sys

from sweepit_testing import REPO

HYDRAS_OWN = {"hydra", "hydra/env", "hydra/help", "hydra/hydra_help", "hydra/hydra_logging", "hydra/job_logging",
              "hydra/output"}


def _options(help_text: str) -> dict[str, list[str]]:
    """{group: its options} from the help's group sections (`hydra/launcher: basic, local, ...`), before its config."""
    groups = help_text.split("== Config:")[0]
    found = {}
    for line in groups.splitlines():
        listed = re.fullmatch(r"([\w/]+): ([\w-]+(?:, [\w-]+)*)", line.strip())
        if listed is not None:
            found[listed[1]] = listed[2].split(", ")
    return found


def _code(text: str) -> str:
    """The documentation's code: fenced blocks and inline spans."""
    return "\n".join(re.findall(r"```.*?```", text, flags=re.S) + re.findall(r"`([^`\n]+)`", text))


def test_every_name_help_lists_is_named_in_the_docs() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "train.py"), "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    options = {group: names for group, names in _options(proc.stdout).items() if group not in HYDRAS_OWN}
    assert {"hydra/launcher", "hydra/sweeper", "hydra/sweeper/sampler", "logger", "task"} <= set(options), options
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    code = "\n".join(_code(page.read_text()) for page in pages)
    unnamed = [f"{group}={name}" for group, names in options.items() for name in names
               if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", code) is None]
    assert not unnamed, f"`python train.py --help` lists {unnamed}, which no page of README.md or docs/ names"
