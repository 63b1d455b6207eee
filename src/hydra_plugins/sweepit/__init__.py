"""sweepit's Hydra plugins: the local and Slurm launchers, the Optuna sweeper, the callbacks, the search path.

Hydra imports this package when it looks for plugins, in every process that runs an app (the driver, and a job's
own under any launcher): the resolver of the configs' `hydra.sweep.subdir` is registered here, so that it resolves
whichever launcher runs the job.
"""

from omegaconf import OmegaConf

from sweepit.results import job_dir_name

if not OmegaConf.has_resolver("sweepit.job_dir"):
    OmegaConf.register_new_resolver("sweepit.job_dir", lambda num, overrides: job_dir_name(int(num), str(overrides)))
