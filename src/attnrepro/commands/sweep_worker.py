"""The sweep worker of `attnrepro reproduce`: one process that runs the sweeps it is sent, one after the
other, in itself, so that torch, Lightning and Hydra load once per worker instead of once per sweep
(about 7 s of a core each on a 2-core machine, against well under a second for a smoke sweep's jobs).

    python -m attnrepro.commands.sweep_worker

Reads one JSON list per line on stdin, the arguments of `attnrepro train` (`-m experiment=... ...`), runs
that Hydra app in this process, and after each sweep prints DONE and its exit status on a line of its own.
"""

from __future__ import annotations

import json
import sys
import traceback

DONE = "@@attnrepro-sweep-done"


def run_one(argv: list[str]) -> int:
    """`attnrepro train <argv>` in this process; its exit status (Hydra exits 1 on a config error)."""
    from attnrepro.commands import hydra_apps

    try:
        return hydra_apps.run(hydra_apps.train, "train", argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else int(e.code is not None)
    except Exception:  # a broken sweep must not take the next ones down
        traceback.print_exc()
        return 1


def main() -> int:
    for line in sys.stdin:
        if line.strip():
            rc = run_one(json.loads(line))
            sys.stderr.flush()
            print(f"{DONE} {rc}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
