"""The two Hydra apps: `attnrepro train` (conf/config.yaml: one job, or with -m a sweep) and
`attnrepro theory` (conf/theory.yaml: the theory curves)."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from attnrepro.config import register_configs
from attnrepro.jobs.grid import CONF_DIR

CONF = str(CONF_DIR)


@hydra.main(version_base="1.3", config_path=CONF, config_name="config")
def train(cfg: DictConfig) -> str:
    """One grid point, or with -m the experiment's grid: one record per job."""
    from attnrepro.jobs.training import run_job

    return run_job(cfg)["status"]


@hydra.main(version_base="1.3", config_path=CONF, config_name="theory")
def theory(cfg: DictConfig) -> None:
    """Every theory curve of the selected experiments; exit status 1 when one failed."""
    from attnrepro.jobs.theory import run

    counts = run(cfg)
    print(f"theory: {counts['complete']} computed, {counts['skipped']} cached, {counts['failed']} failed")
    if counts["failed"]:
        sys.exit(1)


def run(app, name: str, argv: list[str]) -> int:
    """Run a Hydra app on argv (Hydra reads sys.argv)."""
    register_configs()
    sys.argv = [f"attnrepro {name}", *argv]
    app()
    return 0
