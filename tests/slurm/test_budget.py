"""A sweep's GPU-hour budget and its ceiling on GPUs in use at once, on the local cluster (fake GPUs, accounting of
gres/gpu): a sweep whose at-most passes the budget is refused before anything is submitted; one run with
`over_budget=stop` starts jobs while they fit and ends with the rest not started, and `sweepit resume` with a larger
budget runs those alone; `max_gpus` throttles the arrays. Jobs of one GPU and a one-minute limit: 1/60 GPU-hour each
at most."""

from __future__ import annotations

import getpass
import json
import secrets
import subprocess
from pathlib import Path

import pytest
from slurm_launcher_testing import APP, Driver, manifest, run, sweepit, wait_until

from sweepit.errors import ConfigError
from sweepit.results import JobPaths, SweepPaths
from sweepit.slurm import SlurmOptions

SHORT = ["timeout_min=1", "hydra.launcher.signal_delay_s=0", "trainer.gpus=1"]  # at most 1/60 GPU-hour a job
JOB_H = 1 / 60


def _spent(out: str) -> str:
    """What a printed budget line says was billed and is held (`GPU budget: ... of 0.0417`)."""
    return out.split("GPU budget:")[1].splitlines()[0].split(";")[0]


def test_a_sweep_whose_at_most_passes_the_budget_is_refused_before_anything_is_submitted(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "x=0,1,2", *SHORT, f"hydra.launcher.budget_gpu_hours={2.5 * JOB_H:.4f}")
    assert proc.returncode != 0
    err = " ".join(proc.stderr.split())
    assert "the 3 job(s) to submit may take 0.050 against a budget of 0.0417; nothing was submitted" in err, err
    assert "Raise hydra.launcher.budget_gpu_hours to 0.050" in err and "over_budget=stop" in err
    assert "timeout_min" in err and "trainer.gpus" in err
    assert "HYDRA_FULL_ERROR" not in err  # sweepit's own error, told in full: no stack trace to ask for
    assert not sweep.exists()  # nothing ran: no folder that `sweepit ls` would list as a sweep of 0 jobs


def test_a_dry_run_of_a_sweep_the_budget_refuses_fails_as_the_sweep_would(tmp_path: Path) -> None:
    """As `sbatch --test-only` fails for a job sbatch would refuse: the plan is printed, then the refusal, exit 1."""
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "x=0,1,2", *SHORT, f"hydra.launcher.budget_gpu_hours={2.5 * JOB_H:.4f}",
               "hydra.launcher.dry_run=true")
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "budget: at most 0.05 of hydra.launcher.budget_gpu_hours=0.0417: the sweep is refused." in proc.stdout
    err = " ".join(proc.stderr.split())
    assert "the 3 job(s) to submit may take 0.050 against a budget of 0.0417" in err, err
    assert not sweep.exists()


def test_a_budget_below_one_jobs_at_most_says_so(tmp_path: Path) -> None:
    proc = run(APP, tmp_path / "sweep", "x=0,1", *SHORT, "hydra.launcher.budget_gpu_hours=0.01",
               "hydra.launcher.over_budget=stop")
    err = " ".join(proc.stderr.split())
    assert proc.returncode != 0
    assert ("must cover at least one job run to its time limit, but job 0 alone may take 0.017 GPU-hours (1 GPU(s), "
            "1 min) against a budget of 0.01: no job could start") in err, err
    assert not (tmp_path / "sweep" / ".submitit").exists()


