"""Plot helpers shared by the figure specs (matplotlib with the Agg backend, seaborn styling)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.colors import Normalize  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from attnrepro.report.claims import fmt  # noqa: E402
from attnrepro.stats.fits import PowerLaw  # noqa: E402
from attnrepro.stats.summaries import CrossingSummary  # noqa: E402

sns.set_theme(context="paper", style="whitegrid")
PANEL = (4.4, 3.5)


def panels(n: int, title: str = "") -> tuple[Figure, list[plt.Axes]]:
    fig, axes = plt.subplots(1, n, figsize=(PANEL[0] * n, PANEL[1]), squeeze=False, layout="constrained")
    if title:
        fig.suptitle(title)
    return fig, list(axes[0])


def placeholder(title: str, message: str) -> Figure:
    fig, (ax,) = panels(1, title)
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return fig


def no_data(ax: plt.Axes, message: str = "not enough data") -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="0.4")


def _edges(centres: np.ndarray) -> np.ndarray:
    """Cell edges around sorted positive centres: geometric midpoints, half a step beyond the ends."""
    c = np.log(np.asarray(centres, dtype=float))
    if c.size == 1:
        return np.exp(np.array([c[0] - 0.25, c[0] + 0.25]))
    mid = (c[1:] + c[:-1]) / 2
    return np.exp(np.concatenate([[c[0] - (mid[0] - c[0])], mid, [c[-1] + (c[-1] - mid[-1])]]))


def column_heatmap(ax: plt.Axes, df: pd.DataFrame, x: str, y: str, value: str,
                   cmap: str = "viridis", annotate: bool = True) -> matplotlib.cm.ScalarMappable:
    """A heatmap on log-log axes whose y grid may differ per x column: one rectangle per (x, y)
    point, spanning the geometric midpoints to its neighbours, coloured by value in [0, 1]."""
    norm, cm = Normalize(0, 1), plt.get_cmap(cmap)
    xs = np.sort(df[x].unique())
    xe = _edges(xs)
    for i, xv in enumerate(xs):
        col = df[df[x] == xv].sort_values(y)
        ye = _edges(col[y].to_numpy())
        for j, (yv, v) in enumerate(zip(col[y], col[value], strict=True)):
            ax.add_patch(Rectangle((xe[i], ye[j]), xe[i + 1] - xe[i], ye[j + 1] - ye[j],
                                   facecolor=cm(norm(v)), edgecolor="white", linewidth=0.5))
            if annotate:
                ax.text(np.sqrt(xe[i] * xe[i + 1]), yv, f"{v:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if v < 0.6 else "black")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    if len(xs):
        ax.set_xlim(xe[0], xe[-1])
        ys = df[y].to_numpy(dtype=float)
        ax.set_ylim(ys.min() / 1.5, ys.max() * 1.5)
    ax.grid(False)
    return matplotlib.cm.ScalarMappable(norm=norm, cmap=cm)


def fit_label(name: str, fit: PowerLaw, lo: float, hi: float, symbol: str = "slope") -> str:
    return f"{name}: {symbol} {fmt(fit.slope)} [{fmt(lo)}, {fmt(hi)}]"


def crossing_points(ax: plt.Axes, c: CrossingSummary, label: str, color, marker: str = "o") -> None:
    """x*(g) with its bootstrap 95% CI as error bars; censored points (upper bounds) drawn hollow."""
    lo, hi = c.lo, c.hi
    y = c.point
    ok = np.isfinite(y)
    if not ok.any():
        return
    err = np.vstack([np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)])
    err = np.where(np.isfinite(err), err, 0)
    ax.errorbar(c.groups[ok], y[ok], yerr=err[:, ok], fmt="none", ecolor=color, capsize=2, lw=1)
    for cens in (False, True):
        sel = ok & (c.censored == cens)
        if sel.any():
            ax.plot(c.groups[sel], y[sel], marker, color=color, mfc="none" if cens else color, label=label)
            label = None


def fit_line(ax: plt.Axes, xs: np.ndarray, fit: PowerLaw, label: str, color, ls: str = "-",
             transform=lambda x: x) -> None:
    """The fitted law over the span of xs (fit evaluated at transform(x))."""
    if not np.isfinite(fit.slope) or len(xs) < 2:
        return
    grid = np.geomspace(min(xs), max(xs), 64)
    ax.plot(grid, fit(transform(grid)), ls=ls, color=color, lw=1, label=label)


def loglog(ax: plt.Axes, xlabel: str, ylabel: str, base: int = 2) -> None:
    ax.set_xscale("log", base=base)
    ax.set_yscale("log", base=base)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def palette(n: int) -> list:
    return sns.color_palette("colorblind", max(n, 1))


def save(fig: Figure, folder: Path, stem: str) -> list[Path]:
    """Write <folder>/<stem>.png and .pdf, each atomically (records.atomic_write)."""
    from attnrepro.jobs.records import atomic_write

    paths = [folder / f"{stem}.png", folder / f"{stem}.pdf"]
    for p in paths:
        atomic_write(p, lambda f, fmt=p.suffix[1:]: fig.savefig(f, format=fmt, dpi=150), binary=True)
    return paths


def close(figs: Sequence[Figure]) -> None:
    for f in figs:
        plt.close(f)
