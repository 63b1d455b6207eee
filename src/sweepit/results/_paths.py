"""The map of a sweep's and a job's files: every name sweepit (and Hydra, for what sweepit reads of it) gives a file
or folder of a sweep directory or a job directory, and the path of each given the directory.

    SweepPaths(sweep_dir).manifest         # <sweep>/sweep.json
    JobPaths(job_dir).task_file(rank=1)    # <job>/.slurm/task-1.json

No other module spells one of these names: a reader, a writer and a glob all take it from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# A sweep directory's files.
MANIFEST_FILE = "sweep.json"
SWEEP_JOURNAL_FILE = "sweep.journal"  # sweep.json's appended changes since it was last written whole
LOCK_FILE = "sweep.lock"
MULTIRUN_FILE = "multirun.yaml"  # Hydra's: the sweep's config, written by Hydra's sweepers and sweepit's
WORKERS_DIR = ".workers"  # what long-lived workers share: claims, plans, heartbeats
SUBMITIT_DIR = ".submitit"  # submitit's pickles and Slurm logs of each submission
REPORT_DIR = "report"  # rewritten by each report
REPORT_PAGE = "index.html"
REPORT_CSV = "results.csv"
REPORT_SUMMARY = "summary.md"
RECORDS_FILE = ".records.json"  # in REPORT_DIR, written after the page: the records the page was built from
STUDY_FILE = "optuna_study.yaml"  # the study's name, storage, directions and metrics
STUDY_JOURNAL_FILE = "optuna.journal"  # Optuna's storage of the study when none is given
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
CHECKPOINT_FILE = "checkpoint.pt"
RANK_STATES = "checkpoint.rank*.pt"  # beside it, the random states of the ranks > 0 of a multi-rank job
HYDRA_DIR = ".hydra"  # Hydra's `hydra.output_subdir` (its default), where it saves the job's config
CONFIG_FILE = "config.yaml"  # in HYDRA_DIR: the job's config, as its task got it
HYDRA_FILE = "hydra.yaml"  # in HYDRA_DIR: Hydra's own config of the job
OVERRIDES_FILE = "overrides.yaml"  # in HYDRA_DIR: the job's overrides
TASK_DIR = ".slurm"  # each Slurm task's record and logs
WANDB_RUN_FILE = ".wandb_run_id"  # the tracker's run of this job, continued when the job resumes
MLFLOW_RUN_FILE = ".mlflow_run_id"


@dataclass(frozen=True)
class SweepPaths:
    """The files of one sweep directory."""

    sweep_dir: Path

    @property
    def manifest(self) -> Path:
        return Path(self.sweep_dir) / MANIFEST_FILE

    @property
    def journal(self) -> Path:
        return Path(self.sweep_dir) / SWEEP_JOURNAL_FILE

    @property
    def lock(self) -> Path:
        return Path(self.sweep_dir) / LOCK_FILE

    @property
    def multirun(self) -> Path:
        return Path(self.sweep_dir) / MULTIRUN_FILE

    @property
    def workers(self) -> Path:
        return Path(self.sweep_dir) / WORKERS_DIR

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

    @property
    def trial_claims(self) -> Path:
        """The job numbers claimed by Optuna's workers, each with its trial's record once its job starts."""
        return self.workers / "jobs"

    @property
    def submitit(self) -> Path:
        return Path(self.sweep_dir) / SUBMITIT_DIR

    @property
    def report(self) -> Path:
        return Path(self.sweep_dir) / REPORT_DIR

    @property
    def study_file(self) -> Path:
        return Path(self.sweep_dir) / STUDY_FILE

    @property
    def study_journal(self) -> Path:
        return Path(self.sweep_dir) / STUDY_JOURNAL_FILE


@dataclass(frozen=True)
class JobPaths:
    """The files of one job directory."""

    job_dir: Path

    @property
    def result(self) -> Path:
        return Path(self.job_dir) / RESULT_FILE

    @property
    def metrics(self) -> Path:
        return Path(self.job_dir) / METRICS_FILE

    @property
    def stdout(self) -> Path:
        return Path(self.job_dir) / STDOUT_LOG

    @property
    def stderr(self) -> Path:
        return Path(self.job_dir) / STDERR_LOG

    @property
    def checkpoint(self) -> Path:
        return Path(self.job_dir) / CHECKPOINT_FILE

    @property
    def hydra(self) -> Path:
        return Path(self.job_dir) / HYDRA_DIR

    @property
    def config(self) -> Path:
        return self.hydra / CONFIG_FILE

    @property
    def overrides(self) -> Path:
        return self.hydra / OVERRIDES_FILE

    @property
    def hydra_config(self) -> Path:
        return self.hydra / HYDRA_FILE

    @property
    def tasks(self) -> Path:
        return Path(self.job_dir) / TASK_DIR

    def task_file(self, rank: int) -> Path:
        """Slurm task `rank`'s record: where it ran, which GPUs it saw, the error it failed with."""
        return self.tasks / f"task-{rank}.json"

    def task_files(self) -> Iterator[Path]:
        return self.tasks.glob("task-*.json")

    def task_log(self, rank: int, kind: str) -> Path:
        """A link to Slurm task `rank`'s own log, `kind` "stdout" or "stderr"."""
        return self.tasks / f"task-{rank}.{kind}.log"
