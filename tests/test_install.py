"""A non-editable install (`pip install .`: a wheel) runs from any folder: conf/ and reference/ travel inside it
(attnrepro.locations). Slow suite (make test-full): builds and installs the wheel into a fresh venv that borrows
this venv's dependencies (torch, Lightning, Hydra, ...; not its editable attnrepro), then, from a folder outside
the repository, checks where the installed package reads its folders, reproduces one smoke experiment with its
theory curves, and refuses refresh_reference=true."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from sweep_tools import wandb_dirs

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "tied_spectra"  # small on the smoke profile; a training sweep and theory curves

pytestmark = pytest.mark.slow


def run(cmd: list, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WANDB_", "ATTNREPRO_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(WANDB_MODE="disabled", PYTHONUNBUFFERED="1", **wandb_dirs(cwd))
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A folder outside the repository holding venv/, with attnrepro installed from a wheel of this checkout."""
    base = tmp_path_factory.mktemp("wheel_install")
    venv = base / "venv"
    ok(run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=base))
    python = venv / "bin" / "python"
    purelib = Path(ok(run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=base)).strip())
    # this venv's site-packages as a plain path line: its own .pth files (the editable install's) are not read
    (purelib / "_attnrepro_test_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    ok(run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--quiet", ROOT], cwd=base))
    return base


def test_the_wheel_reads_its_packaged_conf_and_reference(installed):
    probe = """if True:
        import json, attnrepro, hydra_plugins.attnrepro_grid_sweeper as sweeper
        from attnrepro import locations, papers
        from attnrepro.jobs.grid import CONF_DIR, experiments
        from attnrepro.jobs.sweep_seconds import read_sweep_seconds
        from attnrepro.report.claims_diff import reference_path
        from attnrepro.jobs.provenance import commit
        papers.check_registry()  # no tests/ here: the declared-test check is skipped
        print(json.dumps({"package": attnrepro.__file__, "sweeper": sweeper.__file__, "conf": str(CONF_DIR),
                          "checkout": locations.CHECKOUT and str(locations.CHECKOUT),
                          "tests": locations.TESTS_DIR and str(locations.TESTS_DIR),
                          "experiments": experiments(), "reference": reference_path("quick").is_file(),
                          "sweep_seconds": len(read_sweep_seconds("quick")), "commit": commit()}))
    """
    found = json.loads(ok(run([installed / "venv" / "bin" / "python", "-c", probe], cwd=installed)))
    venv, package = (installed / "venv").resolve(), Path(found["package"]).resolve().parent
    assert package.is_relative_to(venv) and not package.is_relative_to(ROOT)  # the wheel's copy, not src/
    assert Path(found["sweeper"]).resolve().is_relative_to(venv)
    assert Path(found["conf"]).resolve() == package / "_data" / "conf"
    assert found["checkout"] is None and found["tests"] is None
    assert EXPERIMENT in found["experiments"] and found["reference"] and found["sweep_seconds"] > 0
    assert found["commit"] is None


def test_the_wheel_reproduces_from_another_folder(installed):
    outputs = installed / "outputs"
    cli = installed / "venv" / "bin" / "attnrepro"
    out = ok(run([cli, "reproduce", "profile=smoke", f"experiments={EXPERIMENT}", f"outputs={outputs}"],
                 cwd=installed))
    assert "theory: " in out and (outputs / "report" / "index.html").is_file()
    assert (outputs / "report" / "claims.csv").is_file() and (outputs / "report" / "sweep_seconds.csv").is_file()
    assert list((outputs / "runs" / EXPERIMENT).rglob("record.json"))
    # the packaged reference is read-only: refreshing it needs a source checkout, and says so before drawing
    refused = run([cli, "figures", "profile=smoke", f"outputs={outputs}", "refresh_reference=true"], cwd=installed)
    assert refused.returncode == 2 and "needs a source checkout" in refused.stderr, refused.stderr
