"""Adaptive search with Optuna: search spaces, samplers and pruners, the study's bookkeeping, its result files."""
