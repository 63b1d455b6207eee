"""`logger=mlflow`: one MLflow run per job in an experiment per sweep (`<study>/<timestamp>`).

The default store is MLflow's file store in the sweep directory: one directory per run and no database, so parallel
jobs on a cluster's shared file system never wait on a lock, and nothing needs a server. A requeued or resumed job
logs into the same run (its id is kept in the job directory).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from sweepit._files import atomic_write
from sweepit.results import JobPaths, JobState
from sweepit.trackers._base import ENDED_WELL, RunInfo, Tracker

_PARAMS_PER_CALL = 100        # MLflow's log_batch limit
_PARAM_CHARS = 6000           # MLflow's longest parameter value


class MLflow(Tracker):
    module = "mlflow"
    extra = "mlflow"

    def __init__(self, tracking_uri: str | None = None, experiment: str | None = None) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.client: Any = None
        self.run_id = ""

    def start(self, run: RunInfo) -> None:
        from mlflow.entities import Param, RunTag
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        uri = self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps this store behind it
            uri = (run.home / "mlruns").resolve().as_uri()
        self.client = client = MlflowClient(tracking_uri=uri)
        name = self.experiment or run.group
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            try:
                experiment_id = client.create_experiment(name)
            except MlflowException:  # another job of the sweep created it a moment ago
                experiment = client.get_experiment_by_name(name)
                if experiment is None:
                    raise
                experiment_id = experiment.experiment_id
        else:
            experiment_id = experiment.experiment_id
        id_file = JobPaths(run.job_dir).mlflow_run
        self.run_id = id_file.read_text().strip() if id_file.is_file() else ""
        if self.run_id:
            client.update_run(self.run_id, status="RUNNING")
            return
        tags = {"sweepit.job_dir": str(run.job_dir), "sweepit.sweep_dir": str(run.sweep_dir or ""),
                "sweepit.overrides": " ".join(run.overrides)}
        self.run_id = client.create_run(experiment_id, run_name=run.name, tags=tags).info.run_id
        atomic_write(id_file, self.run_id)
        params = [Param(k, str(v)[:_PARAM_CHARS]) for k, v in run.params.items()]
        for i in range(0, len(params), _PARAMS_PER_CALL):
            client.log_batch(self.run_id, params=params[i:i + _PARAMS_PER_CALL])
        client.log_batch(self.run_id, tags=[RunTag("sweepit.status", JobState.RUNNING)])

    def log(self, metrics: Mapping[str, float], epoch: int) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), stamp, epoch) for k, v in metrics.items()])

    def finish(self, status: str, result: Mapping[str, Any] | None) -> None:
        if self.client is None:
            return
        self.client.set_tag(self.run_id, "sweepit.status", status)
        if result is not None and isinstance(result.get("objective"), int | float):
            self.client.log_metric(self.run_id, "objective", float(result["objective"]))
        ended = "FINISHED" if status in ENDED_WELL else "KILLED" if status == JobState.INTERRUPTED else "FAILED"
        self.client.set_terminated(self.run_id, status=ended)
        self.client = None
