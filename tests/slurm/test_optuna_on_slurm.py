"""The Optuna sweeper on hydra/launcher=slurm: trials run as Slurm jobs, report each epoch to the study's journal
file in the sweep directory (shared by the driver and the jobs), and are told to Optuna when they end."""

from __future__ import annotations

from pathlib import Path

from optuna.trial import TrialState
from slurm_launcher_testing import LINREG, TRAIN, manifest, result, run

import optuna


def test_optuna_search_through_slurm(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run(TRAIN, sweep, *LINREG, "epochs=3", "hydra/sweeper=optuna", "optimizer=choice(adam,sgd)",
               "lr=tag(log, interval(1e-3, 0.1))", "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2",
               "hydra.sweeper.sampler.seed=0", "hydra.callbacks.summary.report=false", "study=optuna_slurm")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The Slurm launcher offers Hydra's batch API only: the sweeper says it runs batches of n_jobs.
    assert "trials run in batches of 2" in proc.stderr + proc.stdout
    assert manifest(sweep).launcher == "slurm"
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(sweep / "optuna.journal")))
    trials = optuna.load_study(study_name="optuna_slurm", storage=storage).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    for t in trials:
        assert sorted(t.intermediate_values) == [1, 2, 3]  # reported by the Slurm job, epoch by epoch
        assert result(Path(t.user_attrs["job_dir"]))["status"] == "completed"
    assert (sweep / "best_params.yaml").is_file()
