"""The one generic path from records to a figure, and the registry of figure specs.

A figure is a small spec: the experiments it reads (sources), a caption, and up to four
functions -- table(data) builds the tidy table behind it from the sources' frames;
estimates(table), when the figure has any, computes the numbers its plot and claims share
(bootstrap intervals, fitted laws, crossings: a tidy frame, see stats.estimates) once;
plot(table, estimates) draws it and claims(table, estimates) tests the paper's claims on it
(estimates is None for a figure without). Aggregation calls only ``table``; the figure stage
reads the saved table, computes the estimates, saves them beside it and calls ``plot`` and
``claims``. Each paper package names its figure modules (papers.figure_modules), each of which
registers its spec on import.
"""

from __future__ import annotations

import importlib
import traceback
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

import pandas as pd
from matplotlib.figure import Figure

from attnrepro.report.claims import Claim, id_errors
from attnrepro.report.tables import ExperimentData

Estimates = Optional[pd.DataFrame]


@dataclass(frozen=True)
class FigureSpec:
    name: str
    sources: tuple[str, ...]
    caption: str
    table: Callable[[Mapping[str, ExperimentData]], pd.DataFrame]
    plot: Callable[[pd.DataFrame, Estimates], Figure]
    claims: Callable[[pd.DataFrame, Estimates], list[Claim]]
    estimates: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    theory_alone: bool = False  # its estimates, plot and claims stand on theory rows without simulation rows

    def estimate(self, table: pd.DataFrame) -> Estimates:
        """The figure's estimates on the table (None when it has none)."""
        return self.estimates(table) if self.estimates is not None else None


REGISTRY: dict[str, FigureSpec] = {}


def register(spec: FigureSpec) -> FigureSpec:
    if spec.name in REGISTRY and REGISTRY[spec.name] is not spec:
        raise ValueError(f"figure {spec.name!r} registered twice")
    REGISTRY[spec.name] = spec
    return spec


def specs(names: Sequence[str] | None = None) -> list[FigureSpec]:
    """The registered specs (all, or those named, in the given order); unknown names raise."""
    from attnrepro.papers import figure_modules

    for module in figure_modules():
        importlib.import_module(module)
    if not names:
        return list(REGISTRY.values())
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise KeyError(f"unknown figure(s) {unknown}; known: {sorted(REGISTRY)}")
    return [REGISTRY[n] for n in names]


def error_text(e: BaseException) -> str:
    return "".join(traceback.format_exception(type(e), e, e.__traceback__, limit=6))


@dataclass
class Rendered:
    """A spec drawn from its table: the figure, its estimates and claims, and the error text of
    any step that failed."""

    spec: FigureSpec
    figure: Figure | None
    estimates: Estimates = None
    claims: list[Claim] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def render(spec: FigureSpec, table: pd.DataFrame | None) -> Rendered:
    """estimates, plot and claims of a spec on its table; an empty or absent table, or one with theory
    rows and no simulation row (every job of its sweeps failed or not run) unless the spec is
    ``theory_alone``, gives a placeholder figure and the claims' 'not enough data' rows. A failing step is
    reported, not raised (failing estimates leave a placeholder and no claims); so are missing, foreign or
    duplicate claim ids."""
    from attnrepro.report.plotting import placeholder
    from attnrepro.report.series import SIMULATION, SOURCE

    out, empty = Rendered(spec, None), "no data: run the sweep"
    if (table is not None and SOURCE in table and not table.empty and not (table[SOURCE] == SIMULATION).any()
            and not spec.theory_alone):
        table, empty = None, "no simulation record (theory only): run the sweep"
    if table is None:
        try:
            table = spec.table({})  # the empty table, with the spec's columns
        except Exception:
            table = pd.DataFrame()
    try:
        out.estimates = spec.estimate(table)
    except Exception as e:
        out.errors.append(f"estimates: {error_text(e)}")
        out.figure = placeholder(spec.name, f"estimates failed: {type(e).__name__}")
        return out
    try:
        out.figure = (spec.plot(table, out.estimates) if not table.empty
                      else placeholder(spec.name, empty))
    except Exception as e:
        out.errors.append(f"plot: {error_text(e)}")
        out.figure = placeholder(spec.name, f"plot failed: {type(e).__name__}")
    try:
        out.claims = list(spec.claims(table, out.estimates))
    except Exception as e:
        out.errors.append(f"claims: {error_text(e)}")
    out.errors += [f"claims: {e}" for e in id_errors(spec.name, out.claims)]
    return out
