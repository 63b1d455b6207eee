"""What a job asks Slurm for: hydra-submitit-launcher's keys carry over, a job's own `trainer.gpus` and
`timeout_min` win over them, a job with no GPU anywhere is CPU-only, and the task's own return value (a dict
here) comes back to the sweeper."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hydra.test_utils.test_utils import TSweepRunner
from omegaconf import DictConfig
from slurm_launcher_testing import APP, manifest, run, slurm_ids, tasks

from sweepit.errors import ConfigError
from sweepit.slurm import SlurmOptions

# A submitit_slurm config as a hydra-submitit-launcher user has it, for an app with no trainer.gpus/timeout_min.
SUBMITIT_STYLE = ["~trainer", "~timeout_min", "hydra.launcher.timeout_min=30", "hydra.launcher.nodes=1",
                  "hydra.launcher.tasks_per_node=2", "hydra.launcher.gpus_per_task=1", "hydra.launcher.cpus_per_task=3",
                  "hydra.launcher.mem_gb=8", "hydra.launcher.partition=debug", "hydra.launcher.account=proj1",
                  "hydra.launcher.qos=normal", "hydra.launcher.constraint=fast",
                  "hydra.launcher.setup=[module load cuda]", "+hydra.launcher.additional_parameters.mail-type=FAIL"]


def _sbatch_lines(dry_run_stdout: str) -> set[str]:
    return {line.removeprefix("#SBATCH ") for line in dry_run_stdout.splitlines() if line.startswith("#SBATCH ")}


@pytest.mark.no_cluster
def test_an_unknown_key_is_refused_with_the_valid_ones_and_what_submitit_users_do_instead() -> None:
    with pytest.raises(ConfigError) as e:
        SlurmOptions.from_params({"timeout_min": 30, "name": "x", "exclude": "node1", "gpus": 2})
    said = str(e.value)
    assert said.startswith("hydra.launcher takes only the Slurm launcher's keys (account, additional_parameters, ")
    assert "but got exclude, gpus, name. " in said
    assert "exclude: pass it as additional_parameters: {exclude: ...}; name: sweepit's key is job_name." in said
    with pytest.raises(ConfigError) as e:  # a misspelt key (Hydra's own hint for a new key is `+hydra.launcher.KEY`)
        SlurmOptions.from_params({"partiton": "debug", "timeout_min": 30})
    assert "but got partiton. partiton: did you mean partition?" in str(e.value)


def test_submitit_keys_make_the_request_of_a_job_without_its_own(tmp_path: Path) -> None:
    proc = run(APP, tmp_path / "sweep", "x=0,1", *SUBMITIT_STYLE, "hydra.launcher.dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert "# 2 job(s) with 2 GPU(s), 30 min: 1 sbatch call(s)" in proc.stdout
    lines = _sbatch_lines(proc.stdout)
    assert {"--time=30", "--nodes=1", "--ntasks-per-node=2", "--gpus-per-task=1", "--cpus-per-task=3", "--mem=8GB",
            "--partition=debug", "--account=proj1", "--qos=normal", "--constraint=fast", "--mail-type=FAIL"} <= lines
    assert not any(line.startswith("--gpus-per-node") for line in lines), lines
    assert "\nexport OMP_NUM_THREADS=3\nexport SRUN_CPUS_PER_TASK=3\nexport PYTHONPATH=" in proc.stdout
    assert "\nmodule load cuda\n" in proc.stdout
    # The script run as sbatch runs it, up to its srun line, with stubs that record what they were started with: srun
    # of Slurm 22.05-23.02 takes the cores of a task from SRUN_CPUS_PER_TASK, not from the job's --cpus-per-task.
    script = proc.stdout[proc.stdout.index("#!/bin/bash"):]
    script = script[:script.index("\n", script.index("\nsrun ") + 1)]
    (tmp_path / "bin").mkdir()
    for name in ("srun", "module"):
        (tmp_path / "bin" / name).write_text(f"#!/bin/sh\necho {name} $SRUN_CPUS_PER_TASK $OMP_NUM_THREADS >> ../ran\n")
        (tmp_path / "bin" / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BASH_FUNC_", "SRUN_", "SLURM_"))}
    env["PATH"] = f"{tmp_path / 'bin'}:{env['PATH']}"
    subprocess.run(["bash", "-c", script], cwd=tmp_path / "bin", env=env, check=True, timeout=60)
    assert (tmp_path / "ran").read_text().split("\n") == ["module 3 3", "srun 3 3", ""]
    assert "only to jobs without it" not in proc.stdout  # nothing in the job config overrides the launcher

    gres = run(APP, tmp_path / "gres", "x=0", "~trainer", "hydra.launcher.gres=gpu:2", "hydra.launcher.dry_run=true")
    assert gres.returncode == 0, gres.stderr
    assert "# 1 job(s) with 2 GPU(s), 5 min" in gres.stdout and "--gres=gpu:2" in _sbatch_lines(gres.stdout)


def test_a_jobs_own_gpus_and_time_limit_win_and_the_launcher_names_what_it_leaves_unused(tmp_path: Path) -> None:
    own = [o for o in SUBMITIT_STYLE if not o.startswith("~")]
    proc = run(APP, tmp_path / "sweep", "x=0", "trainer.gpus=3", "timeout_min=7", *own, "hydra.launcher.dry_run=true")
    assert proc.returncode == 0, proc.stderr
    lines = _sbatch_lines(proc.stdout)
    assert {"--time=7", "--nodes=1", "--ntasks-per-node=3", "--gpus-per-node=3", "--cpus-per-task=3", "--mem=8GB",
            "--partition=debug", "--account=proj1"} <= lines
    assert "--gpus-per-task=1" not in lines, "the job's own GPUs are per node: every task sees them all"
    said = " ".join(proc.stdout.split())  # Hydra logs the driver's warnings to stdout
    assert ("trainer.gpus in the job config sets the request of 1 job(s) (trainer.gpus=N: N tasks sharing N GPUs); "
            "these launcher keys apply only to jobs without it: hydra.launcher.tasks_per_node=2, gpus_per_task=1. "
            "Set hydra.launcher.gpus_key=null to use them for every job.") in said
    assert ("timeout_min in the job config sets the time limit of 1 job(s) (e.g. 7 min); "
            "hydra.launcher.timeout_min=30 applies only to jobs without it.") in said

    ignored = run(APP, tmp_path / "ignored", "x=0", "trainer.gpus=3", "hydra.launcher.gpus_key=null",
                  "hydra.launcher.timeout_key=null", "hydra.launcher.dry_run=true")
    assert ignored.returncode == 0, ignored.stderr
    assert "# 1 job(s) with CPU only, 1 task(s), 60 min" in ignored.stdout  # the launcher's defaults


def test_gpu_jobs_of_one_core_per_task_are_warned_once_before_anything_is_submitted(tmp_path: Path) -> None:
    """The generic profile's cpus_per_task=1 suits CPU jobs; a GPU task's process and its loader workers starve on
    it, and memory given per core may be below a CUDA process's."""
    proc = run(APP, tmp_path / "few", "x=0,1", "trainer.gpus=1,2", "hydra.launcher.dry_run=true")
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    assert ("4 job(s) ask for GPUs with hydra.launcher.cpus_per_task=1, but a GPU task needs 3 cores or more, or the "
            "GPU waits for data.") in said, said[-3000:]
    assert said.count("ask for GPUs with") == 1 and "divided by its GPUs, and set hydra.launcher.mem_gb." in said
    assert "See docs/troubleshooting.md#gpu-task-cores" in said
    enough = run(APP, tmp_path / "enough", "x=0", "trainer.gpus=1", "hydra.launcher.cpus_per_task=4",
                 "hydra.launcher.mem_gb=16", "hydra.launcher.dry_run=true")
    assert enough.returncode == 0 and "ask for GPUs with" not in enough.stdout, enough.stdout[-3000:]
    cpu = run(APP, tmp_path / "cpu", "x=0", "~trainer", "hydra.launcher.dry_run=true")
    assert cpu.returncode == 0 and "ask for GPUs with" not in cpu.stdout, cpu.stdout[-3000:]


