"""The training loop and the API a training function calls: report metrics, stop when pruned, checkpoint."""
