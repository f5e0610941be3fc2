"""Paper B's ERM state evolution for the direct student, and both students at their optimal lambda.

The direct student learns a symmetric S entry-wise with the penalty (lambda/2) sqrt(p d) ||S||_F^2
(papers.tied_attention.model: c = sqrt(p d)), i.e. (lambda~/2) d ||S||_F^2 with lambda~ = sqrt(kappa) lambda,
the same prefactor per unit of S as the factorized student's (lambda~/2) d Tr S. The output side (the
channel M, its hats) is the factorized state evolution's; only the prior side changes
(docs/state_evolution.md, "The direct student"). Per eigenvalue y of Y = S0 + delta Z the denoiser is the
minimiser of (Sigmahat/2) s^2 - mhat s y + lambda~ s^2 over s in R, a linear shrinkage:

    S = eta (S0 + delta Z),   eta = mhat / (Sigmahat + 2 lambda~),   delta = sqrt(qhat)/mhat,

so the prior term of Phi is -(mhat^2 Q0 + qhat) / (4 (Sigmahat + 2 lambda~)) and stationarity gives, in closed
form (no free convolution):

    Sigma = 1/(Sigmahat + 2 lambda~),   m = mhat Q0 Sigma,   q = (mhat^2 Q0 + qhat) Sigma^2,

with qhat = -4 alpha dM/dSigma, mhat = -2 alpha dM/dm, Sigmahat = 4 alpha dM/dq as before. The learned spectrum
is the law of eta (S0 + delta Z): eta times mu0 [+] sc(delta), every eigenvalue kept (no atom at 0 for delta > 0).

lambda -> 0+. With n_meas measurements per sample (n_u = (T^2 + T - 2)/2 logit differences for the softmax and
the logit-difference channels, T (T + 1)/2 entries for the linear channel) and rho = 2 alpha n_meas, the large-Sigma
form of the channel, M -> (n_meas/2)(r^2 (Q0 + Delta/2) - 2 r m + q)/Sigma (r = beta0/beta), gives
lambda~ Sigma -> (1 - rho)/2: the interpolating branch lives at rho < 1, i.e. below

    alpha_interp^direct = 1/(2 n_meas) = 1/(T^2 + T - 2)     (softmax; T = 2: 1/4),

where the n n_meas constraints reach the d(d + 1)/2 ~ d^2/2 dimension of symmetric matrices. Below it the
limit is the minimum-Frobenius-norm interpolator (`direct_interpolating_limit`):

    m = rho r Q0,   q = r^2 rho (Q0 + Delta/2 - rho Q0)/(1 - rho),   eta = rho r,   delta^2 = c/(rho r^2),
    c = r^2 (Q0 + Delta/2) - 2 r m + q,   training loss 0.

Above it (Delta > 0) the fixed point at lambda = 0 itself (Sigma = 1/Sigmahat finite), where it exists: measured at
kappa0 = 0.5, Delta = 0.5, it settles along lambda at alpha = 0.6, while just above 1/4 (alpha = 0.3, 0.4) q keeps
growing as lambda falls and no lambda = 0 fixed point is found (those rows fail, with the reason). With Delta = 0,
S = r S0.

Solving: DirectFixedPointMap subclasses state_evolution.FixedPointMap (the channel side, the root-finding
variables y = (log(lambda~ Sigma), m, log q) and the residual are its own) and replaces the prior side, the
rank and validity of a point, the routes of solve_continued after the warm starts (`fallbacks`), the surrogate's
lambda = 0 start and the lambda -> 0+ rows (DirectLambdaZero). The solvers are state_evolution's (solve,
solve_damped, solve_continued, solve_ridgeless, state_evolution_curve) with fmap_class=DirectFixedPointMap: a
root of the residual by theory.root_finding.newton_root, warm-started along alpha (or lambda), from the
channel's quadratic surrogate, or last by the damped iteration. A point that is not solved is a row with
converged = False and its reason.

`optimal_lambda_curve` minimises the state evolution's test error over log lambda at every alpha, for either
student (state_evolution.solve_continued with FixedPointMap or DirectFixedPointMap), warm-started along alpha.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from attnrepro.theory import state_evolution as se
from attnrepro.theory.free_convolution import FreeConvolution
from attnrepro.theory.root_finding import NotConverged
from attnrepro.theory.softmax_prox import ProxNotSolved, entries
from attnrepro.theory.spectral_laws import SpectralLaw

NAN = float("nan")


# ---------------------------------------------------------------- the prior side

class DirectFixedPointMap(se.FixedPointMap):
    """F(Sigma, m, q) of the direct student: the factorized map's channel side (hats), and the prior side of
    the Frobenius penalty (lambda~/2) d ||S||_F^2 (module docstring):

        Sigma = 1/(Sigmahat + 2 lambda~),   m = mhat Q0 Sigma,   q = (mhat^2 Q0 + qhat) Sigma^2.

    The learned-spectrum parameters are (delta, eps, eta) = (sqrt(qhat)/mhat, nan, mhat Sigma): there is no
    threshold eps, and the learned S is eta (S0 + delta Z). The solvers of theory.state_evolution take it as
    fmap_class; its routes and its lambda -> 0+ rows are below."""

    label = "direct: "

    def prior(self, hats):
        qhat, mhat, shat = hats
        width = shat + 2 * self.lam_t
        if not (qhat >= 0 and mhat > 0 and width > 0 and math.isfinite(qhat) and math.isfinite(width)):
            raise se.OutOfDomain(f"left the domain: qhat = {qhat:.3g}, mhat = {mhat:.3g}, "
                                 f"Sigmahat + 2 lambda~ = {width:.3g}")
        Sigma = 1.0 / width
        eta, Q0 = mhat * Sigma, self.law.Q0
        return (Sigma, eta * Q0, (mhat * mhat * Q0 + qhat) * Sigma * Sigma), (math.sqrt(qhat) / mhat, NAN, eta), None

    def rank(self, ev) -> float:
        """The fraction of non-zero eigenvalues of eta (S0 + delta Z) (_rank)."""
        return _rank(self.law, ev.prior[0])

    def valid(self, rank: float) -> bool:
        """Always: the direct student has no width to hold its rank."""
        return True

    def fallbacks(self, **kw) -> list:
        """solve_continued's routes after the warm starts: from the quadratic surrogate's fixed point (when the
        channel has one); below alpha_interp^direct, from the lambda -> 0+ closed form with
        Sigma = (1 - rho)/(2 lambda~) (the fixed point at small lambda is near it); from the default start; the
        damped iteration."""
        where, solve = (self.law, self.channel, self.alpha, self.lam, self.kappa), se.solve
        routes = []
        if hasattr(self.channel, "surrogate"):
            routes.append(("from the quadratic surrogate's fixed point", lambda: se.from_surrogate(self, False, **kw)))
        start = _limit_start(self.law, self.channel, self.alpha, self.lam_t)
        if start is not None:
            routes.append(("from the lambda -> 0+ closed form",
                           lambda: solve(*where, init=start, fmap_class=DirectFixedPointMap, **kw)))
        damped = dict(tol=kw.get("tol", 1e-7), fmap_class=DirectFixedPointMap)
        return routes + [("from the default start", lambda: solve(*where, fmap_class=DirectFixedPointMap, **kw)),
                         ("damped iteration", lambda: (se.solve_damped(*where, **damped), None))]

    def surrogate_zero_start(self, quad, **kw) -> se.SEPoint:
        """The lambda = 0 fixed point of the quadratic surrogate `quad`, from the default start."""
        return se.solve(self.law, quad, self.alpha, 0.0, self.kappa, fmap_class=DirectFixedPointMap, **kw)[0]

    @classmethod
    def lambda_zero_limit(cls, law, channel, kappa, T, Delta, ratio=1.0, log=None, **kw) -> DirectLambdaZero:
        return DirectLambdaZero(law, channel, kappa, T, Delta, ratio, log, **kw)


def _rank(law: SpectralLaw, delta: float) -> float:
    """The fraction of non-zero eigenvalues of eta (S0 + delta Z): 1 for delta > 0, 1 - mu0({0}) at delta = 0."""
    return 1.0 if delta > 0 else 1.0 - sum(w for t, w in law.atoms if t == 0)


# ---------------------------------------------------------------- lambda -> 0+

def measurements_per_sample(channel, T: int) -> int:
    """n_meas: the independent linear measurements of S per sample that the channel's loss sees: the logit
    differences n_u = (T^2 + T - 2)/2 (softmax, logit-difference channels), or the T (T + 1)/2 entries (linear)."""
    if hasattr(channel, "coords"):
        return channel.coords.n_u
    if hasattr(channel, "G"):
        return len(channel.G)
    return len(entries(T)[0])


def direct_interpolation_threshold(T: int, n_meas: int | None = None) -> float:
    """alpha_interp^direct = 1/(2 n_meas) (n_meas default n_u = (T^2 + T - 2)/2: 1/(T^2 + T - 2)): where the
    n n_meas constraints of the exact fit reach d^2/2, the dimension of symmetric d x d matrices (d(d + 1)/2 at
    finite d, i.e. alpha = (1 + 1/d)/(2 n_meas))."""
    n_meas = (T * T + T - 2) // 2 if n_meas is None else n_meas
    if n_meas < 1:
        raise ValueError(f"T = {T}: no measurement per sample")
    return 1.0 / (2 * n_meas)


@dataclass
class DirectInterpolatingLimit:
    rho: float      # 2 alpha n_meas: the fraction of the d^2/2 dimensions the constraints fix
    m: float
    q: float
    eta: float
    delta: float
    lam_Sigma: float  # the limit of lambda~ Sigma: (1 - rho)/2


def direct_interpolating_limit(law: SpectralLaw, alpha: float, Delta: float, n_meas: int,
                               ratio: float = 1.0) -> DirectInterpolatingLimit:
    """The lambda -> 0+ fixed point below alpha_interp^direct: the minimum-Frobenius-norm interpolator,

        rho = 2 alpha n_meas < 1,   m = rho r Q0,   q = r^2 rho (Q0 + Delta/2 - rho Q0)/(1 - rho),
        eta = rho r,   delta^2 = (r^2 (Q0 + Delta/2) - 2 r m + q)/(rho r^2),   lambda~ Sigma -> (1 - rho)/2.

    Raises ValueError at or above the threshold (rho >= 1)."""
    rho, Q0, r = 2 * alpha * n_meas, law.Q0, ratio
    if not 0 < rho < 1:
        raise ValueError(f"alpha = {alpha:g}: rho = 2 alpha n_meas = {rho:.6g} is not in (0, 1) (alpha_interp^direct "
                         f"= {1 / (2 * n_meas):.6g})")
    m = rho * r * Q0
    q = r * r * rho * (Q0 + Delta / 2 - rho * Q0) / (1 - rho)
    c = r * r * (Q0 + Delta / 2) - 2 * r * m + q
    return DirectInterpolatingLimit(rho=rho, m=m, q=q, eta=rho * r, delta=math.sqrt(c / (rho * r * r)),
                                    lam_Sigma=(1 - rho) / 2)


def _channel_ratio(channel) -> float:
    """r = beta0/beta of a channel (1 for the linear channel)."""
    if hasattr(channel, "ratio"):
        return float(channel.ratio)
    if hasattr(channel, "beta0"):
        return float(channel.beta0) / float(channel.beta)
    return 1.0


def _limit_start(law, channel, alpha, lam_t) -> tuple[float, float, float] | None:
    """(Sigma, m, q) of the lambda -> 0+ closed form with Sigma = (1 - rho)/(2 lambda~), below the threshold
    (None above it, or for a channel without T and Delta)."""
    if not (hasattr(channel, "T") and hasattr(channel, "Delta")) or lam_t <= 0:
        return None
    n_meas = measurements_per_sample(channel, channel.T)
    if not 2 * alpha * n_meas < 1:
        return None
    lim = direct_interpolating_limit(law, alpha, channel.Delta, n_meas, _channel_ratio(channel))
    return (lim.lam_Sigma / lam_t, lim.m, lim.q)


def _limit_row(law, channel, alpha, T, Delta, ratio, n_meas) -> dict:
    """One lambda -> 0+ row at or below the threshold, or with Delta = 0 above it."""
    base = dict(alpha=alpha, lam=0.0, Sigma=math.inf, Sigma_hat=NAN, m_hat=NAN, q_hat=NAN, eps=NAN, iterations=0,
                residual=0.0, prox_residual=NAN, valid=True)
    threshold = 1.0 / (2 * n_meas)
    if alpha < threshold:
        lim = direct_interpolating_limit(law, alpha, Delta, n_meas, ratio)
        return {**base, "m": lim.m, "q": lim.q, "eta": lim.eta, "delta": lim.delta,
                "estimation_error": law.Q0 - 2 * lim.m + lim.q, "train_loss": 0.0,
                "test_error": channel.test_error(lim.m, lim.q), "rank": _rank(law, lim.delta),
                "method": "interpolating_limit"}
    if Delta == 0:  # S0 fits the labels; at and above the threshold it is the only interpolator: S = r S0
        m, q = ratio * law.Q0, ratio * ratio * law.Q0
        return {**base, "m": m, "q": q, "eta": ratio, "delta": 0.0, "estimation_error": law.Q0 - 2 * m + q,
                "train_loss": 0.0, "test_error": channel.test_error(m, q), "rank": _rank(law, 0.0),
                "method": "perfect_recovery"}
    raise NotConverged(f"alpha = {alpha:g} is alpha_interp^direct = {threshold:.6g} with Delta = {Delta:g} > 0: the "
                       "minimum-norm interpolator's norm diverges there (q ~ 1/(1 - rho)); no finite limit")


# ---------------------------------------------------------------- a curve in alpha

class DirectLambdaZero(se.LambdaZeroLimit):
    """The direct student's lambda -> 0+ rows: at and below alpha_interp^direct = 1/(2 n_meas), and at every alpha
    with Delta = 0, in closed form (_limit_row: the minimum-Frobenius-norm interpolator; a failed row at the
    threshold with Delta > 0; S = r S0 above it with Delta = 0); above it with Delta > 0, the fixed point at
    lambda = 0 (method "lambda_zero"), from the largest alpha down, each from its neighbours above (y extrapolated
    linearly in alpha), the first from the channel's surrogate or down a lambda path 1e-2 ... 1e-6."""

    fmap_class = DirectFixedPointMap

    def __init__(self, law, channel, kappa, T, Delta, ratio=1.0, log=None, **kw):
        super().__init__(law, channel, kappa, T, Delta, ratio, log, **kw)
        self.n_meas = measurements_per_sample(channel, T)
        self.threshold = 1.0 / (2 * self.n_meas)

    def closed_form(self, alpha: float) -> bool:
        return alpha <= self.threshold or self.Delta == 0

    def limit_row(self, alpha: float) -> dict:
        return _limit_row(self.law, self.channel, alpha, self.T, self.Delta, self.ratio, self.n_meas)

    def starts(self, fmap, sweep) -> list[tuple[float, float, float]]:
        return sweep.starts(fmap)


