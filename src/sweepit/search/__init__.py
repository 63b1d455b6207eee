"""Optuna search: asynchronous trials over any launcher, pruning from inside the jobs, resumable studies, and
long-lived workers; and successive halving over a grid. Hydra-free (the Hydra sweepers read the space and the grid
from Hydra's override grammar)."""

from __future__ import annotations

from sweepit.search._halving import Halving, HalvingOptions
from sweepit.search._options import JobDefaults, SearchOptions
from sweepit.search._pruning import pruning_callback
from sweepit.search._results import best_command, best_trial, load_study_of, trials_table, write_results
from sweepit.search._search import Search
from sweepit.search._space import Param, SearchSpace, spelled
from sweepit.search._trials import AsyncLauncher
from sweepit.search._worker_loop import StudySource, drive, started_trials

__all__ = [
    "AsyncLauncher", "Halving", "HalvingOptions", "JobDefaults", "Param", "Search", "SearchOptions", "SearchSpace",
    "StudySource", "best_command", "best_trial", "drive", "load_study_of", "pruning_callback", "spelled",
    "started_trials", "trials_table", "write_results"
]