def test_a_budget_reached_mid_sweep_ends_it_with_its_results_and_a_resume_with_more_finishes_it(
        tmp_path: Path) -> None:
    """Four jobs against a budget of 2.5 jobs' at-most: the two that start first are held running (their at-most
    counts while they run), so the other two are refused at their start whatever the order; a resume with a budget
    of 5 jobs runs those two alone."""
    sweep, release = tmp_path / "sweep", tmp_path / "release"
    driver = Driver(APP, sweep, "x=0,1,2,3", *SHORT, f"hydra.launcher.budget_gpu_hours={2.5 * JOB_H:.4f}",
                    "hydra.launcher.over_budget=stop", f"release_file={release}")
    try:
        wait_until(lambda: len(list(sweep.glob(f"*/{JobPaths(Path()).not_started.name}"))) == 2,
                   "two jobs refused at their start", timeout_s=180)
    finally:
        release.touch()
    assert driver.finish() == 0, driver.stderr[-3000:]
    out = driver.stdout
    assert "4 jobs: 2 completed, 2 not started" in out, out
    assert "GPU budget:" in out and "of 0.0417; reached: 2 job(s) not started" in out, out
    # Every run had ended: billed, none held at its at-most. Before: "+ 0.033 at most for 2 running job(s)".
    spent = _spent(out)
    assert "running" not in spent and " 0.000 GPU-hours" not in spent, out
    m = manifest(sweep)
    refused = sorted(n for n, e in m.jobs.items() if e.state == "not started")
    assert len(refused) == 2 and all("budget" in str(m.jobs[n].extra["not_started"]) for n in refused)
    assert all(not JobPaths(Path(m.jobs[n].job_dir)).result.exists() for n in refused), "refused: nothing ran"
    ledger = json.loads(SweepPaths(sweep).budget.read_text())
    assert sorted(a["num"] for a in ledger["attempts"] if a["admitted"]) == sorted(set(m.jobs) - set(refused))
    ran_first = {n: json.loads((Path(e.job_dir) / "times.json").read_text())["slurm_job_id"]
                 for n, e in m.jobs.items() if n not in refused}

    looked = sweepit("status", str(sweep))
    assert "GPU budget:" in looked.stdout and "reached: 2 job(s) not started" in looked.stdout, looked.stdout
    assert _spent(looked.stdout) == spent, looked.stdout  # the end's figures are the final ones
    assert sweepit("report", str(sweep)).returncode == 0
    assert "reached: 2 job(s) not started" in (SweepPaths(sweep).report / "summary.md").read_text()

    resumed = sweepit("resume", str(sweep), f"hydra.launcher.budget_gpu_hours={5 * JOB_H:.4f}", timeout_s=240)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "4 jobs: 4 completed" in resumed.stdout, resumed.stdout
    assert "reached" not in resumed.stdout.split("GPU budget:")[1], resumed.stdout
    spent = _spent(resumed.stdout)
    assert "running" not in spent and _spent(sweepit("status", str(sweep)).stdout) == spent, resumed.stdout
    m = manifest(sweep)
    for n, first_id in ran_first.items():  # run once: their record is the first run's
        assert json.loads((Path(m.jobs[n].job_dir) / "times.json").read_text())["slurm_job_id"] == first_id
    admitted = [a["num"] for a in json.loads(SweepPaths(sweep).budget.read_text())["attempts"] if a["admitted"]]
    assert sorted(admitted) == [0, 1, 2, 3], "each job started once"


def test_a_detached_sweep_keeps_the_budget_with_its_driver_gone(tmp_path: Path) -> None:
    """wait=false: the driver exits after submitting; the jobs' gates alone refuse the two that would pass the budget,
    and `sweepit status` reads them back as not started."""
    sweep, release = tmp_path / "sweep", tmp_path / "release"
    proc = run(APP, sweep, "x=0,1,2,3", *SHORT, f"hydra.launcher.budget_gpu_hours={2.5 * JOB_H:.4f}",
               "hydra.launcher.over_budget=stop", "hydra.launcher.wait=false", f"release_file={release}")
    assert proc.returncode == 0 and "Not waiting" in proc.stdout, proc.stderr[-2000:]
    try:
        wait_until(lambda: len(list(sweep.glob(f"*/{JobPaths(Path()).not_started.name}"))) == 2,
                   "two jobs refused at their start", timeout_s=180)
    finally:
        release.touch()
    watched = sweepit("status", str(sweep), "--watch", "1", timeout_s=180)
    assert "4 jobs: 2 completed, 2 not started" in watched.stdout, watched.stdout[-3000:]
    assert "reached: 2 job(s) not started" in watched.stdout
    last = watched.stdout.rsplit("\n[", 1)[-1]  # the last look, once every job had ended
    assert "running" not in _spent(last), last


