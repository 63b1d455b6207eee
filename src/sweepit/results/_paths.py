"""The map of a sweep's and a job's files: every name sweepit (and Hydra, for what sweepit reads of it) gives a file
or folder of a sweep directory or a job directory. No other module spells one of these names."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A sweep directory's files.
MANIFEST_FILE = "sweep.json"
SWEEP_JOURNAL_FILE = "sweep.journal"  # sweep.json's appended changes since it was last written whole
LIVE_FILE = "sweep.live.json"  # a large sweep's counts and listed jobs, kept by its driver for `sweepit status`
LOCK_FILE = "sweep.lock"
MULTIRUN_FILE = "multirun.yaml"  # Hydra's: the sweep's config, written by Hydra's sweepers and sweepit's
WORKERS_DIR = ".workers"  # what long-lived workers share: claims, plans, heartbeats
REPORT_DIR = "report"  # rewritten by each report
REPORT_PAGE = "index.html"
REPORT_CSV = "results.csv"
REPORT_SUMMARY = "summary.md"
RECORDS_FILE = ".records.json"  # in REPORT_DIR, written after the page: the records the page was built from
BEST_PARAMS_FILE = "best_params.yaml"
TRIALS_FILE = "trials.csv"
OPTIMIZATION_RESULTS_FILE = "optimization_results.yaml"  # the layout of Hydra's Optuna sweeper's file

# A job directory's files.
RESULT_FILE = "result.json"
METRICS_FILE = "metrics.jsonl"
STDOUT_LOG = "stdout.log"  # a job's output (under Slurm, links to its Slurm logs)
STDERR_LOG = "stderr.log"
BEST_WEIGHTS = "model_best.pt"  # trained weights (trainer.save_model): the best epoch's, the last epoch's
LAST_WEIGHTS = "model_last.pt"
WEIGHT_FILES = (BEST_WEIGHTS, LAST_WEIGHTS)
RANK_STATES = "checkpoint.rank*.pt"  # beside checkpoint.pt: the random states of the ranks > 0 of a multi-rank job
HYDRA_DIR = ".hydra"  # Hydra's `hydra.output_subdir` (its default), where it saves the job's config
CONFIG_FILE = "config.yaml"  # in HYDRA_DIR: the job's config, as its task got it
HYDRA_FILE = "hydra.yaml"  # in HYDRA_DIR: Hydra's own config of the job
OVERRIDES_FILE = "overrides.yaml"  # in HYDRA_DIR: the job's overrides
TASK_DIR = ".slurm"  # each Slurm task's record and logs
WANDB_RUN_FILE = ".wandb_run_id"  # the tracker's run of this job, continued when the job resumes
MLFLOW_RUN_FILE = ".mlflow_run_id"


class _In:
    """A path of the directory that a `SweepPaths` or `JobPaths` maps: `SweepPaths(d).manifest` is d / sweep.json; on
    the class, the path within that directory: `JobPaths.config` is .hydra/config.yaml (its `.name`, config.yaml)."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def __get__(self, paths: Any, owner: type | None = None) -> Path:
        return Path(*self.names) if paths is None else Path(paths.root, *self.names)


@dataclass(frozen=True)
class SweepPaths:
    """The files of one sweep directory."""

    root: Path
    manifest = _In(MANIFEST_FILE)
    journal = _In(SWEEP_JOURNAL_FILE)
    live = _In(LIVE_FILE)
    multirun = _In(MULTIRUN_FILE)
    workers = _In(WORKERS_DIR)
    trial_claims = _In(WORKERS_DIR, "jobs")  # the job numbers claimed by Optuna's workers
    submitit = _In(".submitit")  # submitit's pickles and Slurm logs of each submission
    report = _In(REPORT_DIR)
    report_page = _In(REPORT_DIR, REPORT_PAGE)
    report_csv = _In(REPORT_DIR, REPORT_CSV)
    report_summary = _In(REPORT_DIR, REPORT_SUMMARY)
    best_params = _In(BEST_PARAMS_FILE)  # the study's result files (search/_results.py)
    trials = _In(TRIALS_FILE)
    optimization_results = _In(OPTIMIZATION_RESULTS_FILE)
    study_file = _In("optuna_study.yaml")  # the study's name, storage, directions and metrics
    study_journal = _In("optuna.journal")  # Optuna's storage of the study when none is given
    budget = _In("gpu_budget.json")  # the GPU-hours its Slurm jobs reserved and were billed (slurm/_budget.py)
    budget_lock = _In("gpu_budget.lock")
    halving = _In("halving.json")  # the halving sweeper's rungs and their decisions (_rungs.py)

    def heartbeat(self, worker_id: str) -> Path:
        return self.workers / f"{worker_id}.alive"

    def claims(self, generation: int) -> Path:
        """The claims of the packed workers of one submission (`generation`): one file per job taken."""
        return self.workers / f"pack-{generation}"

    def plan(self, generation: int) -> Path:
        """The jobs that the packed workers of one submission share out."""
        return self.workers / f"pack-{generation}.json"

    def claimed(self, generation: int, worker_id: str) -> Path:
        """What one packed worker has taken of a submission."""
        return self.claims(generation) / f"{worker_id}.claimed"


@dataclass(frozen=True)
class JobPaths:
    """The files of one job directory."""

    root: Path
    result = _In(RESULT_FILE)
    metrics = _In(METRICS_FILE)
    stdout = _In(STDOUT_LOG)
    stderr = _In(STDERR_LOG)
    checkpoint = _In("checkpoint.pt")
    best_weights = _In(BEST_WEIGHTS)
    last_weights = _In(LAST_WEIGHTS)
    not_started = _In("not_started.json")  # why its Slurm run did not start its task (the sweep's GPU budget)
    hydra = _In(HYDRA_DIR)
    config = _In(HYDRA_DIR, CONFIG_FILE)
    overrides = _In(HYDRA_DIR, OVERRIDES_FILE)
    hydra_config = _In(HYDRA_DIR, HYDRA_FILE)
    tasks = _In(TASK_DIR)
    wandb_run = _In(WANDB_RUN_FILE)
    mlflow_run = _In(MLFLOW_RUN_FILE)

    def task_file(self, rank: int) -> Path:
        """Slurm task `rank`'s record: where it ran, which GPUs it saw, the error it failed with."""
        return self.tasks / f"task-{rank}.json"

    def task_files(self) -> Iterator[Path]:
        return self.tasks.glob("task-*.json")

    def rank_states(self) -> Iterator[Path]:
        return self.root.glob(RANK_STATES)

    def task_log(self, rank: int, kind: str) -> Path:
        """A link to Slurm task `rank`'s own log, `kind` "stdout" or "stderr"."""
        return self.tasks / f"task-{rank}.{kind}.log"
