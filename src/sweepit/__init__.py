"""sweepit: hyperparameter sweeps of any PyTorch training function (Hydra, local workers, Slurm, Optuna).

A training function calls five things to get metrics, pruning, exact resume and its rank:

    sweepit.report(metrics, epoch=...)   sweepit.should_stop()   sweepit.save_checkpoint(state)
    sweepit.load_checkpoint()            sweepit.context()

Everything else (the launchers, the Optuna sweeper, the reports) comes through Hydra and the `sweepit` command;
`sweepit.load(sweep_dir)` reads a sweep into pandas (a notebook), loading pandas on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sweepit.errors import ConfigError, DataMissingError, DivergedError, PausedAtRung, SweepitError
from sweepit.train import JobContext, context, load_checkpoint, report, save_checkpoint, should_stop

if TYPE_CHECKING:
    from sweepit.analysis import load

__version__ = "0.1.0"

__all__ = [
    "ConfigError", "DataMissingError", "DivergedError", "JobContext", "PausedAtRung", "SweepitError", "__version__",
    "context", "load", "load_checkpoint", "report", "save_checkpoint", "should_stop",
]


def __getattr__(name: str) -> Any:
    if name == "load":  # the report's readers and pandas stay out of a training job's `import sweepit`
        from sweepit.analysis import load

        return load
    raise AttributeError(f"module 'sweepit' has no attribute {name!r}")
