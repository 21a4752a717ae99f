"""The one training loop and what it owns: the run's config, optimizers (LAMB), checkpoints, the process group."""
