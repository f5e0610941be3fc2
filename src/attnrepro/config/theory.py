"""Schema of `attnrepro theory` (conf/theory.yaml): the shared fields (TheoryBase: the profile, the paths,
which experiments get theory curves, how many workers) and, beside them at the top level, the fields of every
paper's theory settings (the dataclass SETTINGS of the module its THEORY_SETTINGS names; paper B's:
papers/tied_attention/theory_settings.py). A curve's record key hashes the settings its TheoryCurve.settings
returns (jobs/theory.py)."""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from typing import Any, List, Optional


@dataclass
class TheoryBase:
    profile: Any = None
    paths: Any = None
    experiments: Optional[List[str]] = None  # null: every experiment that has theory curves
    workers: int = 2                         # theory jobs computed at once (processes, one thread each)


@functools.lru_cache(maxsize=None)
def _schema(settings: tuple[tuple[str, type], ...]) -> type:
    """TheoryBase's fields, then each (owner, dataclass)'s, as one dataclass; a field name declared twice is a
    PaperContractError (Hydra would keep one of them silently)."""
    from attnrepro.papers import PaperContractError

    owners: dict[str, list[str]] = {}
    fields = []
    for owner, cls in ((__name__, TheoryBase), *settings):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            owners.setdefault(f.name, []).append(owner)
            fields.append((f.name, hints[f.name], field(default=f.default, default_factory=f.default_factory)))
    clashes = {name: where for name, where in owners.items() if len(where) > 1}
    if clashes:
        raise PaperContractError("; ".join(
            f"paper theory settings module {where[-1]}: conf/theory.yaml's {name!r} is also declared by "
            f"{' and '.join(where[:-1])} (docs/adding_a_paper.md)" for name, where in clashes.items()))
    schema = dataclasses.make_dataclass("TheoryConfig", fields)
    schema.__module__ = __name__  # pickled by reference (a theory worker, a SLURM task): module __getattr__ below
    schema.__doc__ = "conf/theory.yaml: TheoryBase's fields and every paper's theory settings (theory_config)."
    return schema


def theory_config() -> type:
    """The schema of conf/theory.yaml (stored as `theory_schema`): TheoryBase's fields and the fields of every
    paper's theory settings (papers.theory_settings_modules), the same class while the papers stay the same."""
    from attnrepro.papers import theory_settings_modules

    return _schema(tuple((m.__name__, m.SETTINGS) for m in theory_settings_modules()))


def __getattr__(name: str):
    if name == "TheoryConfig":  # built on use, not at import (the papers' modules import attnrepro.config)
        return theory_config()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
