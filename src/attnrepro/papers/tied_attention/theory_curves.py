"""The theory curves of the paper-B figures: what each computes, and for which grid points.

A curve belongs to experiments; for every distinct parameter point of an experiment's grid
(the config values at ``keys``) ``params`` says which parameters the curve needs (None: the
point has no such curve), ``extra`` adds points of its own (settings), and ``compute`` returns
the curve's rows as columns. pipelines/theory.py runs them (jobs.theory), caching each
(curve, params, settings) as a record; the figures read them as rows with source = "theory".
"""

from __future__ import annotations

import functools
from typing import Mapping

import numpy as np

from attnrepro.jobs.theory import Columns, TheoryCurve
from attnrepro.theory.bayes_optimal import PriorCurve
from attnrepro.theory.interpolation import bayes_perfect_recovery, interpolation_threshold
from attnrepro.theory.spectral_laws import MarchenkoPastur, target_law

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
    """kappa None: a student of any rank (the exact-fit test), always valid."""
    r = interpolation_threshold(law_of(params), int(params["task.T"]), float(params["task.Delta"]))
    kappa = params["model.kappa"]
    return {"alpha_interp": [r.alpha], "delta_bar": [r.delta], "rank": [r.rank],
            "valid": [bool(kappa is None or kappa >= r.rank)], "residual": [r.residual]}


INTERPOLATION = TheoryCurve(
    name="interpolation_threshold",
    experiments=("tied_error_vs_alpha", "tied_interpolation_peak", "tied_interpolation_threshold"),
    keys=(*TASK, "model.kappa"), params=_interp_params, compute=_interp_compute)


# ---------------------------------------------------------------- the exact-fit test's smallest residual

def _exact_fit_params(point: Mapping) -> dict | None:
    if point["task.target"] == "explicit":
        return None
    return {**_target_params(point), "task.T": point["task.T"], "task.Delta": point["task.Delta"],
            "task.alpha": point["task.alpha"]}


def _exact_fit_compute(params: dict, settings) -> Columns:
    """The logit-difference channel's state evolution at lambda -> 0+ (a student of any rank): 0 below
    alpha_interp, above it the smallest residual per sample (train_loss) and the rank of S."""
    from attnrepro.theory.output_channel import LogitDifferenceChannel
    from attnrepro.theory.state_evolution import state_evolution_curve

    law, T, Delta = law_of(params), int(params["task.T"]), float(params["task.Delta"])
    rows = state_evolution_curve(law, LogitDifferenceChannel(T, law.Q0, Delta), params["task.alpha"], 0.0, 1.0, T,
                                 Delta, tol=settings.state_evolution.tol, nodes=settings.state_evolution.nodes)
    keep = ("alpha", "train_loss", "rank", "estimation_error", "delta", "eps", "method", "converged", "reason")
    out = {k: [r.get(k, float("nan")) for r in rows] for k in keep}
    out["task.alpha"] = out.pop("alpha")
    return out


EXACT_FIT = TheoryCurve(
    name="exact_fit_minimum", experiments=("tied_interpolation_threshold",),
    keys=(*TASK, "task.alpha"), params=_exact_fit_params, compute=_exact_fit_compute,
    settings=lambda s: {"nodes": s.state_evolution.nodes, "tol": s.state_evolution.tol}, sweep="task.alpha")


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
    """Factorized seq2lab points; lambda = 0 is the lambda -> 0+ limit."""
    if point["task.target"] == "explicit" or point["task.output"] != "seq2lab" or point["model.param"] != "factorized":
        return None
    return {**_target_params(point), **{k: point[k] for k in ("task.T", "task.Delta", "task.beta0", "model.kappa",
                                                              "model.beta", "model.lam", "task.alpha")}}


def _se_settings(settings) -> dict:
    se = settings.state_evolution
    return {**{k: se[k] for k in se if k != "points"}, "points": _points(settings)}


def _points(settings) -> int:
    """log2 of the Gaussian rule's size for the profile (the largest one for a profile not listed)."""
    table = settings.state_evolution.points
    return int(table.get(settings.profile.name, max(table.values())))