def direct_state_evolution_curve(law: SpectralLaw, channel, alphas, lam: float, kappa: float, T: int, Delta: float,
                                 ratio: float = 1.0, log=None, tol: float = 1e-7, max_evals: int = 40) -> list[dict]:
    """The direct student's fixed point at every alpha, one row each (SEPoint's fields, converged, reason,
    seconds, channel_evaluations), in ascending alpha: state_evolution.state_evolution_curve with
    DirectFixedPointMap. lambda > 0: solve_continued in ascending alpha, each point started from the previous
    ones (y extrapolated linearly in alpha) with the last Jacobian (routes: DirectFixedPointMap.fallbacks).
    lambda = 0 means lambda -> 0+ (DirectLambdaZero). ratio = beta0/beta."""
    return se.state_evolution_curve(law, channel, alphas, lam, kappa, T, Delta, ratio, log=log,
                                    fmap_class=DirectFixedPointMap, tol=tol, max_evals=max_evals)


def direct_state_evolution(alphas: Sequence[float], lam: float, *, kappa: float = 1.0, T: int = 2,
                           Delta: float = 0.5, target: str = "wishart", kappa0: float = 0.5, d: int | None = None,
                           gamma: float = 1.0, beta: float = 1.0, beta0: float = 1.0, rule: str = "sobol",
                           points: int = 14, seed: int = 0, tol: float = 1e-6, max_evals: int = 40,
                           resolution: float = 0.0, law: SpectralLaw | None = None,
                           log: Callable[[str], None] | None = None) -> list[dict]:
    """The direct student's state evolution at every alpha, in the papers' parameters (as
    erm_curve.erm_state_evolution for the factorized one): one row per alpha with test_error, train_loss,
    estimation_error, (eta, delta) of the learned spectrum eta (S0 + delta Z), converged and reason; lam = 0 is
    the lambda -> 0+ limit (direct_state_evolution_curve). law: mu0 itself, in place of target's (e.g. the
    spectrum of one drawn S0; the direct student's state evolution sees mu0 only through Q0).

        rows = direct_state_evolution([0.1, 0.2, 0.3], lam=0.1, kappa=0.5, kappa0=0.5, T=2, Delta=0.5)
    """
    from attnrepro.theory.erm_curve import softmax_channel
    from attnrepro.theory.spectral_laws import target_law

    law = law if law is not None else target_law(target, d, kappa0, gamma, resolution=resolution)
    channel = softmax_channel(law, T, Delta, beta, beta0, rule, points, seed)
    return direct_state_evolution_curve(law, channel, alphas, float(lam), float(kappa), int(T), float(Delta),
                                        float(beta0) / float(beta), log=log, tol=tol, max_evals=max_evals)


