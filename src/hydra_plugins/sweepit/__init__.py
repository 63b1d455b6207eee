"""sweepit's Hydra plugins: the local launcher (`hydra/launcher=local`), the Slurm launcher
(`hydra/launcher=slurm` and cluster profiles, found by any app through the search-path plugin), the Optuna
sweeper and callbacks."""
