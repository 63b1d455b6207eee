"""sweepit's Hydra plugins: the local launcher (`hydra/launcher=local`), the Slurm launcher
(`hydra/launcher=slurm` and cluster profiles, found by any app through the search-path plugin), the Optuna
sweeper and callbacks.

Hydra imports this package when it looks for plugins, before any config is composed, in every process that runs
an app (the driver, and a job's own under any launcher): the `${sweepit.job_dir:num,overrides}` resolver of the
configs' `hydra.sweep.subdir` is registered here, so that it resolves whichever launcher runs the job.
"""

from omegaconf import OmegaConf

from sweepit.results import job_dir_name

if not OmegaConf.has_resolver("sweepit.job_dir"):
    OmegaConf.register_new_resolver("sweepit.job_dir", lambda num, overrides: job_dir_name(int(num), str(overrides)))
