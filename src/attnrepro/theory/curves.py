"""The theory curves of the paper-B figures: what each computes, and for which grid points.

A curve belongs to experiments; for every distinct parameter point of an experiment's grid
(the config values at ``keys``) ``params`` says which parameters the curve needs (None: the
point has no such curve), ``extra`` adds points of its own (settings), and ``compute`` returns
the curve's rows as columns. pipelines/theory.py runs them (runs.theory_runs), caching each
(curve, params, settings) as a record; the figures read them as rows with source = "theory".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from .bayes_optimal import PriorCurve
from .interpolation import bayes_perfect_recovery, interpolation_threshold
from .spectral_laws import MarchenkoPastur, target_law

Columns = dict[str, list]


@dataclass(frozen=True)
class TheoryCurve:
    name: str
    experiments: tuple[str, ...]
    keys: tuple[str, ...]
    params: Callable[[Mapping], dict | None]
    compute: Callable[[dict, object], Columns]
    settings: Callable[[object], dict] = lambda s: {"nodes": s.nodes}
    extra: Callable[[object], list[dict]] = lambda s: []
    sweep: str | None = None  # a key whose values along the grid are gathered into one job (a list)
    include: Callable[[dict, object], bool] = lambda params, settings: True  # False: the settings leave it out


TASK = ("task.target", "task.d", "task.kappa0", "task.gamma", "task.T", "task.Delta")


def law_of(params: Mapping):
    """mu0 of the point's target (Wishart: its d -> infinity law; power law: at the point's d)."""
    return target_law(params["task.target"], params.get("task.d"), params.get("task.kappa0", 0.5),
                      params.get("task.gamma", 1.0))


def _target_params(point: Mapping) -> dict:
    keep = {"task.target": point["task.target"]}
    if point["task.target"] == "wishart":
        keep["task.kappa0"] = point["task.kappa0"]
    else:
        keep.update({"task.d": point["task.d"], "task.gamma": point["task.gamma"]})
    return keep


# ---------------------------------------------------------------- interpolation threshold

def _interp_params(point: Mapping) -> dict | None:
    if not point["task.Delta"] > 0 or point["task.target"] == "explicit":
        return None
    return {**_target_params(point), "task.T": point["task.T"], "task.Delta": point["task.Delta"],
            "model.kappa": point["model.kappa"]}


def _interp_compute(params: dict, settings) -> Columns:
    r = interpolation_threshold(law_of(params), int(params["task.T"]), float(params["task.Delta"]))
    return {"alpha_interp": [r.alpha], "delta_bar": [r.delta], "rank": [r.rank],
            "valid": [bool(params["model.kappa"] >= r.rank)], "residual": [r.residual]}


INTERPOLATION = TheoryCurve(
    name="interpolation_threshold", experiments=("tied_error_vs_alpha", "tied_interpolation_peak"),
    keys=(*TASK, "model.kappa"), params=_interp_params, compute=_interp_compute)


# ---------------------------------------------------------------- Bayes-optimal MMSE

@functools.lru_cache(maxsize=16)
def prior_curve(kappa0: float, nodes: int) -> PriorCurve:
    return PriorCurve.tabulate(MarchenkoPastur(kappa0), nodes=nodes)


def _bayes_params(point: Mapping) -> dict | None:
    if point["task.Delta"] != 0 or point["task.target"] != "wishart":
        return None
    return {"task.kappa0": point["task.kappa0"], "task.T": point["task.T"]}


def _bayes_extra(settings) -> list[dict]:
    return [{"task.kappa0": k, "task.T": t} for k in settings.bayes.kappa0 for t in settings.bayes.T]


def _bayes_settings(settings) -> dict:
    return {"nodes": settings.nodes, "alpha_max": settings.bayes.alpha_max, "points": settings.bayes.points}


def _bayes_compute(params: dict, settings) -> Columns:
    k0, T = float(params["task.kappa0"]), int(params["task.T"])
    curve = prior_curve(k0, settings.nodes)
    alpha = np.linspace(0.0, settings.bayes.alpha_max, settings.bayes.points)
    law = MarchenkoPastur(k0)
    n = alpha.size
    return {"task.alpha": alpha.tolist(), "mmse": curve.mmse(alpha, T).tolist(),
            "alpha_pr": [bayes_perfect_recovery(k0, T)] * n, "alpha_pr_table": [curve.perfect_recovery(T)] * n,
            "prior_variance": [law.Q0 - law.moment(1) ** 2] * n}


BAYES = TheoryCurve(
    name="bayes_mmse", experiments=("tied_error_vs_alpha",), keys=TASK, params=_bayes_params,
    compute=_bayes_compute, settings=_bayes_settings, extra=_bayes_extra)


# ---------------------------------------------------------------- ERM state evolution

def _se_params(point: Mapping) -> dict | None:
    """Factorized seq2lab points (lambda >= state_evolution.min_lambda: checked in compute, which knows
    the settings)."""
    if point["task.target"] == "explicit" or point["task.output"] != "seq2lab" or point["model.param"] != "factorized":
        return None
    return {**_target_params(point), **{k: point[k] for k in ("task.T", "task.Delta", "task.beta0", "model.kappa",
                                                              "model.beta", "model.lam", "task.alpha")}}


def _se_settings(settings) -> dict:
    se = settings.state_evolution
    return {**{k: se[k] for k in se if k != "samples"}, "samples": _samples(settings)}


def _samples(settings) -> int:
    table = settings.state_evolution.samples
    return int(table.get(settings.profile.name, max(table.values())))


def _se_compute(params: dict, settings) -> Columns:
    """The fixed point at every alpha of the job (ascending, each warm-started from the previous
    converged one); a point that fails is a row with converged = False and its reason."""
    import time

    from .output_channel import OutputChannel
    from .state_evolution import NotConverged, solve_continued

    se = settings.state_evolution
    law = law_of(params)
    channel = OutputChannel(int(params["task.T"]), law.Q0, float(params["task.Delta"]), float(params["model.beta"]),
                            float(params["task.beta0"]), samples=_samples(settings), seed=se.seed)
    rows, init = [], None
    for alpha in sorted(params["task.alpha"]):
        t0 = time.perf_counter()
        try:
            p = solve_continued(law, channel, float(alpha), float(params["model.lam"]), float(params["model.kappa"]),
                                init=init, damping=se.damping, tol=se.tol, max_iter=se.max_iter, nodes=se.nodes)
            row, reason = p.row(), ""
            init = (p.Sigma, p.m, p.q) if p.q > 0 else None
        except (NotConverged, ValueError, FloatingPointError, RuntimeError) as e:
            row, reason = {"alpha": float(alpha)}, f"{type(e).__name__}: {e}"
        row.update(converged=not reason, reason=reason, seconds=time.perf_counter() - t0)
        rows.append(row)
        print(f"    alpha = {alpha:g}: " + (f"converged in {row['iterations']} iterations" if not reason
                                           else f"FAILED ({reason})") + f", {row['seconds']:.1f}s", flush=True)
    columns = sorted({k for r in rows for k in r})
    out = {k: [r.get(k, float("nan")) for r in rows] for k in columns}
    out["task.alpha"] = out.pop("alpha")
    out.pop("lam", None)
    return out


STATE_EVOLUTION = TheoryCurve(
    name="erm_state_evolution", experiments=("tied_error_vs_alpha", "tied_interpolation_peak", "tied_spectra"),
    keys=(*TASK, "task.beta0", "task.output", "task.alpha", "model.param", "model.kappa", "model.beta", "model.lam"),
    params=_se_params, compute=_se_compute, settings=_se_settings, sweep="task.alpha",
    include=lambda p, s: p["model.lam"] >= s.state_evolution.min_lambda)


CURVES: tuple[TheoryCurve, ...] = (INTERPOLATION, BAYES, STATE_EVOLUTION)


def curves_of(experiment: str) -> list[TheoryCurve]:
    return [c for c in CURVES if experiment in c.experiments]


def theory_experiments() -> list[str]:
    return sorted({e for c in CURVES for e in c.experiments})

