"""The trackers on every entry path a job has: a single run and a multirun of sweepit's train.py and of a user's own
loop, for every choice of the `logger` group; Hydra's basic launcher, the local launcher, an Optuna trial, and
`sweepit resume`, `status` and `report` on what they left (the Slurm launchers: tests/slurm/test_trackers_on_slurm.py).
A change to a job's session that breaks one of these paths fails here."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_trackers import mlflow_runs, wandb_records

from sweepit.results._job_files import read_metrics
from sweepit_testing import REPO, run_train, write_mnist_subset

OWN_LOOP = REPO / "examples" / "own_loop" / "train.py"
LOGGER_CHOICES = sorted(p.stem for p in (REPO / "src/hydra_plugins/sweepit/conf/logger").glob("*.yaml"))
# What each choice writes for a job: the trackers of `many` are listed in its own file.
TRACKERS = {"many": ("csv", "tensorboard", "mlflow")}
TRACKER_WARNING = "could not record"
NO_REPORT = "hydra.callbacks.summary.report=false"


def run_app(script: Path, args: list[str], cwd: Path, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def sweepit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "sweepit"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def check_tracked(job_dir: Path, tracker: str, home: Path, status: str) -> None:
    """The job's run in `tracker` exists, has its epochs, and ended with `status`; `home` is where the runs of its
    sweep (or a single run's own) are kept."""
    rows, _ = read_metrics(job_dir)
    epochs = [r["epoch"] for r in rows]
    assert epochs, f"{job_dir} has no metrics"
    if tracker == "csv":
        with (job_dir / "metrics.csv").open() as f:
            assert [int(r["epoch"]) for r in csv.DictReader(f)] == epochs
    elif tracker == "tensorboard":
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(job_dir / "tensorboard"))
        events.Reload()
        metric = next(k for k in rows[-1] if k != "epoch" and isinstance(rows[-1][k], float))
        assert [e.step for e in events.Scalars(metric)] == epochs
    elif tracker == "mlflow":
        runs = mlflow_runs(home / "mlruns")
        _, run, client = runs[job_dir.name]
        assert run.data.tags["sweepit.status"] == status
        assert run.info.status == ("FINISHED" if status == "completed" else "FAILED")
        metric = next(k for k in rows[-1] if k != "epoch" and isinstance(rows[-1][k], float))
        assert sorted(m.step for m in client.get_metric_history(run.info.run_id, metric)) == epochs
    elif tracker == "wandb":
        records = wandb_records(job_dir)
        assert sum(r.WhichOneof("record_type") == "history" for r in records) == len(epochs)
        summary = {item.key: json.loads(item.value_json) for r in records
                   if r.WhichOneof("record_type") == "summary" for item in r.summary.update}
        assert summary["sweepit_status"] == status
    else:
        raise AssertionError(f"no check for the tracker {tracker}: add one")


def only_job(sweep: Path) -> Path:
    (job,) = [p for p in sweep.iterdir() if (p / "result.json").is_file()]
    return job


# Each app, its tiny run, and how it picks a logger (a user's loop has no logger group of its own: sweepit's files
# give it one, added with +).
APPS = {"train.py": (REPO / "train.py", ["task=linreg", "epochs=2"], "logger"),
        "own_loop": (OWN_LOOP, ["epochs=2", "n_train=300"], "+logger")}


@pytest.mark.slow
@pytest.mark.parametrize("app", sorted(APPS))
def test_every_tracker_records_a_single_run(tmp_path: Path, app: str) -> None:
    """Every tracker in one single run (each choice's own file is composed by the multirun below): a process start
    each would cost seconds."""
    script, args, key = APPS[app]
    run_dir = tmp_path / "run"
    single = run_app(script, [*args, f"{key}=[many,wandb]", f"hydra.run.dir={run_dir}"], tmp_path)
    assert single.returncode == 0, single.stderr[-3000:]
    assert sorted({*TRACKERS["many"], "wandb"}) == sorted(c for c in LOGGER_CHOICES if c not in TRACKERS)
    for tracker in (*TRACKERS["many"], "wandb"):
        check_tracked(run_dir, tracker, run_dir, "completed")
    assert TRACKER_WARNING not in single.stderr + single.stdout + (run_dir / "train.log").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("app", sorted(APPS))
