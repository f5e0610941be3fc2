"""The two Hydra apps: `attnrepro train` (conf/config.yaml: one job, or with -m a sweep) and
`attnrepro theory` (conf/theory.yaml: the theory curves)."""

from __future__ import annotations

import os
import sys

import hydra
from omegaconf import DictConfig

from attnrepro.config import register_configs
from attnrepro.jobs.grid import CONF_DIR

CONF = str(CONF_DIR)


@hydra.main(version_base="1.3", config_path=CONF, config_name="config")
def train(cfg: DictConfig) -> str:
    """One grid point, or with -m the experiment's grid: one record per job."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from attnrepro.jobs.training import run_job

    status = run_job(cfg)["status"]
    if status == "failed" and not cfg.accept_failed and HydraConfig.get().mode != RunMode.MULTIRUN:
        FAILED.append("the job failed")
        print("the job failed: its record says why (accept_failed=true accepts it)", flush=True)
    return status  # a sweep's jobs: the grid sweeper counts the failed ones


@hydra.main(version_base="1.3", config_path=CONF, config_name="theory")
def theory(cfg: DictConfig) -> None:
    """Every theory curve of the selected experiments; exit status 1 when one failed."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from attnrepro.jobs.theory import run

    launcher = HydraConfig.get().launcher  # hydra/launcher=slurm: the curves as a packed SLURM array
    slurm = str(launcher.get("_target_", "")).endswith("SlurmLauncher")
    counts = run(cfg, launcher=OmegaConf.to_container(launcher, resolve=True) if slurm else None)
    print(f"theory: {counts['complete']} computed, {counts['skipped']} cached, {counts['failed']} failed")
    if counts["failed"]:
        sys.exit(1)


FAILED: list[str] = []  # why this run's exit status is 1: failed jobs (the grid sweeper and train add to it)


def run(app, name: str, argv: list[str]) -> int:
    """Run a Hydra app on argv (Hydra reads sys.argv); 1 when jobs failed (FAILED), else 0. A config error
    (Hydra's compact errors) or a file that cannot be written or read (a read-only or full disk) is one
    line on stderr and exit status 1; with HYDRA_FULL_ERROR=1 set by the user, the traceback instead."""
    from hydra.errors import CompactHydraException
    from omegaconf.errors import OmegaConfBaseException

    register_configs()
    sys.argv = [f"attnrepro {name}", *argv]
    FAILED.clear()
    full = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing: reported here
    try:
        app()
    except CompactHydraException as e:
        if full:
            raise
        cause = f"\n{e.__cause__}" if isinstance(e.__cause__, OmegaConfBaseException) else ""
        print(f"attnrepro {name}: {e}{cause}", file=sys.stderr)
        return 1
    except OSError as e:
        if full:
            raise
        print(f"attnrepro {name}: {os_error(e)}", file=sys.stderr)
        return 1
    finally:
        if not full:
            os.environ.pop("HYDRA_FULL_ERROR", None)
    return 1 if FAILED else 0


def os_error(e: OSError) -> str:
    """One line for a file that cannot be written or read: which file, and why."""
    where = f"{e.filename}: " if e.filename else ""
    return f"cannot write or read {where}{e.strerror or e} (a read-only or full outputs folder? paths.outputs=... " \
           "or ATTNREPRO_OUTPUTS choose another); nothing written before is lost"
