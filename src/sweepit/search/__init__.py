"""Optuna search: asynchronous trials over any launcher, pruning from inside the jobs, resumable studies.

    space = SearchSpace([Param.interval("lr", "", "tag(log, interval(1e-4, 1))", 1e-4, 1.0, log=True)], fixed=[])
    search = Search(SearchOptions(n_trials=20, n_jobs=4), space, sweep_dir, JobDefaults(metric="val_acc"))
    search.open()
    search.run(launcher)      # AsyncLauncher: start / wait_any / close; any other: Hydra's batch launch()

The Hydra sweeper (`hydra/sweeper=optuna`) reads the space from Hydra's override grammar and hands the rest to
`Search`; a job that the search launched reports its epochs to its trial through `pruning_callback`.
"""

from __future__ import annotations

from sweepit.search._pruning import PRUNERS, pruning_callback
from sweepit.search._results import best_command, best_trial, load_study_of, trials_table, write_results
from sweepit.search._samplers import SAMPLERS
from sweepit.search._search import JobDefaults, Search, SearchOptions, no_env
from sweepit.search._space import Param, SearchSpace, spelled
from sweepit.search._trials import AsyncLauncher, BatchLauncher
from sweepit.search._worker_loop import StudySource, drive, started_trials

__all__ = [
    "PRUNERS", "SAMPLERS", "AsyncLauncher", "BatchLauncher", "JobDefaults", "Param", "Search", "SearchOptions",
    "SearchSpace", "StudySource", "best_command", "best_trial", "drive", "load_study_of", "no_env", "pruning_callback",
    "spelled", "started_trials", "trials_table", "write_results"
]
