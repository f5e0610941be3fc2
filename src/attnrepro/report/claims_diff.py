"""claims.csv against a reference claims table, claim by claim (matched on the stable claim id).

The quick profile's reference lies in the repo (reference/claims_quick.csv) and is refreshed on
purpose (`attnrepro figures refresh_reference=true`); a paper installed from outside keeps its own
(<package>/reference/claims_<profile>.csv, papers.reference_files), read with attnrepro's. A claim has
changed when its verdict flips or its measured value moves by more than ``rtol`` (relative); claims present
on one side only are listed as added or removed.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from attnrepro.locations import REFERENCE_DIR  # the repository's reference/, or the wheel's copy

# The state evolution's claims are root solves stopped at their tolerance: two runs of the same code (seen:
# on different days, at other thread counts) moved 24 of them by 1e-9 to 9.7e-7 relative (and one
# decomposition claim by 3.8e-5, which stays listed). A move beyond 1e-6 is a change.
RTOL = 1e-6


def reference_path(profile: str) -> Path:
    return REFERENCE_DIR / f"claims_{profile}.csv"


def _relative(a: float, b: float) -> float:
    """|a - b| / max(|a|, |b|)."""
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def _moved(a: float, b: float, rtol: float) -> bool:
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.isfinite(a) != math.isfinite(b)
    return _relative(a, b) > rtol


def compare(claims: pd.DataFrame, reference: pd.DataFrame, rtol: float = RTOL) -> pd.DataFrame:
    """One row per claim that differs: id, change (verdict, value, added, removed), measured,
    reference value, holds, reference holds."""
    now = claims.drop_duplicates("id").set_index("id")  # repeated ids are reported by the figure stage
    ref = reference.drop_duplicates("id").set_index("id")
    rows = []
    for cid in now.index.union(ref.index, sort=False):
        if cid not in ref.index or cid not in now.index:
            side = now if cid in now.index else ref
            rows.append({"id": cid, "change": "added" if cid in now.index else "removed",
                         "measured": side.at[cid, "measured"] if cid in now.index else math.nan,
                         "reference": side.at[cid, "measured"] if cid in ref.index else math.nan,
                         "holds": side.at[cid, "holds"] if cid in now.index else None,
                         "reference_holds": side.at[cid, "holds"] if cid in ref.index else None})
            continue
        m, r = float(now.at[cid, "measured"]), float(ref.at[cid, "measured"])
        h, rh = bool(now.at[cid, "holds"]), bool(ref.at[cid, "holds"])
        change = "verdict" if h != rh else "value" if _moved(m, r, rtol) else ""
        if change:
            rows.append({"id": cid, "change": change, "measured": m, "reference": r, "holds": h,
                         "reference_holds": rh})
    return pd.DataFrame(rows, columns=["id", "change", "measured", "reference", "holds", "reference_holds"])


def relative_moves(diff: pd.DataFrame) -> pd.Series:
    """_relative(measured, reference) of the claims whose value changed, both finite (a
    CPU of another kind rounds L-BFGS's path along paper B's flat valleys otherwise: values move, verdicts stay)."""
    rows = diff[diff["change"] == "value"]
    return pd.Series([_relative(m, r) for m, r in zip(rows["measured"].astype(float), rows["reference"].astype(float))
                      if math.isfinite(m) and math.isfinite(r)], dtype=float)


def reference_paths(profile: str) -> list[Path]:
    """The profile's reference claims tables that exist: attnrepro's, then each installed paper's."""
    from attnrepro.papers import reference_files

    return [p for p in [reference_path(profile)] if p.is_file()] + reference_files(profile)


def _name(path: Path) -> str:
    return str(path.relative_to(REFERENCE_DIR.parent)) if path.is_relative_to(REFERENCE_DIR.parent) else str(path)


def against_reference(claims: pd.DataFrame, profile: str | None,
                      figures: list[str] | None = None) -> tuple[pd.DataFrame | None, str]:
    """(differences, note) of claims against the profile's committed reference (attnrepro's and the installed
    papers', together), restricted to the reference's claims of `figures` when given (a run that drew some
    figures); None when there is none."""
    paths = reference_paths(profile) if profile else []
    if not paths:
        return None, f"no reference claims table for profile {profile!r}" if profile else "profile unknown"
    try:
        reference = pd.concat([pd.read_csv(path) for path in paths], ignore_index=True)
    except (OSError, ValueError) as e:
        return None, f"reference {', '.join(map(str, paths))} unreadable: {e}"
    if figures is not None:
        reference = reference[reference["figure"].isin(figures)]
    diff = compare(claims, reference)
    kinds = diff["change"].value_counts()
    what = ", ".join(f"{kinds[k]} {k}" for k in ("verdict", "value", "added", "removed") if k in kinds)
    moves = relative_moves(diff)
    if len(moves):
        what += f"; values moved by a median {moves.median():.2g} and at most {moves.max():.2g}, relative"
    return diff, (f"against {' and '.join(_name(p) for p in paths)}"
                  + (f" (its claims of {len(figures)} figures)" if figures is not None else "")
                  + f": {len(diff)} claims differ{f' ({what})' if what else ''}; "
                  f"{len(claims)} claims in this run, {len(reference)} in the reference")
