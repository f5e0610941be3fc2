"""The `attnrepro` console entry point: one command per stage, every one taking key=value arguments.

    attnrepro reproduce [profile=quick] [experiments=a,b]   sweeps, theory, tables, figures, report
    attnrepro train [-m] experiment=<name> [key=value ...]  the Hydra app: one job, or -m the grid
    attnrepro theory [profile=quick] [experiments=[a,b]]    the Hydra app of the theory curves
    attnrepro aggregate [profile=quick] [figures=a,b]       records -> tables
    attnrepro figures [figures=a,b]                         tables -> figures, report, claims
    attnrepro compare-theory outputs=DIR                    the state evolution against any sweep
    attnrepro new-paper NAME [--dir DIR]                    a new paper's package (entry point: no edit here)

`attnrepro <command> --help` says more.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {"reproduce": "reproduce", "aggregate": "aggregate", "figures": "figures",
            "compare-theory": "compare_theory", "new-paper": "new_paper"}
HYDRA_APPS = ("train", "theory")


def main(argv: list[str] | None = None) -> int:
    from attnrepro.papers import PaperContractError

    try:
        return _main(argv)
    except PaperContractError as e:  # a paper package (in-tree or installed) that breaks the contract: one line
        print(f"attnrepro: {e}", file=sys.stderr)
        return 1


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv[0] not in (*COMMANDS, *HYDRA_APPS):
        print(f"attnrepro: unknown command {argv[0]!r}; commands: {', '.join([*COMMANDS, *HYDRA_APPS])}\n{__doc__}",
              file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    if command in HYDRA_APPS:
        from attnrepro.commands import hydra_apps

        return hydra_apps.run(getattr(hydra_apps, command), command, rest)
    from attnrepro.commands.args import UsageError

    module = importlib.import_module(f"attnrepro.commands.{COMMANDS[command]}")
    try:
        return module.main(rest)
    except UsageError as e:
        print(f"attnrepro {command}: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        from attnrepro.commands.hydra_apps import os_error

        print(f"attnrepro {command}: {os_error(e)}", file=sys.stderr)
        return 1
