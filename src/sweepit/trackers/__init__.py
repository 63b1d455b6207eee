"""Experiment trackers: every epoch's metrics, the job's config as hyperparameters and its final status go to
TensorBoard, MLflow, Weights & Biases or a CSV file, with the sweep as the group (experiment) and the job as
the run, so each tracker's own comparison views work for a sweep.

A job's config chooses them in its `logger` node, one `_target_` config per tracker (the `logger` config
group: `logger=tensorboard`, `logger=[tensorboard,mlflow]`, `logger=many`):

    logger:
      tensorboard: {_target_: sweepit.trackers.TensorBoard}
      mlflow:      {_target_: sweepit.trackers.MLflow, tracking_uri: null}

They are fed by the job's session (sweepit.report), so a user's own loop gets them too; only rank 0 logs.
Each tracker's package is an optional extra: a missing one is a ConfigError that names the extra.
"""

from __future__ import annotations

from sweepit.trackers._base import RunInfo, Tracker, check_trackers, open_trackers
from sweepit.trackers._csv import CSV
from sweepit.trackers._mlflow import MLflow
from sweepit.trackers._tensorboard import TensorBoard
from sweepit.trackers._wandb import WandB

__all__ = ["CSV", "MLflow", "RunInfo", "TensorBoard", "Tracker", "WandB", "check_trackers", "open_trackers"]
