"""One style of arguments for every stage: key=value, as Hydra takes them (lists as a,b or [a,b])."""

from __future__ import annotations

import os
import sys
from typing import Any


class UsageError(ValueError):
    """A command line the command cannot run: the message says why and what it accepts."""


def default_outputs() -> str:
    return os.environ.get("ATTNREPRO_OUTPUTS", "outputs")


def _value(text: str, default: Any) -> Any:
    if isinstance(default, bool):
        if text.lower() not in ("true", "false"):
            raise UsageError(f"expected true or false, got {text!r}")
        return text.lower() == "true"
    if isinstance(default, list) or default is None and text.startswith("["):
        return [v.strip() for v in text.strip("[]").split(",") if v.strip()]
    return text


def parse(argv: list[str], defaults: dict[str, Any], doc: str) -> dict[str, Any]:
    """{key: value} of `key=value` arguments over defaults; -h/--help prints doc and exits; an unknown
    key or a bare word is a UsageError naming the keys the command takes."""
    if any(a in ("-h", "--help") for a in argv):
        print(doc)
        sys.exit(0)
    out = dict(defaults)
    for arg in argv:
        key, sep, text = arg.partition("=")
        if not sep or key not in defaults:
            raise UsageError(f"unknown argument {arg!r}; this command takes {', '.join(f'{k}=...' for k in defaults)}")
        out[key] = _value(text, defaults[key])
    return out


def worker_count(text: str) -> int:
    """A `workers=` argument as a whole number >= 1; a UsageError otherwise."""
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"workers must be a whole number >= 1, got {text!r}")
    return int(text)
