from __future__ import annotations

import os

# One thread per process, set before numpy and torch load: the suite runs a smoke reproduction in the
# background beside the tests, on machines of a few cores; multithreaded BLAS and torch on small
# arrays only make the processes fight over them (an explicit setting is kept).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from attnrepro.config import validate  # noqa: E402
from attnrepro.jobs.grid import compose  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def job_config(tmp_path):
    """A composed, validated job config writing under tmp_path: job_config(*overrides)."""

    def make(*overrides):
        cfg = compose([f"paths.outputs={tmp_path}", *overrides])
        return cfg, validate(cfg)

    return make


@pytest.fixture(scope="session")
def smoke_grid_cache(tmp_path_factory) -> Path:
    """cache/grid/ with the expected jobs of every experiment's smoke grid, computed once: copied into
    an outputs folder, jobs.grid.expected_jobs reads them instead of composing every job again (the
    cache is keyed by the conf files, not by the outputs folder)."""
    from attnrepro.jobs.grid import expected_jobs, experiments

    root = tmp_path_factory.mktemp("grid_cache")
    for e in experiments():
        expected_jobs(e, "smoke", outputs=str(root))
    return root / "cache" / "grid"


# --- one smoke reproduction for the whole session ---------------------------------------------
#
# `attnrepro reproduce profile=smoke` is the slowest thing the suite does, and it is serial (one
# sweep after the other). So once the tests are collected, if any of them needs it (the smoke_run
# fixture), it starts in the background, and the tests that need it run last (their files last, for
# xdist): the rest of the suite runs meanwhile on the other core. smoke_run waits for it.
#
# Under pytest-xdist (`make test` runs two workers, a file in each) the workers share one reproduction: the
# controller makes its folder (SMOKE_DIR, inherited by the workers), the first worker that needs it
# starts it there (an atomic mkdir decides which), every worker waits for the exit status it writes,
# and the controller stops it and removes the folder at the end. Without xdist the one process is
# both.

SMOKE_DIR = "ATTNREPRO_TEST_SMOKE_DIR"


@dataclass(frozen=True)
class SmokeRun:
    """A finished `attnrepro reproduce profile=smoke` in its own outputs folder, shared by every
    test of the session: read it, never write into it (copy() gives a folder to change)."""

    outputs: Path
    stdout: str
    jobs: dict  # {experiment: [(overrides, key)]} of the smoke grids

    @property
    def n_jobs(self) -> int:
        return sum(len(j) for j in self.jobs.values())

    def copy(self, dest: Path) -> Path:
        """A copy of the outputs (records, theory, tables, figures, caches) at dest, to resume,
        break or heal without touching the shared one."""
        shutil.copytree(self.outputs, dest, symlinks=True)
        return dest


class _Reproduction:
    """The smoke reproduction as a background process (its own session) writing into `folder`:
    outputs/, stdout.txt, stderr.txt, pid, and rc (its exit status, written when it ends)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.outputs = folder / "outputs"
        self.proc: subprocess.Popen | None = None  # in the process that started it

    def start(self) -> bool:
        """Start it unless another process of this session did (False then)."""
        from sweep_tools import cli_cmd, train_env

        try:
            (self.folder / "started").mkdir()
        except FileExistsError:
            return False
        script = '"$@" >"$0/stdout.txt" 2>"$0/stderr.txt"; echo $? >"$0/rc.tmp"; mv "$0/rc.tmp" "$0/rc"'
        cmd = ["/bin/sh", "-c", script, str(self.folder), *cli_cmd("reproduce", "profile=smoke")]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=train_env(self.outputs, WANDB_MODE="disabled"),
                                     start_new_session=True)
        (self.folder / "pid").write_text(str(self.proc.pid))
        return True

    def wait(self, timeout: float) -> tuple[int, str, str]:
        end = time.monotonic() + timeout
        rc = self.folder / "rc"
        while not rc.exists():
            if self.proc is not None and self.proc.poll() is not None and not rc.exists():
                raise AssertionError(f"the smoke reproduction ended (exit {self.proc.returncode}) without its status")
            if time.monotonic() > end:
                raise TimeoutError(f"the smoke reproduction did not end within {timeout:g}s ({self.folder})")
            time.sleep(0.5)
        read = lambda name: (self.folder / name).read_text() if (self.folder / name).exists() else ""  # noqa: E731
        return int(rc.read_text()), read("stdout.txt"), read("stderr.txt")

    def stop(self) -> None:
        """Kill it if it is still running (the session ended before it did: interrupted, -x)."""
        pid = self.folder / "pid"
        if pid.exists() and not (self.folder / "rc").exists():
            try:
                os.killpg(int(pid.read_text()), signal.SIGKILL)
            except (ProcessLookupError, PermissionError, ValueError):
                pass
        if self.proc is not None:
            self.proc.wait()


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


_OWNED = pytest.StashKey[Path]()


def pytest_configure(config):
    if not _is_worker(config):
        folder = Path(tempfile.mkdtemp(prefix="attnrepro-smoke-"))
        os.environ[SMOKE_DIR] = str(folder)  # before xdist starts its workers: they inherit it
        config.stash[_OWNED] = folder


_REPRODUCTION: list[_Reproduction] = []


def _reproduction() -> _Reproduction:
    if not _REPRODUCTION:
        _REPRODUCTION.append(_Reproduction(Path(os.environ[SMOKE_DIR])))
    return _REPRODUCTION[0]


SLURM_FILE = "test_slurm.py"


def pytest_collection_modifyitems(session, config, items):
    """`make test` runs each test file in one pytest-xdist worker (--dist loadfile); the tests marked
    `slurm` need the cluster's queue to themselves, so they must all be in one file."""
    elsewhere = [item.nodeid for item in items if item.get_closest_marker("slurm") and item.path.name != SLURM_FILE]
    if elsewhere:
        raise pytest.UsageError(f"tests marked slurm outside tests/{SLURM_FILE}: {', '.join(elsewhere)}")


