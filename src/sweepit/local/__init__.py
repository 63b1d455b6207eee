"""Local sweeps: each job in its own forked worker process, a few at a time (the engine of hydra/launcher=local)."""
