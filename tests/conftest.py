"""Shared fixtures: compose the real configs from conf/, shrunk to run in seconds on a CPU; and how the tests share
the local Slurm cluster and their expensive set-ups when `make test` runs them in parallel processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.version import _UNSPECIFIED_, VersionBase
from omegaconf import DictConfig

from sweepit_testing import CONF, cluster_access, tmpfs


@pytest.fixture
def compose_cfg() -> Iterator[Callable[..., DictConfig]]:
    """compose_cfg("task=mnist", ...) returns the job config as `python train.py <overrides>` sees it."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):

        def _compose(*overrides: str) -> DictConfig:
            return compose(config_name="config", overrides=list(overrides))

        yield _compose


# Tests whose module- or session-scoped set-up is costly (a fresh `make install`, a real sweep) run in one process,
# so that the set-up is made once (pytest-xdist's --dist loadgroup); every other test goes wherever a process is free.
SHARED_SET_UP = {
    "results/test_weights_and_clean.py": "weights-sweep",
    "reporting/test_report_html.py": "linreg-sweep",
    "reporting/test_report_sweep.py": "linreg-sweep",
    "reporting/test_report_broken.py": "linreg-sweep",
    "slurm/test_slurm_variants.py": "cluster-variants",  # a class reconfigures the cluster once for its tests
}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups and the order
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        group = SHARED_SET_UP.get(item.path.relative_to(here).as_posix())
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    items[:] = _cluster_modules_spread(items, here / "slurm")


def _cluster_modules_spread(items: list[pytest.Item], cluster_tests: Path) -> list[pytest.Item]:
    """The test modules of tests/slurm/ spread evenly among the others (each module's tests kept together, in their
    order). Those tests mostly wait on the cluster (a job's queue, its time limit, a node down) and the others mostly
    compute; pytest-xdist hands tests out in this order, so a process waiting on the cluster leaves the cores to
    one computing, instead of all of them waiting together at the end of the alphabet."""
    modules: dict[Path, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.path, []).append(item)
    waiting = [m for m in modules if m.is_relative_to(cluster_tests)]
    computing = [m for m in modules if not m.is_relative_to(cluster_tests)]

    def spread(kind: list[Path]) -> list[tuple[float, Path]]:
        """Each module at the middle of its share of its kind's tests (0..1)."""
        total, done, placed = sum(len(modules[m]) for m in kind), 0, []
        for m in kind:
            placed.append(((done + len(modules[m]) / 2) / total, m))
            done += len(modules[m])
        return placed

    order = sorted(spread(waiting) + spread(computing), key=lambda placed: placed[0])
    return [item for _, m in order for item in modules[m]]


@pytest.fixture(autouse=True)
def _cluster_access(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked `slurm` holds the local cluster shared, one marked `exclusive_cluster` holds it alone (see
    sweepit_testing.cluster_access); the others take no lock."""
    exclusive = request.node.get_closest_marker("exclusive_cluster") is not None
    if not exclusive and request.node.get_closest_marker("slurm") is None:
        yield
        return
    with cluster_access(exclusive):
        yield


@pytest.fixture
def hydra_default_version_base() -> Iterator[None]:
    """Hydra's own launcher suites expect Hydra's default version base (jobs chdir into their output
    directory). A test that composed with version_base="1.3" earlier in the session leaves that in Hydra's
    VersionBase singleton, which `hydra_restore_singletons` then restores as it found it."""
    instance = VersionBase.instance()
    saved = instance.version_base
    instance.version_base = _UNSPECIFIED_  # as in a fresh process
    yield
    instance.version_base = saved


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB file system (tmpfs) to fill up; skipped where mounting is not permitted."""
    with tmpfs(tmp_path / "small", "64k") as mount:
        yield mount

