"""Puts sweepit's config files (under `conf/`, in the package) on every Hydra app's search path, so that any app
with sweepit installed can pick `hydra/launcher=slurm` or a cluster profile; an app's own config directory wins.
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

CONF_PACKAGE = "pkg://hydra_plugins.sweepit.conf"


class SweepitSearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="sweepit", path=CONF_PACKAGE)
