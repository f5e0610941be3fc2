"""A claim a figure tests: the measured value, its uncertainty and whether it holds."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

NOT_ENOUGH = "not enough data"


@dataclass(frozen=True)
class Claim:
    """One row of a figure's claims table (and of claims.csv)."""

    figure: str
    claim: str
    measured: float
    uncertainty: str
    holds: bool
    detail: str = ""

    def row(self) -> dict:
        return asdict(self)


def judge(figure: str, claim: str, measured: float, passes: Callable[[float], bool],
          uncertainty: str = "", detail: str = "", tested: float | None = None) -> Claim:
    """The claim with holds = passes(tested) (tested defaults to measured).

    A non-finite measured or tested value never holds: its detail says "not enough data".
    """
    value = measured if tested is None else tested
    if not (_finite(measured) and _finite(value)):
        return Claim(figure, claim, _float(measured), uncertainty, False,
                     f"{NOT_ENOUGH}; {detail}" if detail else NOT_ENOUGH)
    return Claim(figure, claim, float(measured), uncertainty, bool(passes(float(value))), detail)


def fmt(x: float, digits: int = 3) -> str:
    """A number for a table or caption: 3 significant digits, 'nan' when missing, '0' below 1e-12."""
    if not _finite(x):
        return "nan"
    return "0" if abs(float(x)) < 1e-12 else f"{float(x):.{digits}g}"


def interval(lo: float, hi: float, what: str = "95% CI") -> str:
    return f"{what} [{fmt(lo)}, {fmt(hi)}]"


def _float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def _finite(x) -> bool:
    return math.isfinite(_float(x))
