"""Shared fixtures: compose the real configs from conf/, shrunk to run in seconds on a CPU; and how the tests share
the local Slurm cluster and their expensive set-ups when `make test` runs them in parallel processes."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.version import _UNSPECIFIED_, VersionBase
from omegaconf import DictConfig

import sweepit_testing
from sweepit_testing import CONF, REPO, cluster_access, tmpfs


def pytest_configure(config: pytest.Config) -> None:
    """The tests run as from a shell with the test run's venv active (`source .venv/bin/activate`, as the README's
    commands after the first assume): `python` there is this Python, so the commands a sweep prints open with
    `python`. A test of another shell takes this Python's folder off PATH itself."""
    here = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "").split(os.pathsep)
    if path[:1] != [here]:
        os.environ["PATH"] = os.pathsep.join([here, *path])
    # The suite runs more processes than cores. An idle OpenMP thread of torch (libgomp) spins on its core before it
    # sleeps, taking the CPU that the other processes wait for; a passive one sleeps at once. No result changes, only
    # who gets the cores. Every process the tests start inherits it (the README's commands and Slurm jobs too),
    # unless the run sets its own.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


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
    "reporting/test_compare.py": "linreg-sweep",
    "analysis/test_load.py": "analysis-sweep",
    "analysis/test_load_states.py": "analysis-sweep",
}
CLUSTER_ALONE = "cluster-alone"  # the xdist group of every test marked exclusive_cluster


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups and the order
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        group = SHARED_SET_UP.get(item.path.relative_to(here).as_posix())
        if cluster_use(item) == "alone":
            group = CLUSTER_ALONE
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    items[:] = run_order(items)


def cluster_use(item: pytest.Item) -> str:
    """How a test uses the local cluster: "alone" (marked exclusive_cluster), "sharing" (marked slurm) or
    "computing" (not at all)."""
    if item.get_closest_marker("exclusive_cluster") is not None:
        return "alone"
    return "sharing" if item.get_closest_marker("slurm") is not None else "computing"


def run_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """The order pytest-xdist hands the tests out in: the tests that need the cluster alone, then those that use no
    cluster, then those sharing it.

    The tests needing the cluster alone run back to back in one process (the group `cluster-alone`), from the start.
    Meanwhile the other processes run the tests that use no cluster (they mostly compute); a test sharing the
    cluster handed out then would hold its process idle until the group ends. The tests sharing the cluster come
    last: they mostly wait (a job's queue, its time limit, a node down), so the processes that run them overlap
    their waits to the end. The README's tests (each runs a command in a copy of its own) are spread among the
    computing ones; the first of them, which makes the README's fresh install for all, goes first. Within each kind,
    a test marked `waits_minutes` goes first, then the longest first by the latest measured run
    (`measured_seconds`), so that the run ends on short tests that fill every process, not on a long one started
    last (pytest-xdist hands tests out in this order, never by their length). Measured: docs/development.md."""

    measured = measured_seconds()

    def took(item: pytest.Item) -> float:
        """Its call and teardown, and its setup where it takes no cluster lock: a cluster test's setup is mostly its
        wait for the lock (`_cluster_access`), which says when it ran, not how long it takes."""
        setup_s, rest_s = measured.get(item.nodeid, (0.0, 0.0))
        return rest_s + (setup_s if cluster_use(item) == "computing" else 0.0)

    def long_first(tests: list[pytest.Item]) -> list[pytest.Item]:
        return sorted(tests, key=lambda item: (item.get_closest_marker("waits_minutes") is None, -took(item)))  # stable

    alone, sharing, computing = ([i for i in items if cluster_use(i) == k] for k in ("alone", "sharing", "computing"))
    readme = [i for i in computing if i.path.parent.name == "readme"]
    install = [i for i in readme if "installed" in getattr(i, "fixturenames", ())][:1]
    readme = [i for i in readme if i not in install]
    computing = [i for i in computing if i.path.parent.name != "readme"]
    return long_first(alone) + install + _spread(long_first(computing), readme) + long_first(sharing)


MEASURED = REPO / "bench" / "results" / "test-suite"


def measured_seconds(folder: Path = MEASURED) -> dict[str, tuple[float, float]]:
    """Each test's seconds of setup and of call and teardown in the latest measured run of the suite: the last
    slowest-durations list (pytest's `--durations` lines) of the file of bench/results/test-suite/ whose name sorts
    last (files are named by the date of their runs, a day's files numbered -1, -2, ...). Only the latest: a test made
    cheap since an older run is short now. A test it does not list took less than the shortest one listed.
    pytest-xdist writes a grouped test's id with its group (`...@cluster-alone`), taken off here to match the test's
    own id."""
    measured = sorted(folder.glob("*.txt"))
    blocks = measured[-1].read_text().split("slowest ")[1:] if measured else []
    took: dict[str, tuple[float, float]] = {}
    for seconds, phase, nodeid in re.findall(r"^([0-9.]+)s (setup|call|teardown) +(\S.*?)$",
                                             blocks[-1] if blocks else "", re.MULTILINE):
        nodeid = re.sub(r"@[\w-]+$", "", nodeid)
        setup_s, rest_s = took.get(nodeid, (0.0, 0.0))
        took[nodeid] = (setup_s + float(seconds), rest_s) if phase == "setup" else (setup_s, rest_s + float(seconds))
    return took


def _spread(many: list[pytest.Item], few: list[pytest.Item]) -> list[pytest.Item]:
    """`few` spread evenly among `many`, each list in its own order."""
    placed = [((n + 0.5) / len(kind), k, item) for k, kind in enumerate((many, few)) for n, item in enumerate(kind)]
    return [item for *_, item in sorted(placed, key=lambda p: (p[0], p[1]))]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # Known before the test's set-up: a class's or module's cluster variant, set up and torn down around its tests,
    # keeps the cluster alone for the next test too when that one needs it alone (sweepit_testing.cluster_access).
    sweepit_testing.next_test_alone["yes"] = nextitem is not None and cluster_use(nextitem) == "alone"
    yield


@pytest.fixture(autouse=True)
def _cluster_access(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked `slurm` holds the local cluster shared, one marked `exclusive_cluster` holds it alone (see
    sweepit_testing.cluster_access); the others take no lock."""
    use = cluster_use(request.node)
    if use == "computing":
        yield
        return
    with cluster_access(use == "alone"):
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