def test_gpus_as_gres_asks_for_a_jobs_gpus_with_gres_where_a_site_lacks_cons_tres(tmp_path: Path) -> None:
    proc = run(APP, tmp_path / "gres", "x=0", "trainer.gpus=2", "hydra.launcher.gpus_as=gres",
               "hydra.launcher.dry_run=true")
    assert proc.returncode == 0, proc.stderr
    lines = _sbatch_lines(proc.stdout)
    assert {"--gres=gpu:2", "--ntasks-per-node=2"} <= lines and not any("gpus-per" in line for line in lines), lines
    assert "# 1 job(s) with 2 GPU(s)" in proc.stdout
    wrong = run(APP, tmp_path / "wrong", "x=0", "hydra.launcher.gpus_as=gpus", "hydra.launcher.dry_run=true")
    assert wrong.returncode != 0
    assert "hydra.launcher.gpus_as must be gpus_per_node or gres, but got gpus_as='gpus'" in wrong.stdout + wrong.stderr


def test_a_job_with_no_gpu_anywhere_runs_without_asking_for_one(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "x=2,3", "~trainer")
    assert proc.returncode == 0, proc.stderr
    assert "2 jobs: 2 completed" in proc.stdout
    m = manifest(sweep)
    script = next(Path(m.jobs[0].extra["submitit_folder"]).glob("*_submission.sh")).read_text()
    options = {line.split("=")[0] for line in _sbatch_lines(script)}
    assert not [o for o in options if "gpu" in o or "gres" in o], options
    for num, job_id in slurm_ids(sweep).items():
        shown = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True,
                               timeout=30, check=True).stdout
        fields = dict(re.findall(r"(\w+)=(\S*)", shown))
        # The job has returned; Slurm may still show it RUNNING while its processes exit.
        assert fields["JobState"] in ("RUNNING", "COMPLETING", "COMPLETED") and "cpu=1" in fields["TRES"], shown
        gpu_fields = {k: v for k, v in fields.items() if k.startswith("Tres") or k in ("TRES", "Gres")}
        assert not [v for v in gpu_fields.values() if "gpu" in v], gpu_fields
        assert tasks(Path(m.jobs[num].job_dir))[0]["cuda_visible_devices"] is None


