"""Hydra's own launcher test suites (hydra.test_utils.launcher_common_tests), as any Hydra launcher plugin runs
them: sweepit's local launcher must behave as Hydra's launchers do for an app that has never heard of sweepit
(JobReturn with the task config, hydra_cfg, the overrides as given and the task's own return value; output
directories, job names, custom resolvers, `hydra.job.chdir`). No extra overrides: the launcher's defaults."""

from __future__ import annotations

import pytest
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hydra_default_version_base")]


@pytest.mark.parametrize(("launcher_name", "overrides"), [("local", [])])
class TestLocalLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize(("task_launcher_cfg", "extra_flags"),
                         [({"defaults": [{"override hydra/launcher": "local"}, "_self_"]}, ["-m"])])
class TestLocalLauncherIntegration(IntegrationTestSuite):
    pass
