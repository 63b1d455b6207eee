"""`hydra/sweeper=halving` in real multiruns on the local launcher: which jobs pause at which rung, a promoted job
ending bit for bit as the same job run straight through (sweepit's loop and an own loop), and the refusals that come
before any job runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from sweepit.results import JobPaths, JobState, job_folders, read_manifest, read_metrics, read_record
from sweepit_testing import REPO, SWEEPIT, private_copy, run_command, run_train, sweep_once

pytestmark = pytest.mark.slow

CPU = ["device=cpu", "trainer.threads=1", "trainer.log_every_epoch=false"]
# 4 jobs of 4 epochs, eta 2: rungs at epochs 1 and 2 (2 jobs go on from the first, 1 from the second).
GRID = ["-m", "hydra/sweeper=halving", "optimizer=adam,sgd", "lr=0.001,0.1", "epochs=4", "hydra.sweeper.eta=2",
        "hydra.launcher.n_workers=2", "hydra.callbacks.summary.report=false", *CPU]
OWN_LOOP = REPO / "examples" / "own_loop" / "train.py"
TIMING = ("epoch_time_s", "samples_per_s", "step_time_s")  # what differs between two runs of the same job


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sweep_once(tmp_path_factory, "halving", GRID)


def _ended(sweep_dir: Path) -> dict[int, tuple[str, int]]:
    """Each job's status and epochs trained, from its record."""
    out = {}
    for num, folder in job_folders(sweep_dir).items():
        result = read_record(folder).result
        out[num] = (str(result["status"]), int(result["epochs_completed"]))
    return out


def _at(folder: Path | None, epoch: int) -> float:
    assert folder is not None
    rows, _ = read_metrics(folder)
    return float(next(r["val_acc"] for r in rows if r["epoch"] == epoch))


def _untimed(folder: Path) -> list[dict[str, Any]]:
    rows, _ = read_metrics(folder)
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def test_each_rung_pauses_its_jobs_and_promotes_the_best_half_in_the_same_folders(sweep: Path) -> None:
    # Seed 0 on digits: sgd trails adam after one epoch; at epoch 2, adam at lr 0.1 leads adam at lr 0.001.
    assert _ended(sweep) == {0: ("paused", 2), 1: ("completed", 4), 2: ("paused", 1), 3: ("paused", 1)}
    folders = job_folders(sweep)
    first = sorted(folders, key=lambda n: -_at(folders[n], 1))[:2]  # the rule, from the metrics themselves
    assert sorted(first) == [0, 1]
    assert _at(folders[1], 2) > _at(folders[0], 2)
    states = {e.num: str(e.state) for e in read_manifest(sweep).jobs.values()}
    assert states == {0: "paused", 1: "completed", 2: "paused", 3: "paused"}
    # One folder per grid point across rungs: each start left its attempt's record; a paused job keeps its checkpoint.
    attempts = {n: len(list(f.glob("result.*.json"))) for n, f in folders.items() if f is not None}
    assert attempts == {0: 1, 1: 2, 2: 0, 3: 0}
    assert {n: JobPaths(f).checkpoint.is_file() for n, f in folders.items() if f is not None} == {
        0: True, 1: False, 2: True, 3: True}


def test_sweepit_status_and_load_show_where_each_job_paused_and_offer_no_resume_for_them(sweep: Path) -> None:
    import sweepit

    proc = run_command([SWEEPIT, "status", sweep])
    assert proc.returncode == 0, proc.stderr
    assert "4 jobs: 1 completed, 3 paused" in proc.stdout, proc.stdout
    assert proc.stdout.count("paused at 1 of 4 epochs") == 2, proc.stdout
    assert proc.stdout.count("paused at 2 of 4 epochs") == 1, proc.stdout
    assert "did not complete" not in proc.stdout, proc.stdout
    df = sweepit.load(sweep).df
    assert dict(zip(df["job"], df["status"], strict=True)) == {0: "paused", 1: "completed", 2: "paused", 3: "paused"}


