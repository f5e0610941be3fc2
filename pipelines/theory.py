"""Paper B's theory curves for the figures' parameters, cached like training runs.

    python pipelines/theory.py                                   # every experiment with theory, quick profile
    python pipelines/theory.py profile=paper experiments=[tied_error_vs_alpha]

Each (curve, parameter point) is a job with its own record under
<outputs>/theory/<experiment>/<key>/; complete ones are skipped. The aggregate stage reads
the jobs that conf/theory.yaml expects (change settings there, not on the command line,
for the figures to use them). Exit status 1 when a curve failed (its reason is recorded).
"""

import sys

import hydra
from omegaconf import DictConfig

from attnrepro.config import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="../conf", config_name="theory")
def main(cfg: DictConfig) -> None:
    from attnrepro.jobs.theory import run

    counts = run(cfg)
    print(f"theory: {counts['complete']} computed, {counts['skipped']} cached, {counts['failed']} failed")
    if counts["failed"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
