"""A researcher's package: a model and data functions that know nothing of sweepit."""
