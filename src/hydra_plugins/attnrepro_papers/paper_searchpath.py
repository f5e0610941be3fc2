"""Hydra search path plugin: the conf/ folder of every paper installed from outside attnrepro (a package
named in the entry point group `attnrepro.papers`, attnrepro.papers.external_packages) joins Hydra's search
path after attnrepro's own conf/, so its task/, model/, train/ and experiment/ options merge with
attnrepro's groups (a file both define is refused by attnrepro.papers.packages). Hydra applies it to the
`attnrepro train` and `attnrepro theory` apps and to every compose (jobs.grid)."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class AttnreproPaperSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from attnrepro.papers import external_packages, package_dir

        for package in external_packages():
            search_path.append(provider=f"attnrepro-paper:{package.__name__}",
                               path=f"file://{package_dir(package) / 'conf'}")
