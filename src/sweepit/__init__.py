"""sweepit: hyperparameter sweeps of one PyTorch training function (Hydra, local workers, Slurm, Optuna)."""

from __future__ import annotations

from sweepit.errors import ConfigError, DataMissingError, SweepitError

__version__ = "0.1.0"

__all__ = ["ConfigError", "DataMissingError", "SweepitError", "__version__"]
