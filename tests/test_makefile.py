"""The Makefile's install recipe as `make -n` prints it: the pinned CPU torch by default, and, for a site whose torch
comes from a module (CTE-Power is ppc64le, where PyPI has no torch wheel), no torch of its own in a venv that sees
the site's (the README's GPU section says when)."""

from __future__ import annotations

import subprocess

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
