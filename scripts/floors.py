"""What `make test-floors` installs beside torch, read from pyproject.toml: each dependency named on the command line
pinned at its declared minimum (`optuna>=4,<6` gives `optuna==4`, which pip reads as 4.0.0), the dev extra's test
runners (pytest*) and the search extra (the samplers' packages) as declared.

    python scripts/floors.py optuna hydra-core omegaconf submitit
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the TOML reader every pip carries
    from pip._vendor import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower()


def requirements(names: list[str]) -> list[str]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    declared = {_name(r): r for r in project["dependencies"]}
    pins = []
    for name in names:
        spec = declared.get(name.lower())
        floor = re.search(r">=\s*([^,;\s]+)", spec or "")
        if floor is None:
            said = f"it is declared as {spec!r}" if spec else "it is not one"
            raise SystemExit(f"floors.py: {name} must be a dependency of {PYPROJECT.name} with a minimum (name>=X), "
                             f"but {said}; name one of {', '.join(declared)}.")
        pins.append(f"{name}=={floor.group(1)}")
    extras = project["optional-dependencies"]
    return [*pins, *(r for r in extras["dev"] if _name(r).startswith("pytest")), *extras["search"]]


if __name__ == "__main__":
    print(" ".join(requirements(sys.argv[1:])))
