"""A sweep read in Python (a notebook): `sweepit.load(dir)` gives one row per job as a pandas DataFrame, the best
job, and each job's epochs, config and trained model. pandas is imported only when a sweep is loaded."""

from __future__ import annotations

from sweepit.analysis._load import JobResult, SweepResults, load

__all__ = ["JobResult", "SweepResults", "load"]