def _se_compute(params: dict, settings, points: int | None = None, resolution: float = 0.0,
                descending: bool = False) -> Columns:
    """The fixed point at every alpha of the job (ascending, or from the largest down when `descending`,
    each warm-started from the previous converged ones); a point that fails is a row with converged =
    False and its reason. points: the Sobol' rule's log2 size (default: the profile's); resolution: the
    power-law atoms' merging."""
    from attnrepro.theory.erm_curve import erm_state_evolution

    se = settings.state_evolution
    rows = erm_state_evolution(
        params["task.alpha"], float(params["model.lam"]), kappa=float(params["model.kappa"]), T=int(params["task.T"]),
        Delta=float(params["task.Delta"]), target=params["task.target"], kappa0=params.get("task.kappa0", 0.5),
        d=params.get("task.d"), gamma=params.get("task.gamma", 1.0), beta=float(params["model.beta"]),
        beta0=float(params["task.beta0"]), rule=se.rule, points=points or _points(settings), seed=se.seed,
        tol=se.tol, max_evals=se.max_evals, nodes=se.nodes, resolution=resolution,
        descending=descending, log=lambda line: print(line, flush=True))
    columns = sorted({k for r in rows for k in r})
    out = {k: [r.get(k, float("nan")) for r in rows] for k in columns}
    out["task.alpha"] = out.pop("alpha")
    out.pop("lam", None)
    return out


STATE_EVOLUTION = TheoryCurve(
    name="erm_state_evolution", experiments=("tied_error_vs_alpha", "tied_interpolation_peak", "tied_spectra"),
    keys=(*TASK, "task.beta0", "task.output", "task.alpha", "model.param", "model.kappa", "model.beta", "model.lam"),
    params=_se_params, compute=_se_compute, settings=_se_settings, sweep="task.alpha",
    also=lambda p, experiment, settings: _se_also(p, experiment, settings))


def _se_also(p: dict, experiment: str, settings) -> list[dict]:
    """The Wishart curves (the interpolation figures) get their lambda -> 0+ limit too, and the curves at
    lambda <= 0.01 the settings' extra alphas of the experiment (where the peak of the test error lies)."""
    out = [{**p, "model.lam": 0.0}] if p["task.target"] == "wishart" else []
    extra = settings.state_evolution.extra_alpha.get(experiment, []) if p["model.lam"] <= 0.01 else []
    return out + [{**q, "task.alpha": float(a)} for q in [p, *out] for a in extra]


# ---------------------------------------------------------------- scaling laws at large d

def _scaling_params(point: Mapping) -> dict | None:
    """A power-law point of tied_scaling_laws without its d and alpha (scaling_alphas adds them)."""
    if point["task.target"] != "power_law":
        return None
    return {k: point[k] for k in ("task.gamma", "task.T", "task.Delta", "task.beta0", "model.kappa", "model.beta",
                                  "model.lam")}


def scaling_alphas(d: int, settings) -> list[float]:
    """alpha = (n/d)/d at the settings' n/d values for dimension d: log-spaced on [n_over_d_min, alpha_max d]
    (none when that window is empty)."""
    sl = settings.scaling_laws
    if not sl.alpha_max * d > sl.n_over_d_min:
        return []
    return (np.geomspace(sl.n_over_d_min, sl.alpha_max * d, sl.points) / d).tolist()


def _scaling_expand(p: dict, settings) -> list[dict]:
    out = [{**p, "task.d": int(d), "task.alpha": scaling_alphas(int(d), settings)}
           for d in settings.scaling_laws.d.get(settings.profile.name, [])]
    return [q for q in out if q["task.alpha"]]


def _scaling_settings(settings) -> dict:
    sl = settings.scaling_laws
    return {**_se_settings(settings), "points": sl.rule_points, "resolution": sl.resolution}


def _scaling_compute(params: dict, settings) -> Columns:
    """The state evolution along alpha at one (gamma, d), the target's atoms merged within the settings'
    resolution, solved from the largest alpha down (at d = 1000 the smallest n/d = 4 and 5.7 do not
    converge from a cold start, and do from n/d = 50 down); columns as erm_state_evolution, plus task.d."""
    sl = settings.scaling_laws
    out = _se_compute({**params, "task.target": "power_law"}, settings, int(sl.rule_points), float(sl.resolution),
                      descending=True)
    out["task.d"] = [int(params["task.d"])] * len(out["task.alpha"])
    return out


SCALING = TheoryCurve(
    name="scaling_law_state_evolution", experiments=("tied_scaling_laws",),
    keys=("task.target", "task.gamma", "task.T", "task.Delta", "task.beta0", "model.kappa", "model.beta", "model.lam"),
    params=_scaling_params, compute=_scaling_compute, settings=_scaling_settings, expand=_scaling_expand)


CURVES: tuple[TheoryCurve, ...] = (INTERPOLATION, BAYES, STATE_EVOLUTION, EXACT_FIT, SCALING)