@pytest.mark.usefixtures("hydra_default_version_base")
def test_a_dict_return_value_comes_back_through_the_launcher(hydra_sweep_runner: TSweepRunner, tmp_path: Path) -> None:
    def task(cfg: DictConfig) -> dict[str, Any]:
        return {"x2": cfg.x ** 2, "label": f"x={cfg.x}", "nested": {"values": [cfg.x, None]}}

    sweep = hydra_sweep_runner(calling_file=None, calling_module="hydra.test_utils.a_module", config_path="configs",
                               config_name=None, task_function=task, temp_dir=str(tmp_path / "sweep"),
                               overrides=["hydra/launcher=slurm", "hydra.launcher.poll_interval_s=0.5", "+x=2,3"])
    with sweep:
        assert sweep.returns is not None
        returns = [r for batch in sweep.returns for r in batch]
        ids = slurm_ids(tmp_path / "sweep")  # one job array: the value is read from each task's own result
        assert [i.partition("_")[2] for i in ids.values()] == ["0", "1"]
        # Read back from each job's saved `.hydra/` files when asked for, as the local launcher's: before the runner
        # removes the sweep's folder on leaving the block.
        assert all("hydra" not in r.cfg and r.hydra_cfg is not None for r in returns)
    assert [r.return_value for r in returns] == [
        {"x2": 4, "label": "x=2", "nested": {"values": [2, None]}},
        {"x2": 9, "label": "x=3", "nested": {"values": [3, None]}},
    ]
    assert [r.overrides for r in returns] == [["+x=2"], ["+x=3"]]


def test_train_py_takes_the_launchers_time_limit_unless_the_job_sets_its_own(tmp_path: Path) -> None:
    """`hydra.launcher.timeout_min=5`, hydra-submitit-launcher's key, is train.py's time limit: conf/config.yaml's
    `timeout_min` is null (it was 60, which won over the launcher's key for every job); `timeout_min=7` on the command
    line (or in a study's file) is the job's own and wins, with the warning."""
    train = Path(__file__).parents[2] / "train.py"
    proc = run(train, tmp_path / "sweep", "hydra/launcher=slurm", "lr=0.1,0.01", "hydra.launcher.timeout_min=5",
               "hydra.launcher.dry_run=true")
    assert proc.returncode == 0, proc.stderr
    assert "--time=5" in _sbatch_lines(proc.stdout) and "only to jobs without it" not in proc.stdout
    own = run(train, tmp_path / "own", "hydra/launcher=slurm", "lr=0.1", "timeout_min=7",
              "hydra.launcher.timeout_min=5", "hydra.launcher.dry_run=true")
    assert own.returncode == 0, own.stderr
    assert "--time=7" in _sbatch_lines(own.stdout)
    assert "hydra.launcher.timeout_min=5 applies only to jobs without it" in " ".join(own.stdout.split())
