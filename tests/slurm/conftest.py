"""The local Slurm cluster (scripts/slurm-cluster.sh) as a fixture; every test in this folder that needs it is
marked `slurm` (those marked `no_cluster` need none and run with the fast tests).

Without a usable cluster the tests skip, saying to run `make slurm-up`; with SWEEPIT_REQUIRE_SLURM=1 (CI) they
fail instead, so a broken cluster can never pass as skipped tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_cluster_testing import SlurmCluster, describe

from sweepit_testing import cluster_access, require_slurm

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def _slurm_usable() -> None:
    """Skips (or fails, under SWEEPIT_REQUIRE_SLURM=1) when the local cluster is not usable; asked once a process."""
    with cluster_access(exclusive=False):
        require_slurm()


@pytest.fixture
def slurm_cluster(_slurm_usable: None) -> SlurmCluster:
    """The running local cluster as it is now, described for each test: a description kept for the session would be
    of whichever variant a test of the same process had up when it was first asked for."""
    return describe()


@pytest.fixture(autouse=True)
def _needs_slurm_cluster(request: pytest.FixtureRequest) -> None:
    """Every test here skips or fails on the cluster's state, even one that does not use the fixture; tests
    marked `no_cluster` (the launcher's logic on recorded states, schemas, profiles) run anywhere."""
    if request.node.get_closest_marker("no_cluster") is None:
        request.getfixturevalue("slurm_cluster")


@pytest.hookimpl(tryfirst=True)  # before `-m "not slurm"` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents and item.get_closest_marker("no_cluster") is None:
            item.add_marker(pytest.mark.slurm)
