"""The three ways in, beyond the README's own commands (tests/readme runs those word for word): a bad `_target_`
fails its job alone, the median pruner stops a hopeless trial of a user's own loop, Hydra's `basic` launcher
gives each job of a user's own loop its own state and result, and an own-loop job stopped and resumed keeps both
attempts' logs and records. Real multiruns in subprocesses, from a clean working directory; the Slurm runs are in
tests/slurm."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from sweepit.results._job_files import read_result
from sweepit.results._summary import collect
from sweepit_testing import REPO, child_env, run_command, wait_until

pytestmark = pytest.mark.slow

EXAMPLES = REPO / "examples"
CONFIG_ONLY = ["--config-dir", str(EXAMPLES / "config_only" / "conf"), "--config-name", "stripes"]


def run(script: Path, args: list[str], cwd: Path, pythonpath: Path | None = None,
        timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    env = child_env() if pythonpath is None else child_env(PYTHONPATH=str(pythonpath))
    return run_command([sys.executable, script, *args], cwd, env, timeout_s)


def only_sweep(root: Path) -> Path:
    (sweep,) = [p for p in root.iterdir() if p.is_dir()]
    return sweep


def results(sweep: Path) -> dict[int, dict[str, Any]]:
    return {row.num: row.result for row in collect(sweep)}


def test_config_only_streams_datasets_from_disk_and_a_bad_target_fails_only_its_job(tmp_path: Path) -> None:
    proc = run(REPO / "train.py", ["-m", *CONFIG_ONLY, "data._target_=mypkg.data.on_disk", f"+data.root={tmp_path}",
                                   "data.loader.num_workers=1", "model._target_=mypkg.nets.StripeNet,mypkg.nets.Nope",
                                   "epochs=2", "trainer.threads=1"],
               tmp_path, pythonpath=EXAMPLES / "config_only")
    assert proc.returncode == 1  # a job failed: the sweep says so, after running the other
    done = results(only_sweep(tmp_path / "outputs" / "stripes"))
    assert done[0]["status"] == "completed" and done[0]["data"] == "mypkg.data.on_disk()"
    assert done[1]["status"] == "failed"
    assert done[1]["error"].startswith("ConfigError: model._target_ must name a class or function, but mypkg.nets "
                                       "has no attribute 'Nope' (model._target_=mypkg.nets.Nope)")
    assert "1 of 2 jobs failed" in proc.stderr and "sweepit resume" in proc.stderr
    assert any(p.suffix == ".npy" for p in tmp_path.rglob("*.npy"))


def test_own_loop_under_optuna_is_pruned_by_the_median_pruner(tmp_path: Path) -> None:
    """lr 1e-5 learns nothing in one epoch: once an lr=0.03 trial has finished, the median pruner stops it."""
    proc = run(EXAMPLES / "own_loop" / "train.py",
               ["-m", "hydra/sweeper=optuna", "lr=choice(0.03,0.00001)", "seed=choice(0,1)",
                "hydra/sweeper/sampler=grid", "hydra.sweeper.sampler.seed=4", "hydra.sweeper.n_trials=4",
                "hydra/sweeper/pruner=median", "hydra.sweeper.pruner.n_startup_trials=1",
                "epochs=4", "n_train=600", f"hydra.sweep.dir={tmp_path / 'study'}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = optuna.load_study(study_name="sweepit", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "study" / "optuna.journal"))))
    states = {t.number: (t.state.name, t.params["lr"]) for t in study.trials}
    pruned = [t for t in study.trials if t.state.name == "PRUNED"]
    assert any(t.params["lr"] == 0.00001 for t in pruned), states  # the loop returned when told: PRUNED, not FAIL
    assert study.best_trial.params["lr"] == 0.03
    done = results(tmp_path / "study")
    for trial in pruned:
        result = done[trial.user_attrs["job_num"]]
        assert result["status"] == "pruned" and result["epochs_completed"] == len(trial.intermediate_values) < 4
        assert result["objective"] is None and "final" in result  # as train.py's: no objective, its last values
    assert "pruned" in proc.stdout  # the summary table shows it


def test_own_loop_on_hydras_basic_launcher_gives_every_job_its_own_state_and_result(tmp_path: Path) -> None:
    """Hydra's basic launcher runs every job in one process: job 1 once loaded job 0's checkpoint (a size mismatch
    with another width), trained 0 epochs and left no result.json, and the table said `pending`."""
    proc = run(EXAMPLES / "own_loop" / "train.py", ["-m", "lr=0.003,0.03", "width=8,16", "epochs=2", "n_train=300",
                                                    "hydra/launcher=basic"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = only_sweep(tmp_path / "outputs" / "own_loop")
    done = results(sweep)
    assert sorted(done) == [0, 1, 2, 3]
    for result in done.values():
        assert result["status"] == "completed" and result["epochs_completed"] == 2, result
        assert result["objective"] == result["final"]["val_acc"]
    assert "4 jobs: 4 completed" in proc.stdout and "best (maximize val_acc)" in proc.stdout
    # The reproduce line names the app's script (found beside its conf/: Hydra keeps no command line), not train.py.
    reproduce = next(line for line in proc.stdout.splitlines() if line.startswith("reproduce: "))
    assert reproduce.startswith(f"reproduce: python {EXAMPLES / 'own_loop' / 'train.py'} "), reproduce
    assert f"python {EXAMPLES / 'own_loop' / 'train.py'} " in (sweep / "report" / "summary.md").read_text()
    listing = subprocess.run([sys.executable, "-m", "sweepit.cli", "ls"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=60).stdout
    assert "4 jobs: 4 completed" in listing, listing  # not `running`


def test_own_loop_under_optuna_on_hydras_basic_launcher(tmp_path: Path) -> None:
    """Trials of two widths in one process: each builds its own model (5 of 6 failed on another trial's checkpoint)."""
    proc = run(EXAMPLES / "own_loop" / "train.py",
               ["-m", "hydra/sweeper=optuna", "hydra/launcher=basic", "width=choice(8,16)", "lr=interval(0.001,0.1)",
                "hydra.sweeper.n_trials=4", "hydra.sweeper.sampler.seed=1", "epochs=2", "n_train=300",
                f"hydra.sweep.dir={tmp_path / 'study'}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = results(tmp_path / "study")
    assert len(done) == 4 and {r["status"] for r in done.values()} == {"completed"}, done
    assert {r["epochs_completed"] for r in done.values()} == {2}


def test_an_own_loop_job_stopped_and_resumed_keeps_both_attempts_and_counts_their_time(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the driver) stops the job mid-training; `sweepit resume` runs it on from its checkpoint. The
    first attempt's log and record stay beside the second's (the resume once truncated stdout.log: epochs 1-2 were
    gone), and result.json counts both attempts and their time together. The completed job's checkpoint.pt stays,
    as the docs say (the example's state is the only copy of its trained model)."""
    sweep, epochs = tmp_path / "sweep", 6
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "OMP_NUM_THREADS": "1"}
    driver = subprocess.Popen([sys.executable, str(EXAMPLES / "own_loop" / "train.py"), "-m", "lr=0.003", "n_train=600",
                               f"epochs={epochs}", f"hydra.sweep.dir={sweep}"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def second_epoch_printed() -> bool:  # the example prints an epoch after reporting it: wait on what is asserted
        found = list(sweep.glob("0_*/stdout.log"))
        return bool(found) and "epoch 2: val_acc" in found[0].read_text()

    try:
        wait_until(lambda: second_epoch_printed() or driver.poll() is not None, "the job's second epoch", 120,
                   interval_s=0.05)
        driver.send_signal(signal.SIGINT)
        _, err = driver.communicate(timeout=60)
    finally:
        driver.kill()
    assert driver.returncode == 1 and "sweep stopped by SIGINT" in err, err[-3000:]
    (job_dir,) = sweep.glob("0_*")
    stopped = read_result(job_dir) or {}
    assert stopped["status"] == "interrupted" and 2 <= stopped["epochs_completed"] < epochs, stopped

    resumed = subprocess.run([str(Path(sys.executable).parent / "sweepit"), "resume", str(sweep)], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    first_log, second_log = (job_dir / "stdout.1.log").read_text(), (job_dir / "stdout.log").read_text()
    assert "epoch 1: val_acc" in first_log and "epoch 2: val_acc" in first_log
    assert "epoch 1: val_acc" not in second_log and f"epoch {epochs}: val_acc" in second_log  # on from the checkpoint
    assert (job_dir / "stderr.1.log").is_file()
    first = read_result(job_dir, "result.1.json") or {}
    assert first["status"] == "interrupted" and first["started_at"] == stopped["started_at"] and "attempts" not in first
    done = read_result(job_dir) or {}
    assert done["status"] == "completed" and done["epochs_completed"] == epochs and done["attempts"] == 2, done
    assert done["total_wall_time_s"] == pytest.approx(first["wall_time_s"] + done["wall_time_s"])
    rows = [json.loads(line)["epoch"] for line in (job_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows == list(range(1, epochs + 1))
    assert "2 attempts" in resumed.stdout  # the table's note: its time_s is both attempts'

    assert (job_dir / "checkpoint.pt").is_file()
    said = {page: " ".join((REPO / "docs" / page).read_text().split()) for page in ("sweep-files.md", "own-code.md")}
    files = said["sweep-files.md"]
    assert "your own loop's stays" in files and "deleted when it completes)" not in files
    assert "The checkpoint stays when the job completes" in said["own-code.md"]
