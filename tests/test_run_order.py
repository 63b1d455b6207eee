"""The order `make test` hands its tests out in (tests/conftest.py) comes from the latest measured run alone, with the
ids pytest-xdist wrote for grouped tests matched to the tests' own."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# tests/conftest.py by its path: the name `conftest` is also tests/slurm/'s.
_spec = importlib.util.spec_from_file_location("suite_conftest", Path(__file__).parent / "conftest.py")
assert _spec is not None and _spec.loader is not None
suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite)
MEASURED, measured_seconds = suite.MEASURED, suite.measured_seconds

OLD = """============================= slowest 3 durations =============================
90.00s call     tests/a.py::test_made_cheap_since
40.00s call     tests/a.py::test_alone@cluster-alone
"""
NEW = """============================= slowest 3 durations =============================
30.00s setup    tests/a.py::test_alone@cluster-alone
5.00s call     tests/a.py::test_alone@cluster-alone
20.00s call     tests/b.py::test_shared[one]@linreg-sweep
"""


def test_only_the_latest_run_counts_and_grouped_ids_match_the_tests_own(tmp_path: Path) -> None:
    (tmp_path / "2026-11-26-1.txt").write_text(OLD + "\n" + NEW)  # the last list of a file is its latest run
    (tmp_path / "2026-11-26-2-evening.txt").write_text(NEW + "\n" + OLD)
    (tmp_path / "2026-11-26-3.txt").write_text(OLD + "\n" + NEW)
    assert measured_seconds(tmp_path) == {"tests/a.py::test_alone": (30.0, 5.0),  # (setup, call and teardown)
                                          "tests/b.py::test_shared[one]": (0.0, 20.0)}


def test_the_recorded_runs_are_read_and_no_id_keeps_its_group() -> None:
    took = measured_seconds()
    assert sorted(MEASURED.glob("*.txt"))[-1].name >= "2026-11-26-4-late.txt"  # the night's last run, or later
    assert took and not [nodeid for nodeid in took if "@" in nodeid]