# ---------------------------------------------------------------- the learned spectrum

@dataclass(frozen=True)
class DirectLearnedSpectrum:
    """The law of the direct student's eigenvalues, eta (S0 + delta Z): y = eta x, x ~ mu0 [+] sc(delta)."""

    law: SpectralLaw
    eta: float
    delta: float
    nodes: int = 200

    @property
    def mu(self) -> FreeConvolution:
        return FreeConvolution(self.law, self.delta, self.nodes)

    def density(self, y) -> np.ndarray:
        """p(y) = p_delta(y/eta)/eta."""
        return self.mu.density(np.asarray(y, float) / self.eta) / self.eta

    def cdf(self, y) -> np.ndarray:
        return self.mu.cdf(np.asarray(y, float) / self.eta)

    def quantile(self, q) -> np.ndarray:
        return self.eta * self.mu.quantile(q)


# ---------------------------------------------------------------- optimal lambda

MAPS = {"factorized": se.FixedPointMap, "direct": DirectFixedPointMap}  # optimal_lambda_curve's models


WALK_STEP, WALK_MIN_STEP = 0.25, 0.03  # the walk's largest and smallest step in log lambda (_AlongLambda.row)


class _AlongLambda:
    """The state evolution of one student at one alpha as a function of log lambda, each solve warm-started from
    the nearest solved lambda (before the first converges: from the previous alpha's, `previous`); rows cached
    by log lambda."""

    def __init__(self, model: str, law, channel, alpha: float, kappa: float, tol: float, max_evals: int, nodes: int,
                 require_valid: bool, log=None, previous: "_AlongLambda | None" = None):
        self.model, self.law, self.channel, self.alpha, self.kappa = model, law, channel, alpha, kappa
        self.tol, self.max_evals, self.nodes, self.require_valid, self.log = tol, max_evals, nodes, require_valid, log
        self.previous = previous
        self.rows: dict[float, dict] = {}
        self.jacs: dict[float, np.ndarray] = {}

    def _map(self, lam):
        return MAPS[self.model](self.law, self.channel, self.alpha, lam, self.kappa, self.nodes)

    def row(self, log_lam: float) -> dict:
        """The solve at lambda = exp(log_lam), warm-started from the nearest converged lambda (solve_continued,
        with its fallbacks). Where that fails and the nearest is more than WALK_STEP away in log lambda, a walk
        from it: Newton solves in steps of at most WALK_STEP, each warm-started from the last, the step halved
        where one fails (down to WALK_MIN_STEP). The searches' doubling walk jumps by up to a factor e^4 in
        lambda, further than a warm start reaches at small lambda (at d = 4000, 0.0224 -> 0.00302 failed; through
        0.0082 it converged). The walk's converged points are kept as rows. Before any lambda at this alpha has
        converged, the warm start is the previous alpha's nearest solved lambda: a search starts at the previous
        alpha's lambda*, often 1e-4, where a cold start fails at d >= 4000."""
        if log_lam in self.rows:
            return self.rows[log_lam]
        source, near = self, self._nearest(log_lam)
        if not near and self.previous is not None:
            source, near = self.previous, self.previous._nearest(log_lam)
        row, jac = self._solve(log_lam, near, source=source)
        if not row["converged"] and source is self and near and abs(near[0] - log_lam) > WALK_STEP:
            walked, jac_w = self._walk(near[0], log_lam)
            if walked["converged"]:
                walked["seconds"] += row["seconds"]
                row, jac = walked, jac_w
        self._keep(log_lam, row, jac)
        if self.log:
            self.log(f"      {self.model}: alpha = {self.alpha:g}, lambda = {row['lam']:.4g}: "
                     + (f"test error {row['test_error']:.6f}" if row["converged"] else f"FAILED ({row['reason']})")
                     + (f" (walked from lambda = {row['walked_from']:.4g})" if "walked_from" in row else "")
                     + ("" if not row["converged"] or row.get("valid", True) else " (invalid: kappa < rank)"))
        return row

    def _nearest(self, log_lam: float) -> list[float]:
        """[the converged log lambda nearest log_lam] (a solved fixed point, not a closed form), or []."""
        return sorted((k for k, r in self.rows.items() if r["converged"] and r["method"] in ("newton", "damped")),
                      key=lambda k: abs(k - log_lam))[:1]

    def _keep(self, log_lam: float, row: dict, jac) -> None:
        self.rows[log_lam] = row
        if jac is not None:
            self.jacs[log_lam] = jac

    def _walk(self, start: float, log_lam: float) -> tuple[dict, np.ndarray | None]:
        """From the converged row at log lambda = start to log_lam in Newton steps (_solve with warm_only)."""
        k, step, seconds = start, WALK_STEP, 0.0
        while True:
            x = log_lam if abs(log_lam - k) <= step else k + math.copysign(step, log_lam - k)
            row, jac = self._solve(x, [k], warm_only=True)
            seconds += row["seconds"]
            if row["converged"] and x == log_lam:
                return {**row, "seconds": seconds, "walked_from": math.exp(start)}, jac
            if row["converged"]:
                self._keep(x, row, jac)
                k = x
            elif step / 2 >= WALK_MIN_STEP:
                step /= 2
            else:
                return {**row, "seconds": seconds}, None

    def _solve(self, log_lam: float, near: list[float], warm_only: bool = False,
               source: "_AlongLambda | None" = None) -> tuple[dict, np.ndarray | None]:
        """One solve at exp(log_lam), warm-started from source's (default: this alpha's) solved rows at the log
        lambdas in near: by solve_continued (then its fallbacks), or with warm_only by Newton from the warm
        starts alone."""
        source = source or self
        lam = math.exp(log_lam)
        inits, jac = [], None
        for k in near:  # hold lambda~ Sigma (Sigma ~ 1/lambda where the fit interpolates), then Sigma
            r = source.rows[k]
            inits += [self._map(lam).from_y(self._map(math.exp(k)).to_y((r["Sigma"], r["m"], r["q"]))),
                      (r["Sigma"], r["m"], r["q"])]
            jac = source.jacs.get(k)
        kw = dict(fmap_class=MAPS[self.model], tol=self.tol, max_evals=self.max_evals, nodes=self.nodes)
        t0 = time.perf_counter()
        try:
            if warm_only:
                p, jac = se.first_route([("warm start", lambda init=init: se.solve(
                    self.law, self.channel, self.alpha, lam, self.kappa, init=init, jac=jac, **kw)) for init in inits])
            else:
                p, jac = se.solve_continued(self.law, self.channel, self.alpha, lam, self.kappa, inits=inits,
                                            jac=jac, **kw)
            row = {**p.row(), "converged": True, "reason": ""}
        except (NotConverged, ProxNotSolved, ValueError, FloatingPointError) as e:
            row = {"alpha": self.alpha, "lam": lam, "method": "failed", "converged": False,
                   "reason": f"{type(e).__name__}: {e}"}
            jac = None
        row["seconds"] = time.perf_counter() - t0
        return row, jac

    def objective(self, log_lam: float) -> float:
        """The test error at lambda = exp(log_lam); +inf where the solve failed (or, with require_valid, where the
        factorized state evolution is not valid: kappa < rank)."""
        r = self.row(log_lam)
        if not r["converged"] or (self.require_valid and not r.get("valid", True)):
            return math.inf
        return float(r["test_error"])


