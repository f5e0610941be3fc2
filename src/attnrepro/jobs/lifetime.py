"""Process lifetime: workers that die with their parent, and one `reproduce` per outputs folder.

die_with_parent() asks Linux to send this process SIGTERM when its parent dies (prctl
PR_SET_PDEATHSIG; elsewhere it does nothing), so that `kill -9` of `make reproduce-figures` takes
`reproduce`, its sweep workers and its theory workers with it. `nohup attnrepro reproduce ... &` is
meant to outlive its shell: under nohup (SIGHUP ignored) `reproduce` itself does not die with its
parent, its workers still die with it. OutputsLock is an exclusive flock on
<outputs>/.reproduce.lock, held by `reproduce` and inherited by its sweep workers: the kernel releases
it when the last of them exits (even by kill -9), so a second `reproduce` on the same folder never
races a running one, or its orphans.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Have the kernel send `sig` to this process when its parent exits; True where it could (Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def meant_to_outlive_its_shell() -> bool:
    """Whether this process was started to survive its parent (nohup: SIGHUP ignored)."""
    return signal.getsignal(signal.SIGHUP) is signal.SIG_IGN


class Busy(RuntimeError):
    """Another process holds the outputs folder's lock; the message names it."""


class OutputsLock:
    """Exclusive lock of an outputs folder for one `reproduce` (module docstring). ``fd`` is passed to the
    workers (subprocess pass_fds) so that the lock lasts as long as any of them."""

    def __init__(self, outputs: str | Path):
        self.path = Path(outputs) / ".reproduce.lock"
        self.fd: int | None = None

    def acquire(self) -> "OutputsLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "a process that did not say who it is"
            os.close(fd)
            raise Busy(f"{self.path.parent} is in use by {holder}; wait for it to finish, or stop it "
                       "(its sweep workers hold the lock too)") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"attnrepro reproduce, pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}: "
                     f"{' '.join(sys.argv)}".encode())
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # the lock goes when the workers holding a copy have exited too
            self.fd = None

    def __enter__(self) -> "OutputsLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
