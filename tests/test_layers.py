"""What the package's layers (pyproject.toml's import-linter contracts, checked by `make lint`) leave to run time: a
training function's `import sweepit`, and a job outside a study, load no plotting, no Optuna, no report code and no
Hydra."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("matplotlib", "optuna", "sweepit.reporting", "hydra")


def test_import_sweepit_and_a_job_outside_a_study_load_no_plotting_optuna_report_or_hydra() -> None:
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
