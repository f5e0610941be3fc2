"""The theory curves of the paper-B figures: what each computes, and for which grid points.

A curve belongs to experiments; for every distinct parameter point of an experiment's grid
(the config values at ``keys``) ``params`` says which parameters the curve needs (None: the
point has no such curve), ``extra`` adds points of its own (settings), and ``compute`` returns
the curve's rows as columns. `attnrepro theory` runs them (jobs.theory), caching each
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
    keys=(*TASK, "model.kappa"), params=_interp_params, compute=_interp_compute, settings=lambda s: {"nodes": s.nodes})


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
    return {**{k: se[k] for k in se if k not in ("points", "lambda_zero_points")}, "points": _points(settings),
            "lambda_zero_points": _points(settings, "lambda_zero_points")}


def _points(settings, which: str = "points") -> int:
    """log2 of the state evolution's Gaussian rule's size for the profile (state_evolution[which])."""
    return _for_profile(settings.state_evolution[which], settings)


def _for_profile(table: Mapping, settings) -> int:
    """A per-profile log2 rule size: the profile's (the largest one for a profile not listed)."""
    return int(table.get(settings.profile.name, max(table.values())))


@functools.lru_cache(maxsize=32)
def _threshold(kappa0: float, T: int, Delta: float):
    """interpolation_threshold of the Wishart target of ratio kappa0 (the state evolution's own: same defaults)."""
    return interpolation_threshold(MarchenkoPastur(kappa0), T, Delta)


def branch_above_drawn(params: Mapping) -> bool:
    """A lambda -> 0+ curve (Wishart, Delta > 0) whose branch above alpha_interp is drawn: the student's width holds
    the learned rank at alpha_interp (kappa >= rank there; the rank grows with alpha above it, measured 0.583 at
    alpha_interp to 0.656 at alpha = 0.4 for kappa0 = 0.5, Delta = 0.5, so a narrower student is outside the
    state evolution's validity on the whole branch)."""
    if params["task.target"] != "wishart" or not params["task.Delta"] > 0 or params["model.lam"] != 0:
        return False
    return float(params["model.kappa"]) >= _threshold(float(params["task.kappa0"]), int(params["task.T"]),
                                                      float(params["task.Delta"])).rank


def _se_compute(params: dict, settings, points: int | None = None, resolution: float = 0.0,
                descending: bool = False) -> Columns:
    """The fixed point at every alpha of the job (ascending, or from the largest down when `descending`,
    each warm-started from the previous converged ones); a point that fails is a row with converged =
    False and its reason. points: the Sobol' rule's log2 size (default: the profile's, or its
    lambda_zero_points for a lambda -> 0+ curve whose branch above alpha_interp is drawn: branch_above_drawn;
    a column rule_points says which); resolution: the power-law atoms' merging."""
    from attnrepro.theory.erm_curve import erm_state_evolution

    se = settings.state_evolution
    if points is None:
        points = _points(settings, "lambda_zero_points" if branch_above_drawn(params) else "points")
    rows = erm_state_evolution(
        params["task.alpha"], float(params["model.lam"]), kappa=float(params["model.kappa"]), T=int(params["task.T"]),
        Delta=float(params["task.Delta"]), target=params["task.target"], kappa0=params.get("task.kappa0", 0.5),
        d=params.get("task.d"), gamma=params.get("task.gamma", 1.0), beta=float(params["model.beta"]),
        beta0=float(params["task.beta0"]), rule=se.rule, points=points, seed=se.seed,
        tol=se.tol, max_evals=se.max_evals, nodes=se.nodes, resolution=resolution,
        descending=descending, log=lambda line: print(line, flush=True))
    return {**_columns(rows), "rule_points": [int(points)] * len(rows)}


