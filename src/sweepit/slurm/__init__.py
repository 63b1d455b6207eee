"""Slurm sweeps: requests, job arrays through submitit, following squeue/sacct (the engine of hydra/launcher=slurm)."""
