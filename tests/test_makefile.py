"""The Makefile's install recipe as `make -n` prints it: the pinned CPU torch by default, and, for a site whose torch
comes from a module (CTE-Power is ppc64le, where PyPI has no torch wheel), no torch of its own in a venv that sees
the site's (the README's GPU section says when); the floors' venv, which CI tests after the suite; and `make docs`,
which fails on what mkdocs' strict mode reports."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from sweepit_testing import REPO


def _install(*variables: str) -> list[str]:
    proc = subprocess.run(["make", "-n", "-C", str(REPO), "install", *variables], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [line.strip() for line in proc.stdout.splitlines()]


def test_install_pins_the_cpu_torch_by_default() -> None:
    lines = _install()
    assert "python3 -m venv .venv" in [" ".join(line.split()) for line in lines]
    assert '.venv/bin/python -m pip install --quiet "torch==2.13.0"' in lines


def test_install_can_leave_torch_to_the_site() -> None:
    lines = _install("TORCH_SPEC=none", "VENV_FLAGS=--system-site-packages")
    assert "python3 -m venv --system-site-packages .venv" in lines
    assert not [line for line in lines if "pip install" in line and "torch" in line], lines
    assert ".venv/bin/python -m pip install --quiet -e '.[dev]'" in lines


def test_the_floors_venv_has_pyprojects_minimums_and_ci_tests_them_after_the_suite() -> None:
    proc = subprocess.run(["make", "-n", "-B", "-C", str(REPO), "test-floors"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [line.strip() for line in proc.stdout.splitlines()]
    assert '.venv-floors/bin/python -m pip install --quiet "torch==2.13.0"' in lines  # the same torch as .venv
    assert (".venv-floors/bin/python -m pip install --quiet -e . $(.venv-floors/bin/python scripts/floors.py optuna "
            "hydra-core omegaconf submitit)") in lines
    floors = subprocess.run([sys.executable, "scripts/floors.py", "optuna", "hydra-core", "omegaconf", "submitit"],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert floors.returncode == 0, floors.stderr
    pins = floors.stdout.split()
    assert [pin.split("==")[0] for pin in pins[:4]] == ["optuna", "hydra-core", "omegaconf", "submitit"], pins
    declared = (REPO / "pyproject.toml").read_text()
    assert all(f'"{pin.replace("==", ">=")},' in declared for pin in pins[:4]), pins  # each one's own minimum
    assert any(pin.startswith("pytest-xdist") for pin in pins[4:]), pins  # and what the tests run with
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert ci.index("make test-floors") > ci.index("make test")


def test_make_docs_fails_on_a_link_to_a_missing_anchor(tmp_path: Path) -> None:
    """mkdocs' `--strict` reports a missing anchor as a warning that `--quiet` hides, and the build then exits 0."""
    copy = tmp_path / "site-copy"
    copy.mkdir()
    for name in ("Makefile", "mkdocs.yml", "README.md"):
        shutil.copy(REPO / name, copy / name)
    for folder in ("docs", "scripts", "bench"):
        shutil.copytree(REPO / folder, copy / folder, ignore=shutil.ignore_patterns("results", "__pycache__"))
    with (copy / "docs" / "local.md").open("a") as page:
        page.write("\nSee [the queue](slurm.md#no-such-anchor).\n")
    venv = Path(sys.executable).parent.parent
    proc = subprocess.run(["make", "-C", str(copy), "docs", f"VENV={venv}"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "does not contain an anchor '#no-such-anchor'" in proc.stdout + proc.stderr
