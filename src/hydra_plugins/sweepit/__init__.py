"""sweepit's Hydra plugins: the launchers (`hydra/launcher=local`, `slurm`) and the callbacks."""
