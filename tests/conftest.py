import pytest

from attnrepro.config import validate
from attnrepro.jobs.grid import compose


@pytest.fixture
def job_config(tmp_path):
    """A composed, validated job config writing under tmp_path: job_config(*overrides)."""

    def make(*overrides):
        cfg = compose([f"paths.outputs={tmp_path}", *overrides])
        return cfg, validate(cfg)

    return make
