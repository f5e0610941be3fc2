"""Train one grid point, or with -m a whole experiment's grid: one record per job.

    python pipelines/train.py experiment=xor_phase_dm task.d=256 model.m=20
    python pipelines/train.py -m experiment=xor_phase_dm profile=quick
"""

import hydra
from omegaconf import DictConfig

from attnrepro.config import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> str:
    from attnrepro.jobs.job import run_job

    return run_job(cfg)["status"]


if __name__ == "__main__":
    main()
