"""Sweeps through hydra/launcher=slurm: one job array, per-task ranks and GPUs, the summary. Where the fact is the
launcher's alone, the jobs are the test app's (no torch: a Slurm job is a fresh process, and train.py's imports cost
seconds of CPU in each); train.py's own sweep on Slurm is the README's (tests/readme)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slurm_launcher_testing import APP, CPU_ONLY, LINREG, ROOT, TRAIN, job_dirs, manifest, result, run, sweepit, tasks

import sweepit as sweepit_api
from sweepit_testing import read_by_every_reader, write_cpu_loop

ANY_HYDRA_APP = ROOT / "examples" / "any_hydra_app" / "app.py"
# train.py's end of sweep (conf/config.yaml's hydra.callbacks) for the test app: the results table and the report.
SUMMARY = "+hydra.callbacks.summary._target_=hydra_plugins.sweepit.callbacks.SweepSummary"
# A Hydra app that uses neither torch nor sweepit: each job leaves the modules its process had loaded by its end.
PLAIN_APP = """
import json, sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig


@hydra.main(version_base="1.3", config_path=None, config_name=None)
def main(cfg):
    Path(HydraConfig.get().runtime.output_dir, "modules.json").write_text(json.dumps(sorted(sys.modules)))


if __name__ == "__main__":
    main()
"""


def test_four_job_sweep_is_one_array_and_ends_with_the_results_table(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "x=0,1,2,3")
    assert proc.returncode == 0, proc.stderr
    assert "4 jobs: 4 completed" in proc.stdout and f"sweep directory: {sweep}" in proc.stdout
    assert "best (minimize x2)" in proc.stdout
    m = manifest(sweep)
    assert m.launcher == "slurm"
    entries = [m.jobs[n] for n in range(4)]
    assert [e.state for e in entries] == ["completed"] * 4
    arrays = {e.extra["slurm_array_job_id"] for e in entries}
    assert len(arrays) == 1, "same resources: one sbatch call"
    assert [e.extra["slurm_array_index"] for e in entries] == [0, 1, 2, 3]
    assert [p.name for p in (sweep / ".submitit").iterdir()] == ["0001"]
    dirs = job_dirs(sweep)
    for num, d in dirs.items():
        assert result(d)["status"] == "completed"
        assert f"job x={num} starting" in (d / "stdout.log").read_text()  # a link to the job's Slurm log
        assert (d / "stdout.log").resolve() == Path(m.jobs[num].extra["stdout"])


# Alone: its 4-GPU job waits for every GPU of the cluster, and Slurm holds them for it ahead of later jobs, so a test
# sharing the cluster whose jobs hold GPUs while others of its own must start (the budget's, a detached sweep's) waited
# past its jobs' time limit behind it.
@pytest.mark.exclusive_cluster
def test_gpu_counts_1_2_4_give_each_task_its_rank_and_the_jobs_gpus(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run(TRAIN, sweep, *LINREG, "trainer.gpus=1,2,4")
    assert proc.returncode == 0, proc.stderr
    m = manifest(sweep)
    assert len({e.extra["slurm_array_job_id"] for e in m.jobs.values()}) == 3, "one sbatch call per shape"
    for num, n_gpus in enumerate((1, 2, 4)):
        job_dir = Path(m.jobs[num].job_dir)
        records = tasks(job_dir)
        assert [(r["slurm_procid"], r["slurm_localid"], r["slurm_ntasks"]) for r in records] == [
            (str(rank), str(rank), str(n_gpus)) for rank in range(n_gpus)]
        # GPUs per node, not per task: every task sees the job's GPUs (rank r takes GPU r of them), as NCCL needs to
        # find the NVLink between them
        devices = [r["cuda_visible_devices"] for r in records]
        assert len(set(devices)) == 1 and len(devices[0].split(",")) == n_gpus, devices
        assert {r["slurm_step_id"] for r in records} == {"0"}  # srun's step: what sweepit.train._distributed needs
        outcome = result(job_dir)
        assert (outcome["status"], outcome["world_size"], outcome["device"]) == ("completed", n_gpus, "cpu")
        script = next(Path(m.jobs[num].extra["submitit_folder"]).glob("*_submission.sh")).read_text()
        for line in (f"--ntasks-per-node={n_gpus}", f"--gpus-per-node={n_gpus}", "--nodes=1", "--time=5"):
            assert f"#SBATCH {line}\n" in script
        assert "--gpus-per-task" not in script
    # the GPU-scaling study's table, from the sweep's report (one point per GPU count), of CPU ranks: the cluster's
    # GPUs are names in Slurm's gres, and the ranks trained on CPU
    html = (sweep / "report" / "index.html").read_text()
    assert "Scaling over CPU ranks" in html and "efficiency" in html and "scaling.png" not in html  # embedded


@pytest.mark.parametrize("pack", [[], ["hydra.launcher.workers=2", CPU_ONLY]], ids=["one-job-each", "packed"])
def test_sweepit_status_finds_the_report_the_sweep_wrote_at_its_end_current(tmp_path: Path, pack: list[str]) -> None:
    """Before: the first `sweepit status` after the sweep recorded what Slurm last said of its jobs (RUNNING, then
    COMPLETED) into sweep.journal, then judged the report older than the sweep's records: "the sweep has ended,
    without a report since (it ran detached, or was stopped)"."""
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "x=0,1", SUMMARY, *pack)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"sweepit: report in {sweep / 'report' / 'index.html'}" in proc.stdout
    for look in ("first", "second"):  # the first records Slurm's last word on the jobs; the second reads it back
        status = sweepit("status", str(sweep))
        assert status.returncode == 0 and "2 jobs: 2 completed" in status.stdout, status.stdout + status.stderr
        assert "sweepit report" not in status.stdout, f"{look} look:\n{status.stdout}"