def _columns(rows: list[dict]) -> Columns:
    """A state-evolution curve's rows as columns (a row without a field: NaN), alpha as task.alpha, without lam
    (a parameter of the job)."""
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
    """The Wishart curves (the interpolation figures) get their lambda -> 0+ limit too, the curves at
    0 < lambda <= 0.01 the settings' extra alphas of the experiment (where the peak of the test error lies), and
    the lambda -> 0+ curves whose branch above alpha_interp is drawn the points alpha_interp (1 + c), c in the
    settings' cusp (where that curve peaks)."""
    out = [{**p, "model.lam": 0.0}] if p["task.target"] == "wishart" else []
    extra = settings.state_evolution.extra_alpha.get(experiment, []) if p["model.lam"] <= 0.01 else []
    more = [{**q, "task.alpha": float(a)} for q in [p, *out] if q["model.lam"] > 0 for a in extra]
    return out + more + [{**q, "task.alpha": a} for q in [p, *out] for a in _cusp_alphas(q, settings)]


def _cusp_alphas(params: Mapping, settings) -> list[float]:
    """alpha_interp (1 + c) for c in the settings' cusp, for a lambda -> 0+ curve whose branch above is drawn."""
    if not branch_above_drawn(params):
        return []
    a0 = _threshold(float(params["task.kappa0"]), int(params["task.T"]), float(params["task.Delta"])).alpha
    return [a0 if c == 0 else a0 * (1 + float(c)) for c in settings.state_evolution.cusp]


# ---------------------------------------------------------------- the direct student (tied_factorized_vs_direct)

SE_MODEL = ("task.T", "task.Delta", "task.beta0", "model.kappa", "model.beta")  # a student's parameters but lambda


def _direct_params(point: Mapping) -> dict | None:
    """Direct seq2lab Wishart points at lambda > 0. lambda = 0 is left out: below alpha_interp^direct = 1/4 the
    minimisers of the direct loss form an affine set (L-BFGS from A(0) ~ N(0, 1) stops at an interpolator near its
    start, not at the minimum-norm lambda -> 0+ limit), and just above it the lambda = 0 fixed point is not
    found (docs/state_evolution.md, "The direct student")."""
    if (point["task.target"] != "wishart" or point["task.output"] != "seq2lab" or point["model.param"] != "direct"
            or not point["model.lam"] > 0):
        return None
    return {**_target_params(point), **{k: point[k] for k in (*SE_MODEL, "model.lam", "task.alpha")}}


def _rule_settings(settings) -> dict:
    """The output channel's rule and the root finder's settings (the direct student needs no free convolution)."""
    se = settings.state_evolution
    return {"rule": se.rule, "points": _points(settings), "seed": se.seed, "tol": se.tol, "max_evals": se.max_evals}


def _direct_compute(params: dict, settings) -> Columns:
    """theory.direct_state_evolution at every alpha of the job (ascending, each warm-started from the previous);
    a point that fails is a row with converged = False and its reason."""
    from attnrepro.theory.direct_state_evolution import direct_state_evolution

    se = settings.state_evolution
    rows = direct_state_evolution(
        params["task.alpha"], float(params["model.lam"]), kappa=float(params["model.kappa"]), T=int(params["task.T"]),
        Delta=float(params["task.Delta"]), kappa0=float(params["task.kappa0"]), beta=float(params["model.beta"]),
        beta0=float(params["task.beta0"]), rule=se.rule, points=_points(settings), seed=se.seed, tol=se.tol,
        max_evals=se.max_evals, log=lambda line: print(line, flush=True))
    return _columns(rows)


DIRECT_STATE_EVOLUTION = TheoryCurve(
    name="direct_state_evolution", experiments=("tied_factorized_vs_direct",), keys=STATE_EVOLUTION.keys,
    params=_direct_params, compute=_direct_compute, settings=_rule_settings, sweep="task.alpha")


# ---------------------------------------------------------------- both students at their optimal lambda

STUDENTS = ("factorized", "direct")


def _optimal_params(point: Mapping) -> dict | None:
    """A seq2lab Wishart point without lambda (optimised); the students are added by _optimal_expand."""
    if point["task.target"] != "wishart" or point["task.output"] != "seq2lab":
        return None
    return {**_target_params(point), **{k: point[k] for k in (*SE_MODEL, "task.alpha")}}


def _optimal_also(p: dict, experiment: str, settings) -> list[dict]:
    """The settings' finer alphas of the profile."""
    return [{**p, "task.alpha": float(a)} for a in settings.optimal_lambda.alphas.get(settings.profile.name, [])]