def test_the_end_table_says_the_epoch_seconds_spent_against_the_full_grids_from_the_epochs_times(
        sweep: Path) -> None:
    """One line under the table: the epochs trained and their times, against the full grid's estimate: each job's
    first epoch, then its steady epochs' mean (neither a start's first epoch nor a promoted job's first after a
    rung, both slower), the others' median for a job without one."""
    proc = run_command([SWEEPIT, "summary", sweep])
    assert proc.returncode == 0, proc.stderr
    times = [[row["epoch_time_s"] for row in read_metrics(f)[0]] for f in job_folders(sweep).values() if f]
    assert sorted(map(len, times)) == [1, 1, 2, 4]  # 4 jobs to epoch 1, 2 to epoch 2, 1 to epoch 4
    spent = sum(map(sum, times))
    (steady,) = [t[3] for t in times if len(t) == 4]  # rungs at 1 and 2: epochs 2 and 3 start after a pause
    full = sum(t[0] + 3 * steady for t in times)
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("halving: ")]
    assert line == (f"halving: 8 of 16 epochs, {spent:.3g} of {full:.3g} epoch-seconds ({spent / full:.2f}x the "
                    "full grid's estimate, from the epochs' times)"), proc.stdout
    assert proc.stdout.count("paused at 1 of 4 epochs") == 2, proc.stdout


