"""The site profiles' sbatch scripts, as a dry run prints them away from any cluster: each job keeps the modules the
sweep was started with (a `module purge` unloaded the Python and torch the venv was built on) unless the setup asks
otherwise, and each task sees its job's GPUs on the node, so that NCCL finds the NVLink between them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from slurm_launcher_testing import TRAIN, driver_env, run

SITES = {"marenostrum5": ["hydra.launcher.account=bsc12345", "hydra.launcher.qos=acc_debug"],
         "juwels_booster": ["hydra.launcher.account=my_budget"], "cte_power": ["hydra.launcher.qos=bsc_cs"]}


def _sbatch_script(tmp_path: Path, profile: str, *overrides: str) -> tuple[list[str], str]:
    """(the setup lines, the srun line) of a 4-GPU job's sbatch script, planned from the profile alone: no Slurm
    command on PATH, as on a laptop."""
    env = driver_env(PATH=str(Path(sys.executable).parent))
    proc = run(TRAIN, tmp_path / "sweep", "task=linreg", "trainer.gpus=4", f"hydra/launcher={profile}", *SITES[profile],
               "hydra.launcher.dry_run=true", *overrides, env=env, timeout_s=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    script = proc.stdout.split("\n# setup\n", 1)[1]
    setup, command = script.split("\n# command\n", 1)
    (srun,) = [line for line in command.splitlines() if line.startswith("srun ")]
    return [line for line in setup.splitlines() if line], srun


@pytest.mark.no_cluster
@pytest.mark.parametrize("profile", sorted(SITES))
def test_a_site_profile_keeps_the_users_modules_and_shows_each_task_its_jobs_gpus(tmp_path: Path,
                                                                                  profile: str) -> None:
    setup, srun = _sbatch_script(tmp_path, profile)
    assert not [line for line in setup if line.split()[0] == "module"], setup
    assert " --gpu-bind=none " in srun and " --kill-on-bad-exit=1 " in srun, srun


@pytest.mark.no_cluster
def test_a_clean_environment_is_there_when_the_setup_asks_for_it(tmp_path: Path) -> None:
    setup, _ = _sbatch_script(tmp_path, "marenostrum5", "hydra.launcher.setup=[module purge,module load cuda]")
    assert setup[-2:] == ["module purge", "module load cuda"], setup