@pytest.hookimpl(specname="pytest_collection_modifyitems", trylast=True)  # after -m / -k deselection
def _smoke_tests_last(session, config, items):
    needing = [item for item in items if "smoke_run" in getattr(item, "fixturenames", ())]
    if not needing or config.option.collectonly:
        return
    ids, files = {id(item) for item in needing}, {item.path for item in needing}
    # their files last (xdist hands out whole files in this order), and within them the tests that wait
    later = [item for item in items if item.path in files]
    items[:] = ([item for item in items if item.path not in files] + [item for item in later if id(item) not in ids]
                + needing)  # stable within each part
    _reproduction().start()


def pytest_unconfigure(config):
    if _is_worker(config):
        return  # the controller stops the shared reproduction once every worker is done
    if (folder := config.stash.get(_OWNED, None)) is not None:
        _reproduction().stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def smoke_run() -> SmokeRun:
    """`attnrepro reproduce profile=smoke` once, into a temp outputs folder (every sweep, the theory
    curves, aggregate, figures, report), started in the background after collection. Tests that
    need a finished smoke run read it; tests that change outputs work on smoke_run.copy(...)."""
    from attnrepro.jobs.grid import expected_jobs, experiments

    reproduction = _reproduction()
    reproduction.start()  # not started at collection (e.g. requested dynamically)
    rc, stdout, stderr = reproduction.wait(timeout=1800)
    assert rc == 0, stdout[-3000:] + stderr[-3000:]
    jobs = {e: expected_jobs(e, "smoke", outputs=str(reproduction.outputs)) for e in experiments()}
    return SmokeRun(reproduction.outputs, stdout, jobs)


# --- a real SLURM cluster, for the tests marked `slurm` --------------------------------------------
#
# scripts/slurm_cluster.sh brings a one-node cluster up on this machine (.ci/run does it around `make
# test`). Without one, every `slurm` test skips, saying why: no sinfo, or sinfo not answering in time.
# Where CI brought a cluster up (.ci/run sets ATTNREPRO_SLURM_REQUIRED=1), one that does not answer fails
# the tests instead: a busy machine must not turn them into silent skips.

SLURM_ANSWER_S = 30.0


def _slurm_unavailable() -> str | None:
    """Why no SLURM cluster answers here (one line), or None when sinfo lists an available partition."""
    hint = "bring one up with `scripts/slurm_cluster.sh install && scripts/slurm_cluster.sh up`"
    if shutil.which("sinfo") is None:
        return f"no SLURM client (sinfo is not on PATH); {hint}"
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%P %a %T"], capture_output=True, text=True,
                              timeout=SLURM_ANSWER_S)
    except subprocess.TimeoutExpired:
        return f"sinfo did not answer within {SLURM_ANSWER_S:g}s (slurmctld down?); {hint}"
    if proc.returncode != 0:
        last = next((ln for ln in reversed(proc.stderr.splitlines()) if ln.strip()), f"exit {proc.returncode}")
        return f"sinfo failed: {last.strip()}; {hint}"
    # "idle*" (a trailing * : not responding), down, drained: no job would start
    usable = [ln for ln in proc.stdout.splitlines()
              if tuple(ln.split()[1:3]) in {("up", s) for s in ("idle", "mixed", "allocated", "completing")}]
    if not usable:
        return f"sinfo shows no partition that is up with a node that responds: {proc.stdout.strip()!r}"
    try:  # the tests time their jobs: jobs already queued would run first and time them out
        queue = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=SLURM_ANSWER_S)
    except subprocess.TimeoutExpired:
        return f"squeue did not answer within {SLURM_ANSWER_S:g}s"
    if queued := queue.stdout.split():
        return (f"the cluster's queue already holds {len(queued)} jobs ({', '.join(queued[:5])}"
                f"{', ...' if len(queued) > 5 else ''}); the slurm tests need an idle cluster: scancel them, "
                f"or `scripts/slurm_cluster.sh clean && scripts/slurm_cluster.sh up`")
    return None


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """A SLURM cluster answers sinfo within SLURM_ANSWER_S seconds with a partition up and a node that
    responds; else the test skips with the reason (checked once per session)."""
    reason = _slurm_unavailable()
    if reason and os.environ.get("ATTNREPRO_SLURM_REQUIRED") == "1":
        pytest.fail(f"CI brought a SLURM cluster up, but: {reason}")
    if reason:
        pytest.skip(f"no SLURM cluster: {reason}")


@pytest.fixture(autouse=True)
def _slurm_marker_needs_a_cluster(request):
    """A test marked `slurm` gets the slurm_cluster check (and skips without a cluster)."""
    if request.node.get_closest_marker("slurm") is not None:
        request.getfixturevalue("slurm_cluster")