def _minimise(f, lo: float, hi: float, centre: float, width: float, xatol: float):
    """A minimiser of f on [lo, hi], searched from centre: evaluate centre +- width; walk downhill in steps that
    double until the value rises (or a bound is reached), then Brent's bounded method inside the bracket.
    Where the start values are equal (a plateau: in lambda, the penalty's S = 0 above some lambda, whose test
    error does not depend on lambda), the left one equal too or failed (+inf: solves fail near the plateau's
    edge), first walk left, in doubling steps, until the value changes.
    Returns (x, bracket (a, b))."""
    from scipy.optimize import minimize_scalar

    c = min(max(centre, lo), hi)
    a, b = max(c - width, lo), min(c + width, hi)
    fa, fc, fb = f(a), f(c), f(b)
    step = width
    flat = lambda u, v: math.isfinite(u) and math.isfinite(v) and abs(u - v) <= 1e-9 * max(abs(u), abs(v))  # noqa: E731
    while flat(fb, fc) and (flat(fa, fc) or math.isinf(fa)) and a > lo:  # off the plateau, to the left
        b, fb, c, fc = c, fc, a, fa
        step *= 2
        a = max(c - step, lo)
        fa = f(a)
    while fa < fc and a > lo:  # downhill to the left
        b, fb, c, fc = c, fc, a, fa
        step *= 2
        a = max(c - step, lo)
        fa = f(a)
    while fb < fc and b < hi:  # downhill to the right
        a, fa, c, fc = c, fc, b, fb
        step *= 2
        b = min(c + step, hi)
        fb = f(b)
    if fa < fc or fb < fc:  # the minimum is at a bound
        x = a if fa <= fb else b
        return x, (a, b)
    res = minimize_scalar(f, bounds=(a, b), method="bounded", options={"xatol": xatol})
    x = float(res.x) if f(float(res.x)) <= fc else c
    return x, (a, b)


