"""What the package's layers (pyproject.toml's import-linter contracts, checked by `make lint`) leave to run time: a
training function's `import sweepit`, and a job outside a study, load no plotting, no Optuna, no report code and no
Hydra."""

from __future__ import annotations

import os
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


def test_a_job_stopped_by_sigterm_in_a_slurm_task_records_itself_without_importing_torch() -> None:
    """Between Slurm's SIGTERM and its SIGKILL (KillWait: 30 s by default, 5 s on the test cluster) a job that never
    imported torch (any Hydra app) writes its `interrupted` record; it asks its rank on the way, and an import of torch
    there can take longer than KillWait on a loaded node: the job would be killed before it wrote."""
    code = (
        "import sys, tempfile, pathlib\n"
        "from sweepit._signals import SLURM_STOP\n"
        "from sweepit.train import _session\n"
        "job = pathlib.Path(tempfile.mkdtemp())\n"
        "s = _session.begin(job, {'metric': 'loss', 'direction': 'minimize'})\n"
        "s.finish('interrupted', error=KeyboardInterrupt(SLURM_STOP))\n"
        "print((job / 'result.json').is_file(), 'torch' in sys.modules)\n"
    )
    env = {**os.environ, "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["True", "False"], proc.stdout


def test_every_sweepit_exception_is_defined_in_errors_py() -> None:
    """One place to read what can go wrong (as Optuna keeps its exceptions in optuna/exceptions.py); only the plugin's
    own, which are also Hydra's CompactHydraException, live in hydra_plugins (the one package importing Hydra)."""
    import importlib
    import pkgutil

    import sweepit
    from sweepit.errors import SweepitError

    for info in pkgutil.walk_packages(sweepit.__path__, "sweepit."):
        importlib.import_module(info.name)

    def subclasses(cls: type) -> list[type]:
        return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]

    elsewhere = sorted(f"{c.__module__}.{c.__qualname__}" for c in subclasses(SweepitError)
                       if c.__module__ != "sweepit.errors" and not c.__module__.startswith(("hydra_plugins.", "test")))
    assert elsewhere == []
