"""The package's layers (pyproject.toml's import-linter contracts, run by `make lint`) hold, and what they leave to run
time holds too: a training function's `import sweepit`, and a job outside a study, load no plotting, no Optuna and no
report code."""

from __future__ import annotations

import subprocess
import sys

from sweepit_testing import REPO

HEAVY = ("matplotlib", "optuna", "sweepit.reporting", "hydra")


def test_the_import_contracts_hold() -> None:
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "lint-imports") if (REPO / ".venv").exists()
                           else "lint-imports"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout, proc.stdout[-2000:]


def test_import_sweepit_and_a_job_outside_a_study_load_no_plotting_optuna_report_or_hydra(tmp_path: object) -> None:
    code = (
        "import sys, tempfile, pathlib\n"
        "import sweepit\n"
        "from sweepit.train import _session\n"
        "job = pathlib.Path(tempfile.mkdtemp())\n"
        "s = _session.begin(job, {'metric': 'loss', 'direction': 'minimize'})\n"
        "sweepit.report({'loss': 1.0}, epoch=1)\n"
        "sweepit.should_stop()\n"
        "s.finish('completed', returned=1.0)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m.startswith('sweepit.reporting')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]", proc.stdout