def test_a_promoted_job_ends_bit_for_bit_as_the_same_job_run_straight_through(sweep: Path, tmp_path: Path) -> None:
    (entry,) = [e for e in read_manifest(sweep).jobs.values() if e.state == JobState.COMPLETED]
    straight = tmp_path / "straight"
    proc = run_train([*entry.overrides, f"hydra.run.dir={straight}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    promoted = job_folders(sweep)[entry.num]
    assert promoted is not None
    assert _untimed(promoted) == _untimed(straight) and len(_untimed(straight)) == 4


def test_an_own_loop_pauses_and_resumes_through_save_and_load_checkpoint_bit_for_bit(tmp_path: Path) -> None:
    args = ["lr=0.003,0.03", "width=8,16", "epochs=3", "n_train=300", "device=cpu"]
    proc = run_command([sys.executable, OWN_LOOP, "-m", "hydra/sweeper=halving", "hydra.sweeper.eta=2", *args,
                        "+hydra.callbacks.summary.report=false"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "outputs" / "own_loop").iterdir()
    ended = _ended(sweep_dir)
    assert sorted(ended.values()) == [("completed", 3), ("paused", 1), ("paused", 1), ("paused", 2)], ended
    (num,) = [n for n, (status, _) in ended.items() if status == "completed"]
    straight = tmp_path / "straight"
    overrides = read_manifest(sweep_dir).jobs[num].overrides
    proc = run_command([sys.executable, OWN_LOOP, *overrides, f"hydra.run.dir={straight}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = job_folders(sweep_dir)[num]
    assert folder is not None and _untimed(folder) == _untimed(straight) and len(_untimed(straight)) == 3


NO_CHECKPOINTS = '''
import hydra
import sweepit


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    for epoch in range(1, cfg.epochs + 1):
        sweepit.report({"score": epoch * cfg.x}, epoch=epoch)


if __name__ == "__main__":
    main()
'''


def test_an_app_that_cannot_resume_is_refused_before_any_job_runs(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text(
        "defaults:\n  - sweepit\n  - _self_\nx: 1\nepochs: 3\nmetric: score\ndirection: maximize\n")
    (tmp_path / "app.py").write_text(NO_CHECKPOINTS)
    proc = run_command([sys.executable, tmp_path / "app.py", "-m", "hydra/sweeper=halving", "x=1,2"], tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "hydra/sweeper=halving pauses each job at a rung and resumes it from its checkpoint, but the task's module "
        "never calls sweepit.save_checkpoint or sweepit.load_checkpoint.",
        "Load the checkpoint before the first epoch, and save it after each epoch's sweepit.report.",
        "See docs/troubleshooting.md#halving-needs-checkpoints"], proc.stderr
    assert not list(tmp_path.rglob("result.json")) and not list(tmp_path.rglob("sweep.json"))
    proc = run_train([*GRID, "trainer.checkpoint=false"], tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-2:] == [
        "Add trainer.checkpoint=true.", "See docs/troubleshooting.md#halving-needs-checkpoints"], proc.stderr
    assert not (tmp_path / "outputs" / "multirun").exists() or not any((tmp_path / "outputs" / "multirun").iterdir())


@pytest.mark.parametrize(("launcher", "said"), [
    (["hydra/launcher=basic"], ["hydra/sweeper=halving runs its rungs on sweepit's local or Slurm launcher, but the "
                                "launcher is BasicLauncher. Add hydra/launcher=local or hydra/launcher=slurm."]),
    (["hydra/launcher=slurm", "hydra.launcher.workers=2"],
     ["hydra/sweeper=halving runs each job as its own Slurm job, but hydra.launcher.workers=2 packs them into "
      "workers.", "Drop hydra.launcher.workers."]),
], ids=["basic", "packed-slurm"])
def test_a_launcher_it_cannot_run_is_refused_before_any_job(tmp_path: Path, launcher: list[str],
                                                            said: list[str]) -> None:
    proc = run_train([*(a for a in GRID if not a.startswith("hydra.launcher.n_workers")), *launcher], tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-len(said):] == said, proc.stderr
    assert not list(tmp_path.rglob("result.json")) and not list(tmp_path.rglob("sweep.json")), proc.stdout


def test_a_resume_with_other_rungs_than_the_sweeps_is_refused_before_any_job(sweep: Path, tmp_path: Path) -> None:
    """The rungs decided so far hold for the sweep's own rungs only (halving.json)."""
    copy = private_copy(sweep, tmp_path)
    before = {n: read_record(f).result.get("ended_at") for n, f in job_folders(copy).items()}
    config = (copy / "multirun.yaml").read_text()
    proc = run_train([*GRID, "hydra.sweeper.eta=4", f"hydra.sweep.dir={copy}", "hydra.launcher.resume=true"],
                     tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "a resumed halving sweep must have the rungs, eta, metric and grid it ran with, but" in proc.stderr
    assert f"Resume it with `sweepit resume {copy}`, which runs its own command." in proc.stderr, proc.stderr
    assert {n: read_record(f).result.get("ended_at") for n, f in job_folders(copy).items()} == before
    assert (copy / "multirun.yaml").read_text() == config


def test_a_resume_of_a_halving_sweep_that_ended_runs_nothing_again(sweep: Path, tmp_path: Path) -> None:
    copy = private_copy(sweep, tmp_path)
    before = {n: read_record(f).result.get("ended_at") for n, f in job_folders(copy).items()}
    proc = run_command([SWEEPIT, "resume", copy], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {n: read_record(f).result.get("ended_at") for n, f in job_folders(copy).items()} == before
    assert "4 jobs: 1 completed, 3 paused" in proc.stdout, proc.stdout


def test_a_job_that_left_no_record_of_its_end_fails_the_sweep(sweep: Path, tmp_path: Path) -> None:
    """On Slurm a job once ended unseen (its follower thought it done): the sweep exited 0 with no result for it."""
    from hydra_plugins.sweepit.halving_sweeper import HalvingSweeper
    from sweepit.errors import SweepFailedError

    copy, sweeper = private_copy(sweep, tmp_path), HalvingSweeper()
    sweeper._check_failures(copy, [0, 1, 2, 3])  # 1 completed, 3 paused: settled
    JobPaths(job_folders(copy)[1]).result.unlink()
    with pytest.raises(SweepFailedError, match=r"1 job\(s\) of the halving sweep .* left no record of their end: 1"):
        sweeper._check_failures(copy, [0, 1, 2, 3])


def test_a_studys_grid_in_hydra_sweeper_params_is_halved_as_the_command_lines(tmp_path: Path) -> None:
    """sweeps/optimizer_lr.yaml's grid (`hydra.sweeper.params`), cut to 2 x 2 and 3 epochs: eta 3 keeps one job."""
    proc = run_train(["-m", "--config-dir", str(REPO / "sweeps"), "--config-name", "optimizer_lr",
                      "hydra/sweeper=halving", "hydra.sweeper.params.optimizer='adam,sgd'",
                      "hydra.sweeper.params.lr='0.1,0.001'", "epochs=3", "hydra.callbacks.summary.report=false", *CPU],
                     tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "outputs" / "optimizer_lr").iterdir()
    assert _ended(sweep_dir) == {0: ("completed", 3), 1: ("paused", 1), 2: ("paused", 1), 3: ("paused", 1)}
    assert read_manifest(sweep_dir).jobs[0].overrides[:2] == ["optimizer=adam", "lr=0.1"]
