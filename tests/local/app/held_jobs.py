"""sweepit's built-in models, held mid-training until the test says so: name one as `model._target_` (e.g.
`model._target_=held_jobs.linear`, with this folder on PYTHONPATH and $SWEEPIT_TEST_HOLD naming a folder; see
sweepit_testing.Hold). Once its job has reported HELD_AFTER epochs (their metrics rows and checkpoint written), the
job's next training step waits, asleep, until the file `release` exists in that folder, and writes `held-<job
number>` there first. A test that signals or kills a job thus finds it mid-training on any machine, loaded or not,
and its jobs burn no CPU to be slow enough to be found."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

HOLD_ENV = "SWEEPIT_TEST_HOLD"
HELD_AFTER = 2  # epochs done before the hold: some to keep, some for a resume to run
HOLD_MAX_S = 300.0  # a job no test releases goes on at last, rather than outlive its test
POLL_S = 0.05


def linear(input_shape: Sequence[int], n_outputs: int) -> nn.Module:
    """task=linreg's model."""
    from sweepit.train import models

    return _held(models.linear(input_shape, n_outputs))


def mlp(input_shape: Sequence[int], n_outputs: int, hidden: int = 128, dropout: float = 0.0) -> nn.Module:
    """task=digits's model."""
    from sweepit.train import models

    return _held(models.mlp(input_shape, n_outputs, hidden, dropout))


def _held(model: nn.Module) -> nn.Module:
    folder = os.environ.get(HOLD_ENV)
    if folder:
        model.register_forward_pre_hook(_Hold(Path(folder)))  # the same module: its weights, checkpoint and label
    return model


class _Hold:
    """A forward pre-hook: before a training step, once HELD_AFTER epochs are reported, wait for the release."""

    def __init__(self, folder: Path) -> None:
        self.release = folder / "release"
        self.folder = folder
        self.done = False

    def __call__(self, module: nn.Module, args: Any) -> None:
        if self.done or not module.training:  # the loop's evaluation and its output check run in eval mode
            return
        if self.release.exists():
            self.done = True
            return
        import sweepit
        from sweepit.results._job_files import job_num, read_metrics

        job_dir = sweepit.context().job_dir
        if job_dir is None or len(read_metrics(job_dir)[0]) < HELD_AFTER:
            return
        self.done = True
        (self.folder / f"held-{job_num(job_dir)}").touch()
        deadline = time.monotonic() + HOLD_MAX_S
        while not self.release.exists() and time.monotonic() < deadline:
            time.sleep(POLL_S)  # a stop signal's KeyboardInterrupt ends it, as it ends a step