def test_max_gpus_throttles_the_arrays_so_that_their_gpus_stay_within_it(tmp_path: Path) -> None:
    """Two arrays (1 and 2 GPUs a job) under max_gpus=4: one job at a time each (3 GPUs), then the 1-GPU array a second
    (4); the jobs' own start and end times never hold more."""
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "x=0,1,2", "trainer.gpus=1,2", "timeout_min=1", "hydra.launcher.signal_delay_s=0",
               "hydra.launcher.max_gpus=4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    scripts = sorted((sweep / ".submitit").glob("*/*_submission.sh"))
    arrays = {next(line for line in s.read_text().splitlines() if "--gpus-per-node" in line):
              next(line for line in s.read_text().splitlines() if "--array" in line) for s in scripts}
    assert arrays == {"#SBATCH --gpus-per-node=1": "#SBATCH --array=0-2%2",
                      "#SBATCH --gpus-per-node=2": "#SBATCH --array=0-2%1"}, arrays
    spans = []
    for e in manifest(sweep).jobs.values():
        start = json.loads((Path(e.job_dir) / "times.json").read_text())["start"]
        spans.append((start, start + json.loads(JobPaths(Path(e.job_dir)).result.read_text())["wall_time_s"],
                      int(e.extra["gpus"])))
    for t, _, _ in spans:  # GPUs of the jobs running at each start
        assert sum(g for s, end, g in spans if s <= t < end) <= 4, spans


@pytest.mark.no_cluster
@pytest.mark.parametrize(("params", "said"), [
    ({"max_gpus": 0}, "hydra.launcher.max_gpus must be null or an integer >= 1, but got max_gpus=0"),
    ({"budget_gpu_hours": -1}, "budget_gpu_hours must be null or a number of GPU-hours > 0, but got "
                               "budget_gpu_hours=-1"),
    ({"over_budget": "wait"}, "over_budget must be refuse or stop, but got over_budget='wait'"),
    ({"max_gpus": 4, "workers": 2}, "max_gpus throttles the arrays of sweeps whose jobs are each a Slurm job, but "
                                    "got workers=2"),
])
def test_bad_budget_and_max_gpus_values_are_refused(params: dict[str, object], said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SlurmOptions(dry_run=True, **params)  # type: ignore[arg-type]
    assert said in str(caught.value)


def test_max_gpus_below_one_jobs_gpus_is_refused(tmp_path: Path) -> None:
    proc = run(APP, tmp_path / "sweep", "x=0,1", "trainer.gpus=2", "hydra.launcher.max_gpus=1")
    assert proc.returncode != 0
    assert ("hydra.launcher.max_gpus must be at least one job's GPUs, but a job asks for 2 (2 GPU(s), 5 min) and "
            "max_gpus=1.\nRaise hydra.launcher.max_gpus to 2 or more, or lower the jobs' GPUs (trainer.gpus).\n"
            "See docs/troubleshooting.md#max-gpus") in proc.stderr, proc.stderr
    assert not (tmp_path / "sweep" / ".submitit").exists()


@pytest.mark.no_cluster
def test_a_resume_takes_launcher_keys_only(tmp_path: Path) -> None:
    said = sweepit("resume", str(tmp_path), "x=5")
    assert said.returncode != 0
    assert "a resume takes only the launcher's keys (hydra.launcher.KEY=VALUE), but got x=5" in said.stderr


def test_max_gpus_below_one_job_of_every_array_at_once_is_refused_in_the_dry_run(tmp_path: Path) -> None:
    proc = run(APP, tmp_path / "sweep", "x=0", "trainer.gpus=1,2,4", "hydra.launcher.max_gpus=4",
               "hydra.launcher.dry_run=true")
    assert proc.returncode != 0
    assert ("hydra.launcher.max_gpus must let each of the sweep's 3 job arrays run one job at a time, 7 GPUs in all, "
            "but got max_gpus=4.\nRaise it to 7, raise hydra.launcher.max_array_size (fewer arrays), or sweep the GPU "
            "counts in separate sweeps.\nSee docs/troubleshooting.md#max-gpus-across-arrays") in proc.stderr, \
        proc.stderr


@pytest.mark.parametrize("workers", [0, 2])
def test_an_optuna_search_refuses_the_budget_before_anything_is_submitted(tmp_path: Path, workers: int) -> None:
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "hydra/sweeper=optuna", "x=choice(0,1)", "hydra.sweeper.n_trials=2",
               f"hydra.sweeper.workers={workers}", "hydra.launcher.budget_gpu_hours=5")
    err = " ".join(proc.stderr.split())
    assert proc.returncode != 0
    assert "max_gpus and budget_gpu_hours apply to a fixed list of jobs (a grid), but an adaptive search" in err, err
    assert not SweepPaths(sweep).submitit.exists()


def test_a_packed_sweep_keeps_the_budget_by_its_workers(tmp_path: Path) -> None:
    """Packed, the workers' allocations are what is billed: one worker per request (1 and 2 GPUs a job, two jobs
    each, a one-minute limit: workers of 3 min, 0.05 and 0.1 GPU-hours at most) against 0.12. The worker that starts
    first is held running, so the other is refused at its start and its request's jobs end not started; a resume with
    more runs those."""
    sweep, release = tmp_path / "sweep", tmp_path / "release"
    packed = ["x=0,1", "trainer.gpus=1,2", "timeout_min=1", "hydra.launcher.signal_delay_s=0",
              "hydra.launcher.workers=1"]
    refused = run(APP, tmp_path / "refused", *packed, "hydra.launcher.budget_gpu_hours=0.12")
    assert refused.returncode != 0
    assert ("the 2 worker(s) to submit may take 0.150 against a budget of 0.12; nothing was submitted"
            in " ".join(refused.stderr.split())), refused.stderr[-2000:]
    driver = Driver(APP, sweep, *packed, "hydra.launcher.budget_gpu_hours=0.12", "hydra.launcher.over_budget=stop",
                    f"release_file={release}")

    def one_refused() -> bool:
        ledger = SweepPaths(sweep).budget
        return ledger.exists() and any(not a["admitted"] for a in json.loads(ledger.read_text())["attempts"])

    try:
        wait_until(one_refused, "a worker refused at its start", timeout_s=180)
    finally:
        release.touch()
    assert driver.finish() == 0, driver.stderr[-3000:]
    assert "4 jobs: 2 completed, 2 not started" in driver.stdout, driver.stdout
    assert "the GPU-hour budget is reached" in driver.stderr and "reached: the jobs left not started" in driver.stdout
    m = manifest(sweep)
    gpus = {int(e.extra["gpus"]) for e in m.jobs.values() if e.state == "not started"}
    assert len(gpus) == 1, "the jobs of the refused worker's request"
    resumed = sweepit("resume", str(sweep), "hydra.launcher.budget_gpu_hours=0.5", timeout_s=240)
    assert resumed.returncode == 0 and "4 jobs: 4 completed" in resumed.stdout, resumed.stdout + resumed.stderr[-2000:]


def test_the_budget_line_shows_what_is_left_of_the_accounts_gpu_allocation(tmp_path: Path) -> None:
    """An account of this test's own with a GrpTRESMins limit on gres/gpu (100 GPU-hours; the local cluster enforces
    no limits, and no other test uses the account), removed at the end; the user's default account sets none, so the
    other tests' lines say nothing of it."""
    account, user = f"sweepit-budget-{secrets.token_hex(3)}", getpass.getuser()

    def sacctmgr(*args: str) -> None:
        subprocess.run(["sacctmgr", "-i", *args], capture_output=True, text=True, timeout=60, check=True)

    sacctmgr("add", "account", account, "GrpTRESMins=gres/gpu=6000")
    try:
        sacctmgr("add", "user", user, f"account={account}")
        proc = run(APP, tmp_path / "sweep", "x=0", *SHORT, "hydra.launcher.budget_gpu_hours=0.5",
                   f"hydra.launcher.account={account}")
        assert proc.returncode == 0, proc.stderr[-2000:]
        line = proc.stdout.split("GPU budget: ")[1].splitlines()[0]
        assert line.endswith(f"of 0.5; account {account}: 100.0 of 100.0 GPU-hours left (sshare)"), line
    finally:
        subprocess.run(["sacctmgr", "-i", "delete", "user", user, f"account={account}"], capture_output=True,
                       timeout=60)
        subprocess.run(["sacctmgr", "-i", "delete", "account", account], capture_output=True, timeout=60)
