"""attnrepro new-paper NAME [--dir DIR]: write a minimal, working, pip-installable paper package.

    attnrepro new-paper my_paper               ./my_paper/
    attnrepro new-paper my_paper --dir ~/src   ~/src/my_paper/

The package (DIR/NAME/: pyproject.toml, src/NAME/) registers itself with attnrepro through the entry point
group `attnrepro.papers`, so nothing in attnrepro is edited: ridge regression in plain torch (y = X w0 +
noise, every seed a replica), its config schemas, Hydra options and one experiment (NAME_error_vs_alpha,
smoke/quick/paper grids) in src/NAME/conf/, a theory curve (the asymptotic test error), one figure with one
claim (training reaches the closed form), and its numerical tests (src/NAME/tests/). Then:

    pip install -e DIR/NAME
    attnrepro reproduce profile=smoke experiments=NAME_error_vs_alpha
    pytest DIR/NAME

NAME: a lower-case Python identifier (letters, digits, underscores; 2 to 40 characters) that no installed
module or attnrepro paper already uses. An existing DIR/NAME is refused. docs/adding_a_paper.md.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
from pathlib import Path

from attnrepro.commands.args import UsageError

TEMPLATE = Path(__file__).resolve().parents[1] / "scaffold" / "paper"
NAME = re.compile(r"^[a-z][a-z0-9_]{1,39}$")


def check_name(name: str) -> None:
    from attnrepro.papers import PACKAGES

    if not NAME.match(name) or name.endswith("_") or "__" in name:
        raise UsageError(f"bad paper name {name!r}: use a lower-case Python identifier of 2 to 40 letters, "
                         "digits and single underscores, starting with a letter (e.g. my_paper)")
    if keyword.iskeyword(name) or name in PACKAGES or name == "attnrepro":
        raise UsageError(f"bad paper name {name!r}: it is a Python keyword or attnrepro's own name")
    try:
        taken = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        taken = True
    if taken:
        raise UsageError(f"bad paper name {name!r}: a module of that name is already importable here "
                         "(pick another name, or uninstall it)")


def files(name: str) -> dict[str, str]:
    """{path relative to the package folder: text} of the scaffold for this name."""
    camel = "".join(part.capitalize() for part in name.split("_"))
    values = {"{{name}}": name, "{{Name}}": camel, "{{dist}}": name.replace("_", "-")}

    def fill(text: str) -> str:
        for key, value in values.items():
            text = text.replace(key, value)
        return text

    return {fill(str(p.relative_to(TEMPLATE)).removesuffix(".tmpl")): fill(p.read_text())
            for p in sorted(TEMPLATE.rglob("*.tmpl"))}


def write(name: str, folder: Path) -> Path:
    """Write the scaffold of paper `name` to folder/name (UsageError when it exists or the name is bad)."""
    check_name(name)
    target = Path(folder).expanduser() / name
    if target.exists():
        raise UsageError(f"{target} exists: the scaffold is written to a new folder only (choose --dir or NAME)")
    for rel, text in files(name).items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return target


def main(argv: list[str]) -> int:
    if not argv or any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    names, folder, rest = [], ".", list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--dir":
            if not rest:
                raise UsageError("--dir needs a folder: attnrepro new-paper NAME --dir DIR")
            folder = rest.pop(0)
        elif arg.startswith("--dir="):
            folder = arg.split("=", 1)[1]
        elif arg.startswith("-"):
            raise UsageError(f"unknown option {arg!r}; usage: attnrepro new-paper NAME [--dir DIR]")
        else:
            names.append(arg)
    if len(names) != 1:
        raise UsageError(f"expected one NAME, got {len(names)}; usage: attnrepro new-paper NAME [--dir DIR]")
    target = write(names[0], Path(folder))
    print(f"wrote {target} ({len(files(names[0]))} files), a paper registered through the entry point group "
          f"attnrepro.papers. Next:\n  pip install -e {target}\n"
          f"  attnrepro reproduce profile=smoke experiments={names[0]}_error_vs_alpha\n  pytest {target}")
    return 0
