"""Hydra's sweepers validate a batch by composing every job of it (`Sweeper.validate_batch_is_legal`), which at
100,000 jobs took minutes before the first job started. sweepit's loader wrapper answers that pass from a sample:
the first job of each kind (its overrides, a number standing for its type) and jobs 0, 1, 2, 4, 8, ... A bad
override of a kind of its own still fails before any job runs, with Hydra's error; a value that only some jobs of
its kind refuse fails at that job's run, recorded as a failed job, the others run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from hydra import initialize_config_dir
from hydra._internal.callbacks import Callbacks
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.plugins import Plugins
from hydra.errors import MissingConfigException
from hydra.types import HydraContext, RunMode, TaskFunction
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.sweepit._compose import job_kind
from hydra_plugins.sweepit._launcher import SweepFailed
from sweepit.results import JobState, read_record


class Mode(Enum):
    fast = 0
    slow = 1
    exact = 2


FILES = {
    "config.yaml": "defaults:\n  - sampled_schema\n  - _self_\n  - opt: adam\nseed: 0\n",
    "opt/adam.yaml": "name: adam\n",
    "opt/sgd.yaml": "name: sgd\n",
}


@pytest.fixture
def conf_dir(tmp_path: Path) -> Iterator[Path]:
    @dataclass
    class Schema:  # (here: Hydra's plugin scan executes this module again, outside sys.modules)
        mode: Mode = Mode.fast
        seed: int = 0
        opt: dict[str, Any] = field(default_factory=dict)

    ConfigStore.instance().store(name="sampled_schema", node=Schema)
    for name, text in FILES.items():
        path = tmp_path / "conf" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    yield tmp_path / "conf"
    del ConfigStore.instance().repo["sampled_schema.yaml"]  # a local class: the other tests' loaders are pickled


def task(cfg: DictConfig) -> int:
    return int(cfg.seed)


def multirun(conf_dir: Path, overrides: list[str], task_function: TaskFunction = task) -> Any:
    """Hydra's multirun (`Hydra.multirun`, without its callbacks), in this process; the sweeper, whose launcher's
    loader counts what it composed. Hydra's own errors are raised as they are."""
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        hydra = GlobalHydra.instance().hydra
        assert hydra is not None
        cfg = hydra.compose_config("config", overrides, run_mode=RunMode.MULTIRUN)
        sweeper = Plugins.instance().instantiate_sweeper(
            config=cfg, hydra_context=HydraContext(config_loader=hydra.config_loader, callbacks=Callbacks(cfg)),
            task_function=task_function)
        arguments = OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False)
        assert isinstance(arguments, list)
        try:
            sweeper.sweep(arguments=arguments)
        finally:
            multirun.sweeper = sweeper  # type: ignore[attr-defined]
    return sweeper


def n_composed(sweeper: Any) -> int:
    composed = sweeper.launcher.composed
    return int(composed.n_full + composed.n_from_base)


def test_a_job_kind_is_its_overrides_with_numbers_by_type() -> None:
    assert job_kind(["+x=7", "lr=0.1", "opt=sgd"]) == job_kind(["+x=1999", "lr=3e-4", "opt=sgd"])
    assert job_kind(["+x=7"]) != job_kind(["+x=7.5"])
    assert job_kind(["opt=sgd"]) != job_kind(["opt=adam"])
    assert job_kind(["seed=1"]) != job_kind(["seed=abc"])


def test_a_bad_group_in_job_50000_fails_before_any_job_runs(conf_dir: Path, tmp_path: Path) -> None:
    """100,000 jobs whose 50,000th picks a config that does not exist: Hydra's own error, raised by the validation
    of the batch, before the launcher starts a job; from a sample, not from 50,000 composes."""
    sweep_dir = tmp_path / "sweep"
    with pytest.raises(MissingConfigException, match="opt/nope"):
        multirun(conf_dir, ["hydra/launcher=local", f"hydra.sweep.dir={sweep_dir}", "opt=adam,nope",
                            "+i=range(0,50000)"])
    sweeper = multirun.sweeper  # type: ignore[attr-defined]
    assert n_composed(sweeper) <= 40  # (before: 50,001)
    assert not (sweep_dir / "sweep.json").exists()  # no job started


def test_a_value_that_only_some_jobs_of_its_kind_refuse_fails_at_that_jobs_run(conf_dir: Path,
                                                                               tmp_path: Path) -> None:
    """`mode=7` is an int as `mode=0,1,2` are, and its job (job 3: neither the first of its kind nor a power of two)
    is not composed by the validation: it fails as it starts, recorded as a failed job with Hydra's error, while
    the other jobs run to their end."""
    sweep_dir = tmp_path / "sweep"
    with pytest.raises(SweepFailed, match="1 failed"):
        multirun(conf_dir, ["hydra/launcher=local", f"hydra.sweep.dir={sweep_dir}", "mode=0,1,2,7",
                            "hydra.launcher.n_workers=1"])
    records = {path.parent.name: read_record(path.parent) for path in sweep_dir.glob("*/result.json")}  # by job
    assert sorted(records) == ["0", "1", "2", "3"], records
    assert [records[n].status for n in "0123"] == [JobState.COMPLETED] * 3 + [JobState.FAILED]
    assert "mode=7: Invalid value '7', expected one of [fast, slow, exact]" in str(records["3"].result.get("error"))


@pytest.mark.slurm  # a dry run asks the cluster for its partition
def test_a_packed_grid_of_10000_jobs_is_planned_from_a_few_composes(conf_dir: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The driver's side of a packed grid of 10,000 jobs, to its dry run (every job's directory and request
    planned): Hydra's validation composes a sample, the plan one working config; the workers compose the jobs. The
    count composed does not grow with the grid: 10,000 jobs show it as 100,000 do (bench-scale times 100,000)."""
    sweeper = multirun(conf_dir, ["hydra/launcher=slurm", "hydra.launcher.workers=4", "hydra.launcher.dry_run=true",
                                  f"hydra.sweep.dir={tmp_path / 'sweep'}", "+x=range(0,10000)", "opt=sgd"])
    assert "dry run: 10000 job(s) packed into 4 worker(s)" in capsys.readouterr().out
    assert n_composed(sweeper) <= 40  # (before: 2 per job)
