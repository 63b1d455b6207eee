"""Config files that come with sweepit (the cluster profiles under hydra/launcher/); Hydra finds them through
hydra_plugins.sweepit.search_path, and needs this file to call the folder available."""
