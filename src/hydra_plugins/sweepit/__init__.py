"""sweepit's Hydra plugins: the local launcher (`hydra/launcher=local`), the Slurm launcher
(`hydra/launcher=slurm` and cluster profiles), the Optuna sweeper and callbacks."""
