"""Puts sweepit's config files on every Hydra app's search path, so that any app with sweepit installed
(not only this repository's train.py) can pick `hydra/launcher=slurm` or a cluster profile.

Hydra finds this class in its plugin scan of `hydra_plugins`; the files are under `conf/` next to this module
and come with the package. An app's own config directory is searched first, so its files win.
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

CONF_PACKAGE = "pkg://hydra_plugins.sweepit.conf"


class SweepitSearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="sweepit", path=CONF_PACKAGE)