def _optimal_expand(p: dict, settings) -> list[dict]:
    return [{**p, "model.param": model} for model in STUDENTS]


def _optimal_points(settings) -> int:
    return _for_profile(settings.optimal_lambda.points, settings)


def _optimal_settings(settings) -> dict:
    ol = settings.optimal_lambda
    return {**_rule_settings(settings), "points": _optimal_points(settings), "nodes": settings.state_evolution.nodes,
            "lam_bounds": list(ol.lam_bounds), "xatol": ol.xatol}


def _optimal_compute(params: dict, settings) -> Columns:
    """theory.direct_state_evolution.optimal_lambda_curve for the job's student (model.param) at every alpha: the
    state-evolution row at lambda* = argmin over log lambda of its test error (lam_star; the factorized student
    only where valid, kappa >= rank: validity_bound marks a lambda* at the edge of the valid region), with the
    bracket (lam_lo, lam_hi), the number of lambdas solved (solves) and the failed ones (failures)."""
    from attnrepro.theory.direct_state_evolution import optimal_lambda_curve

    se, ol = settings.state_evolution, settings.optimal_lambda
    rows = optimal_lambda_curve(
        params["model.param"], params["task.alpha"], kappa=float(params["model.kappa"]), T=int(params["task.T"]),
        Delta=float(params["task.Delta"]), kappa0=float(params["task.kappa0"]), beta=float(params["model.beta"]),
        beta0=float(params["task.beta0"]), rule=se.rule, points=_optimal_points(settings), seed=se.seed, tol=se.tol,
        max_evals=se.max_evals, nodes=se.nodes, lam_bounds=tuple(ol.lam_bounds), xatol=ol.xatol,
        log=lambda line: print(line, flush=True))
    for r in rows:
        r["lam_lo"], r["lam_hi"] = r.pop("bracket")
        r["solves"] = len(r.pop("lams"))
        del r["test_errors"], r["model"]
    return _columns(rows)


OPTIMAL_LAMBDA = TheoryCurve(
    name="optimal_lambda", experiments=("tied_factorized_vs_direct",),
    keys=(*TASK, "task.beta0", "task.output", "task.alpha", "model.kappa", "model.beta"), params=_optimal_params,
    compute=_optimal_compute, settings=_optimal_settings, sweep="task.alpha", also=_optimal_also,
    expand=_optimal_expand)


# ---------------------------------------------------------------- scaling laws at large d

SCALING_KEYS = ("task.gamma", "task.T", "task.Delta", "task.beta0", "model.kappa", "model.beta")


def _scaling_params(point: Mapping, keys: tuple[str, ...] = (*SCALING_KEYS, "model.lam")) -> dict | None:
    """A power-law point of tied_scaling_laws without its d and alpha (scaling_alphas adds them)."""
    if point["task.target"] != "power_law":
        return None
    return {k: point[k] for k in keys}


def scaling_alphas(d: int, settings) -> list[float]:
    """alpha = (n/d)/d at the settings' n/d values for dimension d: log-spaced on [n_over_d_min, alpha_max d]
    (none when that window is empty)."""
    sl = settings.scaling_laws
    if not sl.alpha_max * d > sl.n_over_d_min:
        return []
    return (np.geomspace(sl.n_over_d_min, sl.alpha_max * d, sl.points) / d).tolist()


def _scaling_expand(p: dict, settings, which: str = "d") -> list[dict]:
    """The point at every d of the profile's scaling_laws[which], with its window's alphas."""
    out = [{**p, "task.d": int(d), "task.alpha": scaling_alphas(int(d), settings)}
           for d in settings.scaling_laws[which].get(settings.profile.name, [])]
    return [q for q in out if q["task.alpha"]]


def _scaling_settings(settings) -> dict:
    sl = settings.scaling_laws
    return {**_se_settings(settings), "points": sl.rule_points, "resolution": sl.resolution}