def optimal_lambda_curve(model: str, alphas: Sequence[float], *, kappa: float = 1.0, T: int = 2, Delta: float = 0.5,
                         target: str = "wishart", kappa0: float = 0.5, d: int | None = None, gamma: float = 1.0,
                         beta: float = 1.0, beta0: float = 1.0, rule: str = "sobol", points: int = 12, seed: int = 0,
                         tol: float = 1e-7, max_evals: int = 40, nodes: int = 200,
                         lam_bounds: tuple[float, float] = (1e-4, 30.0), start_lam: float = 0.1, width: float = 0.5,
                         xatol: float = 0.02, require_valid: bool = True, resolution: float = 0.0,
                         log: Callable[[str], None] | None = None) -> list[dict]:
    """The state evolution at the lambda that minimises its test error, for each alpha (ascending), for
    model = "factorized" (state_evolution: weight decay on W) or "direct" (this module: Frobenius on S):

        lambda*(alpha) = argmin over log lambda in log(lam_bounds) of test_error(alpha, lambda),

    searched around the previous alpha's log lambda* (the first around start_lam) within +- width, walking
    downhill until bracketed, then Brent's bounded method to xatol in log lambda (_minimise); each solve is
    warm-started from the nearest solved lambda at the same alpha (the first from the previous alpha's; a far
    one that fails is walked: _AlongLambda.row). With require_valid (factorized), points whose
    state evolution is not valid (kappa < rank: the student of width kappa d cannot hold the learned S) count as
    +inf. One row per alpha: the state-evolution row at lambda* (test_error, train_loss, estimation_error, ...),
    lam_star, at_bound (lambda* at a bound of lam_bounds: the minimum may lie beyond), the bracket, the lambdas
    solved (lams, test_errors), validity_bound (with require_valid: a solved lambda next to lambda* is invalid and
    has a lower test error, so lambda* is the edge of the valid region, rank = kappa, not an interior minimum of
    the state evolution), failures (solves that did not converge; a failure inside the final bracket makes the
    row unconverged), converged and reason. resolution: the power-law target's atoms merged (target_law)."""
    from attnrepro.theory.erm_curve import softmax_channel
    from attnrepro.theory.spectral_laws import target_law

    if model not in MAPS:
        raise ValueError(f"model must be 'factorized' or 'direct', got {model!r}")
    law = target_law(target, d, kappa0, gamma, resolution=resolution)
    channel = softmax_channel(law, T, Delta, beta, beta0, rule, points, seed)
    lo, hi = math.log(lam_bounds[0]), math.log(lam_bounds[1])
    centre, rows, previous = math.log(start_lam), [], None
    for alpha in sorted(float(a) for a in alphas):
        t0 = time.perf_counter()
        along = _AlongLambda(model, law, channel, alpha, kappa, tol, max_evals, nodes,
                             require_valid and model == "factorized", log,
                             previous)
        x, (a, b) = _minimise(along.objective, lo, hi, centre, width, xatol)
        best = along.rows[x]
        failed = {k: r for k, r in along.rows.items() if not r["converged"]}
        inside = [k for k in failed if a <= k <= b]
        reason = ""
        if not math.isfinite(along.objective(x)):
            reason = "no lambda solved: " + "; ".join(f"lambda = {math.exp(k):.3g}: {r['reason']}"
                                                      for k, r in sorted(failed.items()))
        elif inside:
            reason = "solves failed inside the final bracket: " + "; ".join(
                f"lambda = {math.exp(k):.3g}: {failed[k]['reason']}" for k in sorted(inside))
        solved = sorted(along.rows.items())
        at = [k for k, _ in solved].index(x)
        edge = [r for _, r in solved[max(at - 1, 0):at + 2] if r["converged"] and not r.get("valid", True)
                and r["test_error"] < best.get("test_error", math.inf)]
        row = {**{k: v for k, v in best.items() if k not in ("converged", "reason", "seconds")},
               "alpha": alpha, "model": model, "lam_star": math.exp(x),
               "at_bound": bool(min(x - lo, hi - x) <= 2 * xatol), "bracket": (math.exp(a), math.exp(b)),
               "lams": [math.exp(k) for k, _ in solved],
               "test_errors": [r.get("test_error", NAN) if r["converged"] else NAN for _, r in solved],
               "validity_bound": bool(edge), "failures": len(failed), "converged": not reason, "reason": reason,
               "seconds": time.perf_counter() - t0}
        rows.append(row)
        along.previous = None
        if along._nearest(x):
            previous = along
        if not reason:
            centre = x
        if log:
            log(f"  {model}: alpha = {alpha:g}: lambda* = {math.exp(x):.4g}, test error "
                f"{row.get('test_error', NAN):.6f}" + (f" FAILED ({reason})" if reason else "")
                + f", {len(solved)} solves, {row['seconds']:.1f}s")
    return rows
