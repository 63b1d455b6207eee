"""Config schema of sweepit's local launcher, registered as `hydra/launcher=local` (no heavy imports here)."""

# No `from __future__ import annotations` here: Hydra's plugin scan executes this module before it is in
# sys.modules, and dataclasses then cannot resolve string annotations.
from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore

# Imported once in the driver before any job is forked, so each job starts warm. `module:function` also
# calls a function with no arguments; `package.*` imports the package's modules too. Nothing here may run
# torch compute: OpenMP thread pools do not survive fork. torch._dynamo is what torch's optimizers import
# on first use (about 2 s here); the private torch modules and sweepit's data modules are imported lazily
# by a first training step, which each job would otherwise pay for (and compile, where Python writes no
# bytecode cache). An entry missing from this environment is skipped.
DEFAULT_PRELOAD = [
    "torch", "torch.optim", "torch._dynamo", "torch.profiler._cupti_monitor", "torch.utils.serialization.config",
    "sweepit.train._loop", "sweepit.train.data.*", "sweepit.train._job:code_version",
]


@dataclass
class LocalLauncherConf:
    _target_: str = "hydra_plugins.sweepit.local_launcher.LocalLauncher"
    # Worker processes at once. 0 = auto: one per GPU when there are GPUs, else CPU cores // threads_per_job
    # (every core with auto threads), and on CPU at most the launch's job count. A job with gpus_key=N takes
    # N GPUs (through CUDA_VISIBLE_DEVICES), or on CPU N workers (its N ranks).
    n_workers: int = 0
    # torch CPU threads per job (torch.set_num_threads). 0 = auto: CPU cores // workers, so that 32 jobs on
    # 16 cores get 1 thread each and 2 jobs get 8. A job's own trainer.threads > 0 wins.
    threads_per_job: int = 0
    # true: the sweep exits with status 1 when any job failed or was interrupted. false: exit 0; such
    # jobs reach the sweeper as COMPLETED with return value None (result.json keeps the real status).
    fail_on_error: bool = True
    # Skip jobs whose result.json in hydra.sweep.dir says completed (or diverged); rerun the others.
    # Set hydra.sweep.dir to the sweep to resume; job numbers and directories stay the same.
    resume: bool = False
    # Modules imported in the driver before forking (see DEFAULT_PRELOAD).
    preload: list[str] = field(default_factory=lambda: list(DEFAULT_PRELOAD))
    # Last lines of a failed job's stderr.log copied into its result.json (a segfault's Python stack
    # from faulthandler takes about 30).
    stderr_tail_lines: int = 50
    # Seconds between SIGTERM and SIGKILL when running jobs are stopped (Ctrl-C, SIGTERM to the driver).
    term_grace_s: float = 5.0
    # Config key holding the devices (ranks) of one job: GPUs to give it, or workers it occupies on CPU.
    gpus_key: str = "trainer.gpus"
    # Print the results table after the jobs of each launch; sweepers launching many small batches may
    # turn it off.
    print_summary: bool = True


ConfigStore.instance().store(group="hydra/launcher", name="local", node=LocalLauncherConf, provider="sweepit")
