"""The report's imports made while a Slurm sweep's jobs run (`preload_report`): only where the sweep ends with a
report, so that a driver without one never loads matplotlib."""

from __future__ import annotations

import subprocess
import sys

import pytest

SUMMARY = "hydra_plugins.sweepit.callbacks.SweepSummary"


@pytest.mark.parametrize(("callbacks", "loaded"), [
    ({"summary": {"_target_": SUMMARY}}, True),
    ({"summary": {"_target_": SUMMARY, "report": False}}, False),
    ({}, False),
], ids=["report", "report-false", "no-summary"])
def test_the_report_is_preloaded_only_where_the_sweep_ends_with_one(callbacks: dict[str, object],
                                                                    loaded: bool) -> None:
    code = (
        "import sys\n"
        "from omegaconf import OmegaConf\n"
        "from hydra_plugins.sweepit.callbacks import preload_report\n"
        f"preload_report(OmegaConf.create({{'hydra': {{'callbacks': {callbacks!r}}}}}))\n"
        "print('matplotlib' in sys.modules, 'sweepit.reporting' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [str(loaded), str(loaded)]
