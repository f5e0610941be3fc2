"""The `attnrepro` console entry point: one command per stage, every one taking key=value arguments.

    attnrepro reproduce [profile=quick] [experiments=a,b]   sweeps, theory, tables, figures, report
    attnrepro train [-m] experiment=<name> [key=value ...]  the Hydra app: one job, or -m the grid
    attnrepro theory [profile=quick] [experiments=[a,b]]    the Hydra app of the theory curves
    attnrepro aggregate [profile=quick] [figures=a,b]       records -> tables
    attnrepro figures [figures=a,b]                         tables -> figures, report, claims
    attnrepro new-paper NAME [--dir DIR]                    a new paper's package (entry point: no edit here)

and the commands the papers declare (their COMMANDS, listed below in `attnrepro --help`).
`attnrepro <command> --help` says more.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {"reproduce": "reproduce", "aggregate": "aggregate", "figures": "figures", "new-paper": "new_paper"}
HYDRA_APPS = ("train", "theory")


def paper_commands() -> dict[str, str]:
    """{command: module} of the commands the papers declare (their COMMANDS); a command attnrepro has, or that
    two papers declare, is a PaperContractError."""
    from attnrepro.papers import PaperContractError, packages

    out: dict[str, str] = {}
    owner = dict.fromkeys((*COMMANDS, *HYDRA_APPS), "attnrepro")
    errors = []
    for package in packages():
        for name, module in getattr(package, "COMMANDS", {}).items():
            if name in owner:
                errors.append(f"paper package {package.__name__}: command {name!r} is also {owner[name]}'s "
                              "(docs/adding_a_paper.md)")
                continue
            owner[name], out[name] = package.__name__, f"{package.__name__}.{module}"
    if errors:
        raise PaperContractError("; ".join(errors))
    return out


def _summary(module: str) -> str:
    """The first line of a command module's docstring."""
    return ((importlib.import_module(module).__doc__ or "").strip() or "-").splitlines()[0]


def _help() -> str:
    """The module docstring, then each paper command with the first line of its module's docstring."""
    lines = [f"    attnrepro {name:<45} {_summary(module)}" for name, module in paper_commands().items()]
    return __doc__ + "".join(f"\n{line}" for line in ["The papers' commands:", *lines] if lines)


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
        print(_help())
        return 0
    papers = {} if argv[0] in (*COMMANDS, *HYDRA_APPS) else paper_commands()
    if argv[0] not in (*COMMANDS, *HYDRA_APPS, *papers):
        print(f"attnrepro: unknown command {argv[0]!r}; commands: {', '.join([*COMMANDS, *HYDRA_APPS, *papers])}\n"
              f"{_help()}", file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    if command in HYDRA_APPS:
        from attnrepro.commands import hydra_apps

        return hydra_apps.run(getattr(hydra_apps, command), command, rest)
    from attnrepro.commands.args import UsageError

    name = papers[command] if command in papers else f"attnrepro.commands.{COMMANDS[command]}"
    module = importlib.import_module(name)
    try:
        return module.main(rest)
    except UsageError as e:
        print(f"attnrepro {command}: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        from attnrepro.commands.hydra_apps import os_error

        print(f"attnrepro {command}: {os_error(e)}", file=sys.stderr)
        return 1
