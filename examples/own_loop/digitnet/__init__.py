"""The user's own code: a model and a data set that know nothing of sweepit."""
