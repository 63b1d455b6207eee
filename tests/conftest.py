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
COMPUTING_FIRST = 0.4  # the share of the tests using no cluster (README aside) that run before any test sharing it


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
    """The order pytest-xdist hands the tests out in (its biggest group first: `cluster-alone`).

    The tests that need the cluster alone run back to back in one process, from the start, while the other processes
    run the tests that use no cluster (they mostly compute); a test sharing the cluster handed out meanwhile would
    only wait for it. So the tests sharing the cluster (they mostly wait on it: a job's queue, its time limit, a node
    down) come after the first COMPUTING_FIRST of the computing ones, spread evenly among the rest, so that waiting
    and computing overlap to the end. The README's tests (the longest computing ones: each runs a command in a copy
    of its own) are spread among the second half of the computing ones before that (last in the order, they ended
    the run a minute after the rest); the first of them, which makes the README's fresh install for all, goes before
    every computing test, so that the install runs beside the first half (spread among them, the other processes sat
    idle waiting for it). A test marked `waits_minutes` goes first of its kind (the same). After the first
    COMPUTING_FIRST, the computing tests and the sharing ones each go longest first, by the seconds the suite's
    measured runs took (`measured_seconds`), so that the run ends on short tests that fill every process, not on a
    long one started last (pytest-xdist hands tests out in this order, never by their length). Measured on the 2-core
    machine: docs/development.md."""

    took = measured_seconds()

    def long_first(tests: list[pytest.Item]) -> list[pytest.Item]:
        return sorted(tests, key=lambda item: (item.get_closest_marker("waits_minutes") is None,
                                               -took.get(item.nodeid, 0.0)))  # stable

    alone, sharing, computing = ([i for i in items if cluster_use(i) == k] for k in ("alone", "sharing", "computing"))
    readme = [i for i in computing if i.path.parent.name == "readme"]
    install = [i for i in readme if "installed" in getattr(i, "fixturenames", ())][:1]
    readme = [i for i in readme if i not in install]
    computing = [i for i in computing if i.path.parent.name != "readme"]
    first = round(len(computing) * COMPUTING_FIRST)
    return (long_first(alone) + install + computing[:first // 2] + _spread(computing[first // 2:first], readme)
            + _spread(long_first(computing[first:]), long_first(sharing)))


MEASURED = REPO / "bench" / "results" / "test-suite"


def measured_seconds(folder: Path = MEASURED) -> dict[str, float]:
    """Each test's seconds in the latest measured run of the suite: the last slowest-durations list (pytest's
    `--durations` lines, setup, call and teardown added up) of the file of bench/results/test-suite/ whose name sorts
    last (files are named by the date of their runs, a day's files numbered -1, -2, ...). Only the latest: a test made
    cheap since an older run is short now. A test it does not list took less than the shortest one listed. pytest-xdist
    writes a grouped test's id with its group (`...@cluster-alone`), taken off here to match the test's own id."""
    measured = sorted(folder.glob("*.txt"))
    blocks = measured[-1].read_text().split("slowest ")[1:] if measured else []
    took: dict[str, float] = {}
    for seconds, nodeid in re.findall(r"^([0-9.]+)s (?:setup|call|teardown) +(\S.*?)$", blocks[-1] if blocks else "",
                                      re.MULTILINE):
        nodeid = re.sub(r"@[\w-]+$", "", nodeid)
        took[nodeid] = took.get(nodeid, 0.0) + float(seconds)
    return took


def _spread(many: list[pytest.Item], few: list[pytest.Item]) -> list[pytest.Item]:
    """`few` spread evenly among `many`, each list in its own order."""
    placed = [((n + 0.5) / len(kind), k, item) for k, kind in enumerate((many, few)) for n, item in enumerate(kind)]
    return [item for *_, item in sorted(placed, key=lambda p: (p[0], p[1]))]


_next_test: dict[str, pytest.Item | None] = {"item": None}  # what this process runs after the test running now


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _next_test["item"] = nextitem
    yield


@pytest.fixture(autouse=True)
def _cluster_access(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked `slurm` holds the local cluster shared, one marked `exclusive_cluster` holds it alone (see
    sweepit_testing.cluster_access), and keeps it for the next test of its process when that one needs it alone
    too (the `cluster-alone` group runs back to back); the others take no lock."""
    use = cluster_use(request.node)
    if use == "computing":
        yield
        return
    following = _next_test["item"]
    keep = use == "alone" and following is not None and cluster_use(following) == "alone"
    with cluster_access(use == "alone", keep=keep):
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