def test_every_logger_choice_records_its_job_of_a_multirun(tmp_path: Path, app: str) -> None:
    """One sweep over the logger group's choices, a job each (forked from one driver: a process start each would
    cost seconds)."""
    script, args, key = APPS[app]
    sweep = tmp_path / "sweep"
    multi = run_app(script, ["-m", *args, f"{key}={','.join(LOGGER_CHOICES)}", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert multi.returncode == 0, multi.stderr[-3000:]
    assert TRACKER_WARNING not in multi.stderr + multi.stdout
    jobs = {}
    for job in (p for p in sweep.iterdir() if (p / "result.json").is_file()):
        (choice,) = [o.split("=", 1)[1] for o in yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())
                     if o.lstrip("+").startswith("logger=")]
        jobs[choice] = job
    assert sorted(jobs) == LOGGER_CHOICES
    for choice, job in jobs.items():
        for tracker in TRACKERS.get(choice, (choice,)):
            check_tracked(job, tracker, sweep, "completed")


# An app with a `logger` group of its own, shaped as lightning-hydra-template's (Lightning's loggers, whose paths
# interpolate what only the app's run sets): `logger=csv` is the app's CSV logger, not sweepit's tracker.
APP_WITH_LOGGERS = '''
import hydra, json
from pathlib import Path
from hydra.utils import instantiate
from omegaconf import DictConfig


class CSVLogger:  # Lightning's logger methods; none of a sweepit tracker's
    def __init__(self, save_dir, name):
        self.path = Path(save_dir) / name

    def log_metrics(self, metrics, step):
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "metrics.json").write_text(json.dumps(metrics))


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float:
    for logger in cfg.get("logger", {}).values():
        instantiate(logger).log_metrics({"x": cfg.x}, 0)
    return float(cfg.x)


if __name__ == "__main__":
    main()
'''
APP_CONFIG = '''
defaults:
  - _self_
  - logger: null
x: 1
paths:
  output_dir: ${hydra:runtime.output_dir}
'''
APP_CSV_LOGGER = '''
csv:
  _target_: lightning_like.CSVLogger
  save_dir: "${paths.output_dir}"
  name: "csv/"
'''


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["local", "basic"])
def test_an_apps_own_logger_group_is_the_apps(tmp_path: Path, launcher: str) -> None:
    app = tmp_path / "app"
    (app / "conf" / "logger").mkdir(parents=True)
    (app / "lightning_like.py").write_text(APP_WITH_LOGGERS)
    (app / "conf" / "train.yaml").write_text(APP_CONFIG)
    (app / "conf" / "logger" / "csv.yaml").write_text(APP_CSV_LOGGER)
    env = {"PYTHONPATH": str(app)}
    run_dir, sweep = tmp_path / "run", tmp_path / "sweep"
    single = run_app(app / "lightning_like.py", ["logger=csv", f"hydra.run.dir={run_dir}"], tmp_path, env)
    multi = run_app(app / "lightning_like.py", ["-m", "logger=csv", "x=1,2", f"hydra/launcher={launcher}",
                                                f"hydra.sweep.dir={sweep}"], tmp_path, env)
    for proc in (single, multi):
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert TRACKER_WARNING not in proc.stderr + proc.stdout
    jobs = [p for p in sweep.iterdir() if p.is_dir() and (p / ".hydra").is_dir()]
    assert len(jobs) == 2
    for job in [run_dir, *jobs]:
        assert (job / "csv" / "metrics.json").is_file()   # the app's own logger wrote
        assert not (job / "metrics.csv").exists()          # sweepit's CSV tracker was not made of it
        log = next(job.glob("*.log"), None)
        assert log is None or TRACKER_WARNING not in log.read_text()


@pytest.mark.slow
def test_basic_launcher_optuna_trial_and_resume_go_through_the_trackers(tmp_path: Path) -> None:
    """Hydra's basic launcher (every job in the driver's process), an Optuna trial, and a resumed job each leave the
    tracker's rows and status; `sweepit status` and `report` read the sweeps they left (the sweeps end without a
    report of their own: `sweepit report` makes it)."""
    basic = tmp_path / "basic"
    proc = run_train(["-m", "task=linreg", "epochs=2", "lr=0.01,0.02", "logger=csv", "hydra/launcher=basic",
                      NO_REPORT, f"hydra.sweep.dir={basic}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p for p in basic.iterdir() if (p / "result.json").is_file())
    assert len(jobs) == 2
    for job in jobs:
        check_tracked(job, "csv", basic, "completed")

    search = tmp_path / "optuna"
    proc = run_train(["-m", "task=linreg", "epochs=2", "logger=mlflow", "hydra/sweeper=optuna",
                      "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2", "lr=tag(log, interval(0.001, 0.1))",
                      NO_REPORT, f"hydra.sweep.dir={search}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = [p for p in search.iterdir() if (p / "result.json").is_file()]
    assert len(trials) == 2
    for trial in trials:
        check_tracked(trial, "mlflow", search, "completed")

    # A sweep whose jobs fail (no data yet), then resumed once the data are there: the trackers' runs of the
    # resumed jobs end completed.
    data, resumed = tmp_path / "mnist", tmp_path / "resumed"
    proc = run_train(["-m", "task=mnist", f"data.root={data}", "task.model=mlp", "epochs=1", "lr=0.01,0.02",
                      "logger=mlflow", NO_REPORT, f"hydra.sweep.dir={resumed}"], tmp_path)
    assert proc.returncode != 0
    assert {json.loads((p / "result.json").read_text())["status"] for p in resumed.iterdir()
            if (p / "result.json").is_file()} == {"failed"}
    write_mnist_subset(data, 300, 100)
    done = sweepit("resume", str(resumed), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    for job in (p for p in resumed.iterdir() if (p / "result.json").is_file()):
        check_tracked(job, "mlflow", resumed, "completed")

    for sweep in (basic, search, resumed):
        # Hydra's basic launcher writes no sweep.json: its sweep is read by `summary` (`status` says so).
        status = sweepit("summary" if sweep == basic else "status", str(sweep), cwd=tmp_path)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "2 jobs: 2 completed" in status.stdout
        report = sweepit("report", str(sweep), cwd=tmp_path)
        assert report.returncode == 0, report.stderr[-3000:]
        assert (sweep / "report" / "index.html").is_file()
