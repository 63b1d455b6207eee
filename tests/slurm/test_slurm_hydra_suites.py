"""Hydra's own launcher test suites (hydra.test_utils.launcher_common_tests) for the Slurm launcher, on the local
cluster: for an app that has never heard of sweepit (no trainer.gpus, no timeout_min: CPU-only jobs with the
launcher's time limit), JobReturn carries the task config, hydra_cfg, the overrides as given and the task's
own return value. No extra overrides: the `slurm` profile as it comes with the package."""

from __future__ import annotations

import pytest
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hydra_default_version_base")]


@pytest.mark.parametrize(("launcher_name", "overrides"), [("slurm", [])])
class TestSlurmLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize(("task_launcher_cfg", "extra_flags"),
                         [({"defaults": [{"override hydra/launcher": "slurm"}, "_self_"]}, ["-m"])])
class TestSlurmLauncherIntegration(IntegrationTestSuite):
    pass
