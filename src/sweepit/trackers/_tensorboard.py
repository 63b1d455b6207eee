"""`logger=tensorboard`: event files in `<job dir>/tensorboard/`: a scalar per metric and epoch, and the job's
hyperparameters with its final metrics for the HParams dashboard."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sweepit.trackers._base import RunInfo, Tracker


class TensorBoard(Tracker):
    module = "tensorboard"
    extra = "tensorboard"

    def __init__(self, log_dir: str | None = None, flush_secs: int = 30) -> None:
        self.log_dir = log_dir
        self.flush_secs = flush_secs
        self.writer: Any = None
        self.run: RunInfo | None = None
        self.last: dict[str, float] = {}

    def start(self, run: RunInfo) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.run = run
        log_dir = self.log_dir or str(run.job_dir / "tensorboard")
        self.writer = SummaryWriter(log_dir=log_dir, flush_secs=self.flush_secs)
        if run.overrides:
            self.writer.add_text("sweepit/overrides", " ".join(run.overrides), 0)

    def log(self, metrics: Mapping[str, float], epoch: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, epoch)
        self.last = dict(metrics)
        self.writer.flush()

    def finish(self, status: str, result: Mapping[str, Any] | None) -> None:
        if self.writer is None or self.run is None:
            return
        from torch.utils.tensorboard.summary import hparams

        params = {k: ("None" if v is None else v) for k, v in self.run.params.items()}
        params["sweepit.status"] = status
        # The metrics the HParams table shows are the per-epoch scalars above (their last values).
        for summary in hparams(params, self.last):
            self.writer.file_writer.add_summary(summary)
        self.writer.add_text("sweepit/status", status, 0)
        self.writer.close()
        self.writer = None
