"""Before anything is submitted: the dry run against a stored sbatch reference, the cluster profiles, and a
clear error for each bad input (unset account, too many GPUs, unknown key, unreachable Slurm)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from slurm_launcher_testing import APP, ROOT, driver_env, run

from sweepit.errors import ConfigError
from sweepit.slurm._place import spread
from sweepit.slurm._request import Request, sbatch_parameters
from sweepit.slurm._submit import sbatch_script
from sweepit_testing import PACKAGE_CONF

REF = Path(__file__).parent / "ref" / "dry_run.txt"
REFRESH = f"SWEEPIT_UPDATE_REFS=1 .venv/bin/pytest {Path(__file__).relative_to(ROOT)} -k dry_run"
PROFILES = sorted(p.stem for p in (PACKAGE_CONF / "hydra" / "launcher").glob("*.yaml"))


def _normalised(text: str, sweep_dir: Path) -> str:
    """The dry run's output without what differs between machines and runs: paths and the job name's suffix."""
    text = text.replace(str(sweep_dir), "<SWEEP_DIR>").replace(sys.executable, "<PYTHON>")
    text = text.replace(str(APP.parent), "<APP_DIR>")
    return re.sub(r"(--job-name=\S+)-[0-9a-f]{6}\b", r"\1-<SUFFIX>", text)


# The reference's dry runs: a GPU-count study (each job's own trainer.gpus and timeout_min), and an app's jobs
# without either, whose request is hydra-submitit-launcher's keys (no GPU among them: CPU-only).
DRY_RUNS = [
    ["x=range(3)", "trainer.gpus=1,2", "hydra.launcher.node_gpus=4", "hydra.launcher.max_array_size=2",
     "hydra.launcher.account=proj1", "hydra.launcher.setup=[module load cuda]", "hydra.launcher.mem_gb=16",
     "hydra.launcher.cpus_per_task=8"],
    ["x=0,1", "~trainer", "~timeout_min", "hydra.launcher.timeout_min=30", "hydra.launcher.tasks_per_node=2",
     "hydra.launcher.cpus_per_task=4", "hydra.launcher.mem_gb=8", "hydra.launcher.partition=debug",
     "hydra.launcher.qos=normal", "hydra.launcher.constraint=fast",
     "+hydra.launcher.additional_parameters.mail-type=FAIL"],
]


def test_dry_run_prints_each_groups_sbatch_script_as_stored(tmp_path: Path) -> None:
    got = ""
    for i, overrides in enumerate(DRY_RUNS):
        sweep = tmp_path / f"sweep{i}"
        proc = run(APP, sweep, *overrides, "hydra.launcher.dry_run=true")
        assert proc.returncode == 0, proc.stderr
        # a dry run submits nothing, and leaves no sweep behind (it left Hydra's multirun.yaml: `0 jobs` in `ls`)
        assert not sweep.exists(), sorted(p.name for p in sweep.iterdir())
        got += f"## dry run: {' '.join(overrides)}\n{_normalised(proc.stdout, sweep)}"
    # 6 jobs of 5 min: 3 x 1 GPU + 3 x 2 GPUs = 9 GPUs x 5/60 h; then 2 CPU-only jobs.
    assert "dry run: 6 job(s) in 4 sbatch call(s), at most 0.75 GPU-hours" in got
    assert "# 2 job(s) with CPU only, 2 task(s), 30 min" in got and "at most 0.00 GPU-hours" in got
    assert "/" + "tmp" not in got and str(ROOT) not in got, "the reference must hold no machine's paths"
    if os.environ.get("SWEEPIT_UPDATE_REFS") == "1":
        REF.write_text(got)
    assert REF.exists(), f"{REF} is missing; write it with: {REFRESH}"
    assert got == REF.read_text(), (
        f"the dry run's sbatch scripts differ from {REF.relative_to(ROOT)}; if the change is intended, refresh "
        f"the reference with: {REFRESH}")


@pytest.mark.no_cluster
@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_composes_from_any_app_instantiates_and_renders(profile: str, tmp_path: Path) -> None:
    """The profiles come with the package: an app whose own config directory has no hydra/launcher/ finds them."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text("# an app that has never heard of sweepit\nx: 1\n")
    with initialize_config_dir(config_dir=str(tmp_path / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra/launcher={profile}"], return_hydra_config=True)
    node = cfg.hydra.launcher
    assert node._target_ == "hydra_plugins.sweepit.slurm_launcher.SlurmLauncher"
    assert set(node.required) <= {"account", "qos", "partition"}
    for key in node.required:
        node[key] = f"my_{key}"
    launcher = instantiate(node)
    request = spread(0, 8, 30, node.node_gpus or 4, 2, "trainer.gpus")
    params = sbatch_parameters(request, launcher.options, "t-abc123")
    script = sbatch_script(params, tmp_path, 3, None)
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --ntasks-per-node=4\n" in script
    assert "#SBATCH --gpus-per-node=4\n" in script and "--gpus-per-task" not in script
    assert f"#SBATCH --cpus-per-task={node.cpus_per_task}\n" in script
    for key in node.required:
        assert f"#SBATCH --{key}=my_{key}\n" in script
    for line in node.setup:
        assert f"\n{line}\n" in script


@pytest.mark.no_cluster
def test_a_jobs_gpus_fill_nodes_evenly_or_say_which_gpu_counts_fit() -> None:
    # GPUs per node, not per task: each task sees the job's GPUs on its node (NCCL finds the NVLink between them)
    assert spread(0, 8, 60, 4, 2, "trainer.gpus") == Request(nodes=2, tasks_per_node=4, timeout_min=60, gpus_per_node=4)
    assert spread(0, 6, 60, 4, 2, "trainer.gpus") == Request(nodes=2, tasks_per_node=3, timeout_min=60, gpus_per_node=3)
    with pytest.raises(ConfigError, match=r"must split evenly over the 2 nodes .* Use for example trainer.gpus=4 or 6"):
        spread(3, 5, 60, 4, 2, "trainer.gpus")
    with pytest.raises(ConfigError, match=r"at most 8 \(hydra.launcher.max_nodes=2 node\(s\) x 4 GPU\(s\) per node\), "
                       "but job 3"):
        spread(3, 9, 60, 4, 2, "trainer.gpus")


BAD_INPUT = {
    "required account unset": (["hydra.launcher.required=[account]"], {},
                                "hydra.launcher.account must be set on this cluster (it refuses jobs without one), but "
                                "got account=null. Add hydra.launcher.account=<yours> to the command, or export "
                                "SBATCH_ACCOUNT=<yours>"),
    "more GPUs than a node": (["trainer.gpus=5"], {},
                              "trainer.gpus must be at most 4 (hydra.launcher.max_nodes=1 node(s) x 4 GPU(s) per "
                              "node), but job 0 sets trainer.gpus=5."),
    "no GPU through the GPU key": (["trainer.gpus=0"], {},
                                   "trainer.gpus must be an integer >= 1, but job 0 has trainer.gpus=0. Set for "
                                   "example trainer.gpus=1, or hydra.launcher.gpus_key=null for jobs that ask for no "
                                   "GPU (CPU only)."),
    "more GPUs than the partition": (["trainer.gpus=8", "hydra.launcher.max_nodes=2"], {},
                                     "trainer.gpus must be at most the 4 GPUs partition debug offers one job"),
    "profile GPUs beyond the nodes'": (["hydra.launcher.node_gpus=8"], {},
                                       "hydra.launcher.node_gpus must be at most the 4 GPU(s) the nodes of "
                                       "partition debug have"),
    "launcher GPUs beyond the nodes'": (["~trainer", "hydra.launcher.gpus_per_task=1",
                                         "hydra.launcher.tasks_per_node=8"], {},
                                        "the GPUs a job asks for on one node (hydra.launcher.gpus_per_node, "
                                        "gpus_per_task x tasks_per_node, or gres) must be at most the 4 its nodes "
                                        "have in partition debug, but got 8"),
    "launcher nodes beyond the partition's": (["~trainer", "hydra.launcher.nodes=2"], {},
                                              "hydra.launcher.nodes must be at most the 1 node(s) partition debug "
                                              "gives one job, but got nodes=2."),
    "launcher time limit not a count": (["~timeout_min", "hydra.launcher.timeout_min=0"], {},
                                        "hydra.launcher.timeout_min must be an integer >= 1, but got timeout_min=0."),
    "unknown partition": (["hydra.launcher.partition=debgu"], {},
                          "hydra.launcher.partition must name a partition of this cluster (debug), but got 'debgu'. "
                          "Set hydra.launcher.partition=debug (the closest name with GPUs)"),
    "unknown partition in a dry run": (["hydra.launcher.partition=nope", "hydra.launcher.dry_run=true"], {},
                                       "hydra.launcher.partition must name a partition of this cluster (debug)"),
    "unknown partition in SBATCH_PARTITION": ([], {"SBATCH_PARTITION": "gpus"},
                                              "SBATCH_PARTITION (in the environment) must name a partition of this "
                                              "cluster (debug), but got 'gpus'."),
    "gpus_key naming no key": (["hydra.launcher.gpus_key=trainer.n_gpus"], {},
                               "hydra.launcher.gpus_key must name a key of the job config that holds the GPUs each job "
                               "asks for, but got gpus_key=trainer.n_gpus, which job 0's config does not have."),
    "launcher value wrong at setup": (["hydra.launcher.array_parallelism=0"], {},
                                      "hydra.launcher.array_parallelism must be an integer >= 1, but got "
                                      "array_parallelism=0."),
    "unknown launcher key": (["hydra.launcher.gpus=2"], {}, "Key 'gpus' not in 'SlurmLauncherConf'"),
    "misspelt launcher key, added as Hydra suggests": (["+hydra.launcher.partiton=debug"], {},
                                                       "but got partiton. partiton: did you mean partition?"),
    "time limit shorter than the signal": (["timeout_min=2"], {},
                                           "timeout_min must leave room for the checkpoint signal, at least "
                                           "150 s, but job 0 has timeout_min=2 (120 s). Raise timeout_min, or lower "
                                           "hydra.launcher.signal_delay_s (now 90). "
                                           "See docs/troubleshooting.md#time-limit-below-the-signal"),
    "no sbatch on PATH": ([], {"PATH": str(Path(sys.executable).parent)},
                          "hydra/launcher=slurm needs Slurm's `sbatch` on PATH, but it is not there"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_stops_the_sweep_before_anything_is_submitted(case: str, tmp_path: Path) -> None:
    overrides, env, message = BAD_INPUT[case]
    sweep = tmp_path / "sweep"
    proc = run(APP, sweep, "x=0,1", *overrides, env=driver_env(**env), timeout_s=60)
    assert proc.returncode == 1
    assert message in proc.stderr.replace("\n", " "), proc.stderr
    assert "Traceback" not in proc.stderr  # Hydra prints the message alone
    assert "Error in call to target" not in proc.stderr, proc.stderr  # sweepit's paragraph, not wrapped by Hydra
    if case != "unknown launcher key":  # that one is Hydra's own override error, against the schema
        assert proc.stderr.startswith("hydra.launcher takes only" if "misspelt" in case else message[:40])
        assert "full_key: hydra.launcher" not in proc.stderr, proc.stderr
        assert "HYDRA_FULL_ERROR" not in proc.stderr, proc.stderr  # sweepit's message is all there is to see
    assert not sweep.exists(), sorted(sweep.iterdir())  # no folder that `sweepit ls` would list as a sweep of 0 jobs


def test_a_controller_that_is_down_stops_the_sweep_with_scontrol_s_words(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"  # this cluster's config, with the controller moved to a port nobody serves
    real = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")).read_text()
    conf.write_text(re.sub(r"^(SlurmctldHost=.*)$", r"\1\nSlurmctldPort=6999", real, flags=re.MULTILINE))
    proc = run(APP, tmp_path / "sweep", "x=0", env=driver_env(SLURM_CONF=str(conf)), timeout_s=60)
    assert proc.returncode == 1
    said = "the Slurm controller must be up to submit jobs, but `scontrol ping` says: Slurmctld(primary) at"
    assert said in proc.stderr
    assert "is DOWN. Start it (`make slurm-up` for the local cluster)" in proc.stderr


@pytest.mark.no_cluster
def test_profiles_set_only_the_network_settings_their_sites_document() -> None:
    """MareNostrum5's hard-coded NCCL_SOCKET_IFNAME=ib0 was a guess (NCCL finds the InfiniBand adapters itself); JSC's
    nodes reach each other as `<host>i`, which the JUWELS profile gives the rendezvous (sweepit.train reads
    MASTER_ADDR under Slurm when the job's script exported it)."""
    from omegaconf import OmegaConf

    profiles = Path(__file__).parents[2] / "src" / "hydra_plugins" / "sweepit" / "conf" / "hydra" / "launcher"
    mn5 = OmegaConf.load(profiles / "marenostrum5.yaml")
    assert not [line for line in mn5.setup if "NCCL" in line], list(mn5.setup)
    juwels = list(OmegaConf.load(profiles / "juwels_booster.yaml").setup)
    assert 'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)i"' in juwels
