"""Experiment trackers (TensorBoard, MLflow, Weights & Biases, CSV), chosen in a job's `logger` node, one `_target_`
config per tracker, with the sweep as the group and the job as the run (docs/results.md). They are fed by the job's
session (sweepit.report), so a user's own loop gets them too.
"""

from __future__ import annotations

from sweepit.trackers._base import RunInfo, Tracker, check_trackers, open_trackers
from sweepit.trackers._csv import CSV
from sweepit.trackers._mlflow import MLflow
from sweepit.trackers._tensorboard import TensorBoard
from sweepit.trackers._wandb import WandB

__all__ = ["CSV", "MLflow", "RunInfo", "TensorBoard", "Tracker", "WandB", "check_trackers", "open_trackers"]