def _with_error_split(out: Columns, params: dict, settings) -> Columns:
    """The columns plus e_signal and e_bulk of every converged row (learned_spectrum.LearnedSpectrum.error_split:
    the estimation error split between the learned bulk and the rest; NaN where the row did not converge) and
    task.d."""
    from attnrepro.theory.learned_spectrum import LearnedSpectrum
    from attnrepro.theory.spectral_laws import target_law

    law = target_law("power_law", int(params["task.d"]), gamma=float(params["task.gamma"]),
                     resolution=float(settings.scaling_laws.resolution))
    split = [LearnedSpectrum(law, eta, delta, eps, settings.state_evolution.nodes).error_split() if ok
             else (float("nan"), float("nan"))
             for ok, eta, delta, eps in zip(out["converged"], out["eta"], out["delta"], out["eps"], strict=True)]
    return {**out, "e_signal": [a for a, _ in split], "e_bulk": [b for _, b in split],
            "task.d": [int(params["task.d"])] * len(out["task.alpha"])}


def _scaling_compute(params: dict, settings) -> Columns:
    """The state evolution along alpha at one (gamma, d), the target's atoms merged within the settings'
    resolution, solved from the largest alpha down (at d = 1000 the smallest n/d = 4 and 5.7 do not
    converge from a cold start, and do from n/d = 50 down); columns as erm_state_evolution, plus task.d and the
    error split (_with_error_split)."""
    sl = settings.scaling_laws
    out = _se_compute({**params, "task.target": "power_law"}, settings, int(sl.rule_points), float(sl.resolution),
                      descending=True)
    return _with_error_split(out, params, settings)


SCALING = TheoryCurve(
    name="scaling_law_state_evolution", experiments=("tied_scaling_laws",),
    keys=("task.target", *SCALING_KEYS, "model.lam"), params=_scaling_params, compute=_scaling_compute,
    settings=_scaling_settings, expand=_scaling_expand)


def _tuned_settings(settings) -> dict:
    return {**_scaling_settings(settings), "lam_bounds": list(settings.optimal_lambda.lam_bounds),
            "xatol": settings.scaling_laws.tuned_xatol}


def _tuned_compute(params: dict, settings) -> Columns:
    """Paper B's scaling law at a well-chosen lambda: at every alpha of the window the state evolution at
    lambda* = argmin over log lambda of its test error (direct_state_evolution.optimal_lambda_curve, factorized
    student, warm-started along alpha and lambda), with lam_star, at_bound, the bracket, solves, failures and
    the error split (_with_error_split)."""
    from attnrepro.theory.direct_state_evolution import optimal_lambda_curve

    se, sl, ol = settings.state_evolution, settings.scaling_laws, settings.optimal_lambda
    rows = optimal_lambda_curve(
        "factorized", params["task.alpha"], kappa=float(params["model.kappa"]), T=int(params["task.T"]),
        Delta=float(params["task.Delta"]), target="power_law", d=int(params["task.d"]),
        gamma=float(params["task.gamma"]), beta=float(params["model.beta"]), beta0=float(params["task.beta0"]),
        rule=se.rule, points=int(sl.rule_points), seed=se.seed, tol=se.tol, max_evals=se.max_evals, nodes=se.nodes,
        lam_bounds=tuple(ol.lam_bounds), xatol=float(sl.tuned_xatol), resolution=float(sl.resolution),
        log=lambda line: print(line, flush=True))
    for r in rows:
        r["lam_lo"], r["lam_hi"] = r.pop("bracket")
        r["solves"] = len(r.pop("lams"))
        del r["test_errors"], r["model"]
    return _with_error_split(_columns(rows), params, settings)


TUNED_SCALING = TheoryCurve(
    name="scaling_law_tuned_lambda", experiments=("tied_scaling_laws",),
    keys=("task.target", *SCALING_KEYS), params=lambda point: _scaling_params(point, SCALING_KEYS),
    compute=_tuned_compute, settings=_tuned_settings,
    expand=lambda p, settings: _scaling_expand(p, settings, "tuned_d"))


CURVES: tuple[TheoryCurve, ...] = (INTERPOLATION, BAYES, STATE_EVOLUTION, EXACT_FIT, SCALING, TUNED_SCALING,
                                  DIRECT_STATE_EVOLUTION, OPTIMAL_LAMBDA)

