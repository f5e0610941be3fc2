"""A claim a figure tests: the measured value, its uncertainty and whether it holds.

Every claim has an id, ``<figure>/<key>``, stable between runs of the same profile: the key names
the claim's family and, where a figure makes one claim per panel, the panel's parameters
(:func:`claim_key`), never a measured value.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from dataclasses import asdict, dataclass, fields
from typing import Callable, Sequence

NOT_ENOUGH = "not enough data"


@dataclass(frozen=True)
class Claim:
    """One row of a figure's claims table (and of claims.csv)."""

    id: str
    figure: str
    claim: str
    measured: float
    uncertainty: str
    holds: bool
    detail: str = ""

    def row(self) -> dict:
        return asdict(self)


COLUMNS = [f.name for f in fields(Claim)]  # of claims.csv, the id first


def claim_key(family: str, **params) -> str:
    """'family' or 'family/name=value,...': a claim's key from its family and panel parameters."""
    if not params:
        return family
    return f"{family}/" + ",".join(f"{k}={v:g}" if isinstance(v, numbers.Real) else f"{k}={v}"
                                   for k, v in params.items())


def judge(figure: str, claim: str, measured: float, passes: Callable[[float], bool],
          uncertainty: str = "", detail: str = "", tested: float | None = None, *, key: str = "") -> Claim:
    """The claim with holds = passes(tested) (tested defaults to measured) and id <figure>/<key>.

    A non-finite measured or tested value never holds: its detail says "not enough data".
    A claim without a key has an empty id, which the figure stage reports (id_errors).
    """
    ident = f"{figure}/{key}" if key else ""
    value = measured if tested is None else tested
    if not (_finite(measured) and _finite(value)):
        return Claim(ident, figure, claim, _float(measured), uncertainty, False,
                     f"{NOT_ENOUGH}; {detail}" if detail else NOT_ENOUGH)
    return Claim(ident, figure, claim, float(measured), uncertainty, bool(passes(float(value))), detail)


def id_errors(figure: str, claims: Sequence[Claim]) -> list[str]:
    """What is wrong with the ids of one figure's claims: missing, not under '<figure>/', repeated."""
    errors = []
    missing = [c.claim for c in claims if not c.id]
    if missing:
        errors.append(f"{len(missing)} claim(s) without an id, e.g. {missing[0]!r}")
    foreign = sorted({c.id for c in claims if c.id and not c.id.startswith(f"{figure}/")})
    if foreign:
        errors.append(f"claim ids not under {figure}/: {foreign}")
    repeated = sorted(i for i, n in Counter(c.id for c in claims if c.id).items() if n > 1)
    if repeated:
        errors.append(f"duplicate claim ids: {repeated}")
    return errors


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