def test_an_apps_own_subdir_nests_each_slurm_job_and_every_reader_finds_it_where_the_launcher_recorded_it(
        tmp_path: Path) -> None:
    """examples/any_hydra_app's `subdir: ${hydra.job.num}_${hydra.job.override_dirname}` nests a job whose value holds
    `/`. Before: the end-of-sweep table and `sweepit summary` listed both jobs `pending` (exit 0), from the folder
    `0_+tag=runs`; `sweepit status` said 2 completed."""
    sweep = tmp_path / "sweep"
    proc = run(ANY_HYDRA_APP, sweep, "hydra/launcher=slurm", "x=0", "+tag=runs/a,runs/b")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert Path(manifest(sweep).jobs[0].job_dir) == sweep / "0_+tag=runs" / "a,x=0"  # the app's own layout
    said = read_by_every_reader(sweep)
    for reader, out in [("the end-of-sweep table", proc.stdout), *said.items()]:
        assert "pending" not in out and "no result.json" not in out, f"{reader}:\n{out}"
    for reader, out in [("the end-of-sweep table", proc.stdout), *((r, said[r]) for r in ("summary", "status"))]:
        assert "2 jobs: 2 completed" in out, f"{reader}:\n{out}"
    assert said["results.csv"].count(",completed,1.25,") == 2, said["results.csv"]


def test_a_plain_apps_slurm_job_loads_neither_torch_nor_the_hydra_plugins_it_does_not_run(tmp_path: Path) -> None:
    """A Slurm job runs its composed config: it needs no Hydra plugin but the one whose task it unpickled, and an
    app without torch must not load it (the CUDA rule). Before: Hydra's `Singleton.set_state` in the job scanned every
    installed plugin, importing each module under `hydra_plugins` (sweepit's sweeper and other launchers among them)."""
    app = tmp_path / "plain_app.py"
    app.write_text(PLAIN_APP)
    sweep = tmp_path / "sweep"
    proc = run(app, sweep, "hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1", "+x=1,2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 jobs: 2 completed" in proc.stdout, proc.stdout
    for job_dir in job_dirs(sweep).values():
        modules = set(json.loads((job_dir / "modules.json").read_text()))
        assert "torch" not in modules
        plugins = {"hydra_plugins.sweepit.optuna_sweeper", "hydra_plugins.sweepit.local_launcher",
                   "hydra_plugins.sweepit.slurm_launcher", "hydra_plugins.sweepit.callbacks"}
        assert modules & plugins == set(), sorted(modules & plugins)


def test_a_cpu_only_own_loop_on_slurm_bills_no_gpu_hours_and_a_gpu_job_its_allocations(tmp_path: Path) -> None:
    """The same own loop (its config says `trainer.gpus: 1`), once asking Slurm for no GPU and once for two. Before:
    the CPU job showed n_gpus 1 and wall time / 3600 GPU-hours, read from that key."""
    app = write_cpu_loop(tmp_path)
    cpu, gpus = tmp_path / "cpu", tmp_path / "gpus"
    for sweep, asked in ((cpu, CPU_ONLY), (gpus, "trainer.gpus=2")):
        proc = run(app, sweep, "x=1", "hydra/launcher=slurm", asked)
        assert proc.returncode == 0, proc.stderr[-3000:]
    (on_cpu,), (on_gpus,) = (sweepit_api.load(s).df.to_dict("records") for s in (cpu, gpus))
    assert on_cpu["n_gpus"] == 0 and on_cpu["gpu_hours"] != on_cpu["gpu_hours"], on_cpu  # NaN
    assert on_gpus["n_gpus"] == 2 and on_gpus["gpu_hours"] == pytest.approx(2 * on_gpus["wall_time_s"] / 3600)
