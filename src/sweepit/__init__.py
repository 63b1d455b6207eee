"""sweepit: hyperparameter sweeps of any PyTorch training function (Hydra, local workers, Slurm, Optuna).

A training function calls five things to get metrics, pruning, exact resume and its rank:

    sweepit.report(metrics, epoch=...)   sweepit.should_stop()   sweepit.save_checkpoint(state)
    sweepit.load_checkpoint()            sweepit.context()

Everything else (the launchers, the Optuna sweeper, the reports) comes through Hydra and the `sweepit` command.
"""

from __future__ import annotations

from sweepit.errors import ConfigError, DataMissingError, DivergedError, SweepitError
from sweepit.train import JobContext, context, load_checkpoint, report, save_checkpoint, should_stop

__version__ = "0.1.0"

__all__ = [
    "ConfigError", "DataMissingError", "DivergedError", "JobContext", "SweepitError", "__version__", "context",
    "load_checkpoint", "report", "save_checkpoint", "should_stop",
]
