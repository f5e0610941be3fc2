"""Paper B's ERM state evolution (Claim 3.1): test error, training loss and learned spectrum of
weight-decayed ERM with tied attention, by a root finder on variables that stay finite as lambda -> 0+.

The free energy, with lambda~ = sqrt(kappa) lambda and this project's penalty (lambda/2)||W||_F^2
(so eps = lambda~/mhat; SPEC), is the extremum of

    Phi = (qhat Sigma + 2 mhat m - Sigmahat q)/4 + alpha M(Sigma, m, q) - (mhat^2 / (4 Sigmahat)) J(delta, eps),
    delta = sqrt(qhat)/mhat,   eps = lambda~/mhat,   eta = mhat/Sigmahat.

Stationarity (docs/state_evolution.md derives it):

    qhat = -4 alpha dM/dSigma,   mhat = -2 alpha dM/dm,   Sigmahat = 4 alpha dM/dq,
    Sigma = D / Sigmahat,   m = eta (K - delta^2 D),   q = eta^2 J,
    D = (dJ/ddelta) / (2 delta),   K = int x (x - eps)_+ dmu_delta = J - (eps/2) dJ/deps.

The fixed point (Sigma, m, q) = F(Sigma, m, q) is solved as a root of

    r(y) = (log Sigma' - log Sigma, (m' - m)/sqrt(Q0 q), log q' - log q),   y = (log(lambda~ Sigma), m, log q),

by Newton's method with a forward-difference Jacobian, Broyden updates and a backtracking line search
(theory.root_finding); the Jacobian is passed along a sweep, and so is y. Below the interpolation threshold
Sigma grows like 1/lambda, and lambda~ Sigma, m, q stay finite: so does y. Where a point cannot start
from its neighbours, solve_continued tries the channel's quadratic surrogate, S = 0 (null_point: eps
beyond the support of mu_delta, where the logarithms end), a path down in lambda, and last the damped
iteration x <- (1 - rho) x + rho F(x) (solve_damped).

Outputs: the estimation error E = Q0 - 2m + q (= ||S - S0||_F^2 / d), the training loss per sample and
the test error from the output channel, the learned-spectrum law eta ReLU(S0 + delta Z - eps I) with its
atom F_delta(eps) at 0, the validity condition kappa >= 1 - F_delta(eps), and the worst prox residual.

lambda = 0 means lambda -> 0+: below alpha_interp the closed form of theory.interpolating_limit; above it
(Delta > 0) the fixed point at lambda = 0 itself (solve_ridgeless): no PSD S fits the labels there, the
training loss stays positive, Sigma stays finite as lambda -> 0 and so eps = lambda~/mhat -> 0, and the
equations above with eps = 0 are solved in y = (log Sigma, m, log q). The two branches meet at alpha_interp,
where Sigma of the branch above grows without bound (docs/state_evolution.md, "Above alpha_interp").

Other students: the solvers (solve, solve_damped, solve_continued, solve_ridgeless, state_evolution_curve) take
the map's class, fmap_class (default FixedPointMap, weight decay on W). A subclass replaces the prior side and
says what differs: the rank and validity of a point (rank, valid), solve_continued's routes after the warm starts
(fallbacks), the surrogate's lambda = 0 start (surrogate_zero_start) and the curve's lambda -> 0+ rows
(lambda_zero_limit: a LambdaZeroLimit). theory.direct_state_evolution's DirectFixedPointMap is one.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

import numpy as np

from attnrepro.theory.free_convolution import FreeConvolution
from attnrepro.theory.interpolating_limit import interpolating_limit
from attnrepro.theory.interpolation import interpolation_threshold
from attnrepro.theory.root_finding import NotConverged, newton_root
from attnrepro.theory.softmax_prox import ProxNotSolved
from attnrepro.theory.spectral_laws import SpectralLaw


class OutOfDomain(ValueError):
    """The map is undefined here: a hatted variable or a new (Sigma, q) is not positive."""


@dataclass
class SEPoint:
    alpha: float
    lam: float
    Sigma: float
    m: float
    q: float
    Sigma_hat: float
    m_hat: float
    q_hat: float
    eta: float
    delta: float
    eps: float
    estimation_error: float
    train_loss: float
    test_error: float
    rank: float            # 1 - F_delta(eps): fraction of non-zero learned eigenvalues
    valid: bool            # kappa >= rank
    iterations: int        # map evaluations
    residual: float        # the largest |r| at the solution
    prox_residual: float   # the largest |grad| of the output channel's proximal problems at the solution
    method: str            # "newton", "damped", "null" (S = 0), "lambda_zero" (lambda = 0 above alpha_interp);
                           # the other lambda -> 0+ rows: "interpolating_limit", "threshold", "perfect_recovery"

    def row(self) -> dict:
        return asdict(self)


@dataclass
class Evaluation:
    state: tuple[float, float, float]   # (Sigma, m, q)
    new: tuple[float, float, float]     # F(Sigma, m, q)
    hats: tuple[float, float, float]    # (qhat, mhat, Sigmahat)
    prior: tuple[float, float, float]   # (delta, eps, eta)
    fc: FreeConvolution
    channel_value: object


class FixedPointMap:
    """F(Sigma, m, q) at one (alpha, lambda, kappa): the channel's hats, then the prior side."""

    def __init__(self, law: SpectralLaw, channel, alpha: float, lam: float, kappa: float, nodes: int):
        if not (alpha > 0 and lam >= 0 and kappa > 0):
            raise ValueError(f"need alpha > 0, lambda >= 0, kappa > 0; got {alpha}, {lam}, {kappa}")
        self.law, self.channel, self.alpha, self.lam, self.kappa, self.nodes = law, channel, alpha, lam, kappa, nodes
        self.lam_t = math.sqrt(kappa) * lam
        self.calls = 0

    def hats(self, state):
        self.calls += 1
        v = self.channel.evaluate(*state)
        a = self.alpha
        return (-4 * a * v.dSigma, -2 * a * v.dm, 4 * a * v.dq), v

    def prior(self, hats):
        qhat, mhat, shat = hats
        if not (qhat > 0 and mhat > 0 and shat > 0):
            raise OutOfDomain(f"left the domain: qhat = {qhat:.3g}, mhat = {mhat:.3g}, Sigmahat = {shat:.3g}")
        delta, eps, eta = math.sqrt(qhat) / mhat, self.lam_t / mhat, mhat / shat
        try:
            fc = FreeConvolution(self.law, delta, self.nodes)
        except (ValueError, RuntimeError) as e:  # delta so small (or large) that mu_delta is not resolved
            raise OutOfDomain(f"left the domain: delta = {delta:.3g} ({e})") from e
        J, dJd, K = fc.J(eps), fc.dJ_ddelta(eps), fc.K(eps)
        D = dJd / (2 * delta)
        return (D / shat, eta * (K - delta * delta * D), eta * eta * J), (delta, eps, eta), fc

    def __call__(self, state) -> Evaluation:
        hats, v = self.hats(state)
        new, prior, fc = self.prior(hats)
        return Evaluation(tuple(state), new, hats, prior, fc, v)

    # ------------------------------------------------------------ the root-finding variables
    def to_y(self, state) -> np.ndarray:
        """(log(lambda~ Sigma), m, log q); log Sigma at lambda = 0 (a channel whose Sigma stays finite)."""
        Sigma, m, q = state
        return np.array([math.log((self.lam_t or 1.0) * Sigma), m, math.log(q)])

    def from_y(self, y) -> tuple[float, float, float]:
        return (math.exp(y[0]) / (self.lam_t or 1.0), float(y[1]), math.exp(y[2]))

    def residual(self, y) -> tuple[np.ndarray, Evaluation]:
        try:
            state = self.from_y(y)
        except OverflowError as e:
            raise OutOfDomain(f"y = {y} out of range") from e
        if not (state[0] > 0 and state[2] > 0):  # exp underflowed: Sigma or q is 0 in floating point
            raise OutOfDomain(f"y = {y} out of range (Sigma = {state[0]:.3g}, q = {state[2]:.3g})")
        ev = self(state)
        (S1, m1, q1), (S0, m0, q0) = ev.new, state
        if not (S1 > 0 and q1 > 0):
            raise OutOfDomain(f"the map gives Sigma = {S1:.3g}, q = {q1:.3g} (S = 0 or beyond)")
        return np.array([math.log(S1 / S0), (m1 - m0) / math.sqrt(self.law.Q0 * q0), math.log(q1 / q0)]), ev

    # ------------------------------------------------------------ what a student's map says besides F
    label = ""  # the prefix of a curve's log lines

    def rank(self, ev: Evaluation) -> float:
        """1 - F_delta(eps): the fraction of non-zero eigenvalues of eta ReLU(S0 + delta Z - eps I)."""
        return float(1 - ev.fc.cdf(ev.prior[1]))

    def valid(self, rank: float) -> bool:
        """kappa >= rank: the width kappa d holds the learned rank (Claim 3.1's condition)."""
        return bool(self.kappa >= rank)

    def fallbacks(self, **kw) -> list[Route]:
        """solve_continued's routes after the warm starts: from the quadratic surrogate's fixed point (its damped
        iteration where its root finder fails); S = 0, when it is the fixed point (null_point); a path down from
        lambda = max(LADDER_TOP, lambda) (_continued_path); the damped iteration from the default start."""
        law, channel, where, nodes = self.law, self.channel, (self.alpha, self.lam, self.kappa), kw.get("nodes", 200)
        routes = []
        if hasattr(channel, "surrogate"):
            routes.append(("from the quadratic surrogate's fixed point", lambda: from_surrogate(self, True, **kw)))
        routes += [("S = 0", lambda: _found(null_point(law, channel, *where, nodes))),
                   (f"lambda path from {max(LADDER_TOP, self.lam):g}",
                    lambda: _continued_path(law, channel, *where, **kw)),
                   ("damped iteration", lambda: (solve_damped(law, channel, *where, nodes=nodes), None))]
        return routes

    def surrogate_zero_start(self, quad, **kw) -> SEPoint:
        """The lambda = 0 fixed point of the quadratic surrogate `quad` (solve_ridgeless's second route): down a
        lambda path to 1e-8, then lambda = 0."""
        start = _continued_path(self.law, quad, self.alpha, 1e-8, self.kappa, **kw)[0]
        return solve(self.law, quad, self.alpha, 0.0, self.kappa, init=_state(start), **kw)[0]

    @classmethod
    def lambda_zero_limit(cls, law, channel, kappa, T, Delta, ratio=1.0, log=None, **kw) -> LambdaZeroLimit:
        """state_evolution_curve's rows at lambda -> 0+ for this student."""
        return FactorizedLambdaZero(law, channel, kappa, T, Delta, ratio, log, **kw)


def _point(fmap: FixedPointMap, ev: Evaluation, method: str, iterations: int, residual: float) -> SEPoint:
    """The row of a solved point: the state, the hats, (eta, delta, eps), the outputs, and the map's rank and
    validity (fmap.rank, fmap.valid)."""
    (Sigma, m, q), (qhat, mhat, shat), (delta, eps, eta) = ev.state, ev.hats, ev.prior
    law, channel = fmap.law, fmap.channel
    rank = fmap.rank(ev)
    return SEPoint(alpha=fmap.alpha, lam=fmap.lam, Sigma=Sigma, m=m, q=q, Sigma_hat=shat, m_hat=mhat, q_hat=qhat,
                   eta=eta, delta=delta, eps=eps, estimation_error=law.Q0 - 2 * m + q,
                   train_loss=ev.channel_value.train_loss, test_error=channel.test_error(m, q), rank=rank,
                   valid=fmap.valid(rank), iterations=iterations, residual=residual,
                   prox_residual=ev.channel_value.prox_residual, method=method)


def default_start(law: SpectralLaw) -> tuple[float, float, float]:
    return (1.0, 0.5 * law.Q0, 0.5 * law.Q0)


def solve(law: SpectralLaw, channel, alpha: float, lam: float, kappa: float, init=None, jac=None,
          tol: float = 1e-7, max_evals: int = 40, nodes: int = 200,
          fmap_class: type[FixedPointMap] = FixedPointMap) -> tuple[SEPoint, np.ndarray]:
    """The fixed point of fmap_class's map (default FixedPointMap: weight decay on W) at (alpha, lambda) by
    newton_root from init = (Sigma, m, q) (default (1, Q0/2, Q0/2)); jac: the Jacobian in y of a nearby point (a
    sweep passes it on). Returns the point and the Jacobian; raises NotConverged. lambda = 0 only where Sigma
    stays finite (the softmax channel above alpha_interp: solve_ridgeless; below it the lambda -> 0+ limit is
    interpolating_limit)."""
    fmap = fmap_class(law, channel, alpha, lam, kappa, nodes)
    y0 = fmap.to_y(init if init is not None else default_start(law))
    try:
        y, r, ev, jac, evals = newton_root(fmap.residual, y0, jac, tol=tol, max_evals=max_evals)
    except (ValueError, ProxNotSolved) as e:  # the start itself is outside the domain
        raise NotConverged(f"root finder: {type(e).__name__}: {e}") from e
    return _point(fmap, ev, "newton", evals, float(np.max(np.abs(r)))), jac


def solve_damped(law: SpectralLaw, channel, alpha: float, lam: float, kappa: float, init=None,
                 damping: float = 0.3, tol: float = 1e-7, max_iter: int = 300, nodes: int = 200,
                 fmap_class: type[FixedPointMap] = FixedPointMap) -> SEPoint:
    """The fixed point of fmap_class's map by the damped iteration x <- (1 - damping) x + damping F(x) until every
    coordinate moves by less than tol (relative); returns S = 0 when eps stays beyond the support of mu_delta.
    Raises NotConverged."""
    fmap = fmap_class(law, channel, alpha, lam, kappa, nodes)
    state = tuple(init) if init is not None else default_start(law)
    residual = math.inf
    for it in range(1, max_iter + 1):
        try:
            ev = fmap(state)
        except ValueError as e:  # OutOfDomain, or a channel refusing the state
            raise NotConverged(f"damped iteration {it}: {e}") from e
        new = ev.new
        if new[2] <= 0 and state[2] < 1e-10 * law.Q0:  # eps stays beyond the support of mu_delta: S = 0
            return _null_point(fmap, ev, it)
        residual = max(abs(a - b) / max(abs(a), abs(b), 1e-300) for a, b in zip(state, new, strict=True))
        state = tuple((1 - damping) * a + damping * b for a, b in zip(state, new, strict=True))
        if not all(map(math.isfinite, state)):
            raise NotConverged(f"damped iteration left the domain at iteration {it}: (Sigma, m, q) = {state}")
        if residual < tol:
            return _point(fmap, fmap(state), "damped", it + 1, residual)
    raise NotConverged(f"damped iteration: no convergence in {max_iter} iterations at alpha = {alpha:g}, "
                       f"lambda = {lam:g}: residual {residual:.2e} > tol {tol:g}")


def _null_point(fmap: FixedPointMap, ev: Evaluation, it: int) -> SEPoint:
    """S = 0: every learned eigenvalue in the atom (weight decay beyond the spectrum's reach)."""
    (qhat, mhat, shat), (delta, eps, eta) = ev.hats, ev.prior
    law, channel = fmap.law, fmap.channel
    return SEPoint(alpha=fmap.alpha, lam=fmap.lam, Sigma=0.0, m=0.0, q=0.0, Sigma_hat=shat, m_hat=mhat, q_hat=qhat,
                   eta=eta, delta=delta, eps=eps, estimation_error=law.Q0, train_loss=ev.channel_value.train_loss,
                   test_error=channel.test_error(0.0, 0.0), rank=0.0, valid=True, iterations=it, residual=0.0,
                   prox_residual=ev.channel_value.prox_residual, method="null")


LADDER_TOP, LADDER_STEP = 0.1, math.sqrt(10)


def null_point(law: SpectralLaw, channel, alpha: float, lam: float, kappa: float, nodes: int = 200) -> SEPoint | None:
    """S = 0 as the fixed point, when it is one: the hats at S = 0 (channel.at_zero) put eps = lambda~/mhat
    beyond the support of mu_delta (J = 0, so S stays 0). None when it is not a fixed point."""
    if not hasattr(channel, "at_zero") or lam <= 0:
        return None
    v = channel.at_zero()
    fmap = FixedPointMap(law, channel, alpha, lam, kappa, nodes)
    hats = (-4 * alpha * v.dSigma, -2 * alpha * v.dm, 4 * alpha * v.dq)
    try:
        new, prior, fc = fmap.prior(hats)
    except OutOfDomain:
        return None
    if new[2] > 0:
        return None
    ev = Evaluation((0.0, 0.0, 0.0), new, hats, prior, fc, v)
    return _null_point(fmap, ev, 1)


# ---------------------------------------------------------------- routes: the first one that solves

Found = tuple[SEPoint, "np.ndarray | None"]
Route = tuple[str, Callable[[], "Found | None"]]
ROUTE_ERRORS = (NotConverged, ProxNotSolved, ValueError)


def first_route(routes: Iterable[Route], log=None) -> Found:
    """The result of the first route (name, fn) whose fn() returns a point; a route that returns None is passed
    over silently, one that raises NotConverged, ProxNotSolved or ValueError is passed over with its reason.
    Raises NotConverged naming every route's failure."""
    errors = []
    for name, fn in routes:
        try:
            found = fn()
        except ROUTE_ERRORS as e:
            errors.append(f"{name}: {e}")
            if log:
                log(f"      {name} failed: {e}")
            continue
        if found is not None:
            return found
    raise NotConverged("; ".join(errors))


def _state(p: SEPoint) -> tuple[float, float, float]:
    return (p.Sigma, p.m, p.q)


def _found(p: SEPoint | None) -> Found | None:
    """A route's result from a point found without a Jacobian (None: no point)."""
    return None if p is None else (p, None)


def from_surrogate(fmap: FixedPointMap, damped_fallback: bool, **kw) -> Found:
    """The fixed point at fmap's (alpha, lambda), started from the fixed point of the channel's quadratic surrogate
    (channel.surrogate(): exact and cheap) at the same point; with damped_fallback, the surrogate's damped
    iteration (1000 steps) where its root finder fails. Raises NotConverged when the surrogate's point is S = 0."""
    cls, law, quad = type(fmap), fmap.law, fmap.channel.surrogate()
    where = (fmap.alpha, fmap.lam, fmap.kappa)
    try:
        start = solve(law, quad, *where, fmap_class=cls, **kw)[0]
    except NotConverged:
        if not damped_fallback:
            raise
        start = solve_damped(law, quad, *where, nodes=kw.get("nodes", 200), max_iter=1000, fmap_class=cls)
    if start.q <= 0:
        raise NotConverged("the surrogate's fixed point is S = 0")
    return solve(law, fmap.channel, *where, init=_state(start), fmap_class=cls, **kw)


def solve_continued(law: SpectralLaw, channel, alpha: float, lam: float, kappa: float, inits=(), jac=None,
                    log=None, fmap_class: type[FixedPointMap] = FixedPointMap, **kw) -> Found:
    """The fixed point of fmap_class's map at (alpha, lambda > 0), by the first route that works (first_route):
    solve from each of `inits` (warm starts; jac the last Jacobian), then the map's own routes
    (fmap_class.fallbacks; for FixedPointMap: the quadratic surrogate's fixed point, S = 0 when it is the fixed
    point, a path down in lambda, the damped iteration). Returns (point, Jacobian or None); raises NotConverged
    naming every route's failure."""
    warm = [("warm start", lambda init=init: solve(law, channel, alpha, lam, kappa, init=init, jac=jac,
                                                   fmap_class=fmap_class, **kw))
            for init in inits if init is not None]
    fmap = fmap_class(law, channel, alpha, lam, kappa, kw.get("nodes", 200))
    return first_route(warm + fmap.fallbacks(**kw), log)


def _continued_path(law, channel, alpha, lam, kappa, **kw):
    """solve at lambda = max(LADDER_TOP, lambda), then down to lambda in steps of LADDER_STEP."""
    ladder = [lam]
    while ladder[-1] * LADDER_STEP < LADDER_TOP:
        ladder.append(ladder[-1] * LADDER_STEP)
    if lam < LADDER_TOP:
        ladder.append(LADDER_TOP)
    start, path_jac, prev = None, None, None
    for step_lam in reversed(ladder):
        if start is not None:  # keep lambda~ Sigma: below alpha_interp Sigma grows like 1/lambda
            start = (start[0] * prev / step_lam, *start[1:])
        try:
            p, path_jac = solve(law, channel, alpha, step_lam, kappa, init=start, jac=path_jac, **kw)
        except NotConverged as e:
            raise NotConverged(f"at lambda = {step_lam:g}: {e}") from e
        start, prev = (p.Sigma, p.m, p.q), step_lam
    return p, path_jac


# ---------------------------------------------------------------- lambda -> 0+ above alpha_interp

RIDGELESS_PATH = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6)   # the lambda path of solve_ridgeless's last route


def solve_ridgeless(law: SpectralLaw, channel, alpha: float, kappa: float, inits=(), jac=None, log=None,
                    fmap_class: type[FixedPointMap] = FixedPointMap, **kw) -> Found:
    """The lambda -> 0+ fixed point above the interpolation threshold (Delta > 0), solved at lambda = 0.

    Above alpha_interp no PSD S fits the labels: the training loss stays positive, the Moreau width Sigma
    and the hats stay finite as lambda -> 0, and eps = lambda~/mhat -> 0. The limit is the fixed point of the
    stationarity equations at eps = 0 (FixedPointMap at lambda = 0; docs/state_evolution.md):

        qhat = -4 alpha dM/dSigma,   mhat = -2 alpha dM/dm,   Sigmahat = 4 alpha dM/dq,
        Sigma = D(delta, 0)/Sigmahat,   m = eta (J(delta, 0) - delta^2 D(delta, 0)),   q = eta^2 J(delta, 0),

    a root of r(y), y = (log Sigma, m, log q), by newton_root (fmap_class's map at lambda = 0: another
    student's prior side, e.g. the direct student's above 1/(T^2 + T - 2)). Routes, in turn:

    1. from each of `inits` (warm starts along a sweep; jac the last Jacobian);
    2. from the lambda = 0 fixed point of the channel's quadratic surrogate (fmap.surrogate_zero_start; the
       surrogate's Sigma is finite above the same threshold);
    3. down the lambda path RIDGELESS_PATH (solve_continued at the first lambda, then each from the last
       (Sigma, m, q)), then lambda = 0 from the last.

    Returns (point, Jacobian) with method "lambda_zero"; raises NotConverged naming every route's failure."""
    def at_zero(init, jac0=None):
        p, j = solve(law, channel, alpha, 0.0, kappa, init=init, jac=jac0, fmap_class=fmap_class, **kw)
        p.method = "lambda_zero"
        return p, j

    def down_the_path():
        p = solve_continued(law, channel, alpha, RIDGELESS_PATH[0], kappa, fmap_class=fmap_class, **kw)[0]
        for lam in RIDGELESS_PATH[1:]:
            if p.q <= 0:
                raise NotConverged(f"S = 0 at lambda = {p.lam:g}")
            try:  # above alpha_interp Sigma stays finite: hold (Sigma, m, q)
                p = solve(law, channel, alpha, lam, kappa, init=_state(p), fmap_class=fmap_class, **kw)[0]
            except NotConverged as e:
                raise NotConverged(f"at lambda = {lam:g}: {e}") from e
        return at_zero(_state(p))

    routes = [("warm start", lambda init=init: at_zero(init, jac)) for init in inits if init is not None]
    if hasattr(channel, "surrogate"):
        fmap = fmap_class(law, channel, alpha, 0.0, kappa, kw.get("nodes", 200))
        routes.append(("from the quadratic surrogate's lambda = 0 fixed point",
                       lambda: at_zero(_state(fmap.surrogate_zero_start(channel.surrogate(), **kw)))))
    routes.append((f"lambda path {RIDGELESS_PATH[0]:g} ... {RIDGELESS_PATH[-1]:g}, then 0", down_the_path))
    return first_route(routes, log)


def _ridgeless_start(solved: list[tuple[float, np.ndarray]], alpha: float, alpha_interp: float) -> np.ndarray | None:
    """y = (log Sigma, m, log q) at alpha, linear in log(alpha - alpha_interp) through the two nearest solved
    points of the lambda = 0 branch above alpha_interp (log Sigma is close to linear there: Sigma grows like a
    power of 1/(alpha - alpha_interp) as alpha -> alpha_interp+)."""
    if not solved:
        return None
    near = sorted(solved, key=lambda ay: abs(math.log((ay[0] - alpha_interp) / (alpha - alpha_interp))))[:2]
    if len(near) == 1:
        return near[0][1]
    (a1, y1), (a2, y2) = near
    s1, s2, s = (math.log(a - alpha_interp) for a in (a1, a2, alpha))
    return y2 + (y2 - y1) * (s - s2) / (s2 - s1)


# ---------------------------------------------------------------- a curve in alpha

def _extrapolated(fmap_y: list[tuple[float, np.ndarray]], alpha: float) -> np.ndarray | None:
    """y at alpha, linear in alpha through the last two solutions (the last one alone if only one)."""
    if not fmap_y:
        return None
    if len(fmap_y) == 1:
        return fmap_y[-1][1]
    (a1, y1), (a2, y2) = fmap_y[-2:]
    return y2 + (y2 - y1) * (alpha - a2) / (a2 - a1)


@dataclass
class Sweep:
    """What a curve in alpha carries from point to point: the solved points (alpha, y) in the order solved, and
    the last Jacobian (None after a failure)."""

    solved: list = field(default_factory=list)
    jac: np.ndarray | None = None

    def starts(self, fmap: FixedPointMap) -> list[tuple[float, float, float]]:
        """(Sigma, m, q) to start fmap's point from: y extrapolated linearly in alpha through the last two solved
        points, and the last one (each only with |y| < 50)."""
        ys = (_extrapolated(self.solved, fmap.alpha), self.solved[-1][1] if self.solved else None)
        return [fmap.from_y(y) for y in ys if y is not None and np.all(np.abs(y) < 50)]

    def add(self, fmap: FixedPointMap, p: SEPoint) -> None:
        self.solved.append((fmap.alpha, fmap.to_y(_state(p))))


class LambdaZeroLimit:
    """The rows of state_evolution_curve at lambda = 0 (lambda -> 0+) for one student (fmap_class): a closed form
    where the limit interpolates (`closed_form(alpha)` says where; `limit_row` computes it), elsewhere the fixed
    point at lambda = 0 (solve_ridgeless), solved after the closed-form points from the largest alpha down, each
    from `starts(fmap, sweep)`. A subclass gives closed_form, limit_row and starts."""

    fmap_class: type[FixedPointMap]

    def __init__(self, law: SpectralLaw, channel, kappa: float, T: int, Delta: float, ratio: float = 1.0, log=None,
                 **kw):
        self.law, self.channel, self.kappa, self.T, self.Delta, self.ratio = law, channel, kappa, T, Delta, ratio
        self.log, self.kw = log, kw

    def closed_form(self, alpha: float) -> bool:
        raise NotImplementedError

    def limit_row(self, alpha: float) -> dict:
        raise NotImplementedError

    def starts(self, fmap: FixedPointMap, sweep: Sweep) -> list[tuple[float, float, float]]:
        raise NotImplementedError

    def order(self, alphas: list[float]) -> list[float]:
        """The closed-form points in the given order, then the others from the largest alpha down (the fixed point
        at lambda = 0 grows without bound towards the threshold: each point starts from its neighbours above)."""
        return ([a for a in alphas if self.closed_form(a)]
                + sorted((a for a in alphas if not self.closed_form(a)), reverse=True))

    def row(self, alpha: float, sweep: Sweep) -> dict:
        if self.closed_form(alpha):
            return self.limit_row(alpha)
        fmap = self.fmap_class(self.law, self.channel, alpha, 0.0, self.kappa, self.kw.get("nodes", 200))
        p, sweep.jac = solve_ridgeless(self.law, self.channel, alpha, self.kappa, inits=self.starts(fmap, sweep),
                                       jac=sweep.jac, log=self.log, fmap_class=self.fmap_class, **self.kw)
        sweep.add(fmap, p)
        return p.row()


class FactorizedLambdaZero(LambdaZeroLimit):
    """lambda -> 0+ for weight decay on W: interpolating_limit below alpha_interp (Cor. 3.2), the meeting point at
    alpha_interp, S = r S0 above it with Delta = 0, a channel whose Sigma stays finite at lambda = 0 solved
    directly (_limit_row); above alpha_interp with Delta > 0 the fixed point at lambda = 0, each point started
    from its neighbours above with y linear in log(alpha - alpha_interp) (_ridgeless_start) and, within
    NEAR_THRESHOLD of alpha_interp, from (NEAR_SIGMA, m, q of the threshold)."""

    fmap_class = FixedPointMap

    def __init__(self, law, channel, kappa, T, Delta, ratio=1.0, log=None, **kw):
        super().__init__(law, channel, kappa, T, Delta, ratio, log, **kw)
        try:
            self.threshold = interpolation_threshold(law, T, Delta)
        except ValueError as e:
            self.threshold = e
        self.ridgeless = (not isinstance(self.threshold, Exception) and Delta > 0
                          and not getattr(channel, "finite_at_zero_lambda", False))

    def closed_form(self, alpha: float) -> bool:
        return not (self.ridgeless and alpha > self.threshold.alpha)

    def limit_row(self, alpha: float) -> dict:
        return _limit_row(self.law, self.channel, alpha, self.kappa, self.T, self.Delta, self.ratio, self.threshold,
                          **self.kw)

    def starts(self, fmap: FixedPointMap, sweep: Sweep) -> list[tuple[float, float, float]]:
        a0 = self.threshold.alpha
        ys = [_ridgeless_start(sweep.solved, fmap.alpha, a0)]
        if len(sweep.solved) > 1:  # the extrapolation's fallback: the nearest solved point above
            ys.append(sweep.solved[-1][1])
        inits = [fmap.from_y(y) for y in ys if y is not None and np.all(np.abs(y) < 50)]
        if fmap.alpha - a0 < NEAR_THRESHOLD * a0:  # (m, q) close to the threshold's
            inits.append((NEAR_SIGMA, *_threshold_mq(self.law, self.threshold, self.ratio, self.kw.get("nodes", 400))))
        return inits

    def row(self, alpha: float, sweep: Sweep) -> dict:
        try:
            return super().row(alpha, sweep)
        except NotConverged as e:
            a0, solved = self.threshold.alpha, sweep.solved
            near = f"; Sigma = {math.exp(solved[-1][1][0]):.3g} at alpha = {solved[-1][0]:g}" if solved else ""
            raise NotConverged(
                f"lambda = 0 above alpha_interp = {a0:.6g} (alpha - alpha_interp = {alpha - a0:.3g}; Sigma grows "
                f"without bound as alpha -> alpha_interp+{near}) not solved: {e}") from e


CURVE_ERRORS = (NotConverged, ProxNotSolved, ValueError, FloatingPointError)


def _row_at(fmap_class, law, channel, alpha, lam, kappa, sweep: Sweep, log, **kw) -> dict:
    """One lambda > 0 row of a curve: solve_continued from the sweep's starts, with its last Jacobian."""
    fmap = fmap_class(law, channel, alpha, lam, kappa, kw.get("nodes", 200))
    p, sweep.jac = solve_continued(law, channel, alpha, lam, kappa, inits=sweep.starts(fmap), jac=sweep.jac, log=log,
                                   fmap_class=fmap_class, **kw)
    if p.method in ("newton", "damped"):
        sweep.add(fmap, p)
    return p.row()


def state_evolution_curve(law: SpectralLaw, channel, alphas, lam: float, kappa: float, T: int, Delta: float,
                          ratio: float = 1.0, log=None, descending: bool = False,
                          fmap_class: type[FixedPointMap] = FixedPointMap, **kw) -> list[dict]:
    """The fixed point of fmap_class's map (default FixedPointMap: weight decay on W) at every alpha, one row each
    (SEPoint's fields, converged, reason), in ascending alpha; solved in that order, or from the largest alpha
    down when `descending` (the power-law targets at large d: their smallest alphas do not converge from a cold
    start, and do from their neighbour above).

    lambda > 0: solve_continued, each point started from the previous ones (y extrapolated linearly in
    alpha) with the last Jacobian. lambda = 0 means lambda -> 0+: the map's LambdaZeroLimit
    (fmap_class.lambda_zero_limit) says which points are in closed form and solves the others at lambda = 0
    (solve_ridgeless) from the largest alpha down, whatever `descending` says. For FixedPointMap
    (FactorizedLambdaZero): interpolating_limit below alpha_interp; above it, with Delta = 0, perfect recovery
    (S = r S0); with Delta > 0 the fixed point at lambda = 0 (a quadratic channel: its own lambda = 0 solve).
    A point that fails is a row with converged = False and its reason; the others go on."""
    order = sorted((float(a) for a in alphas), reverse=descending)
    limit = fmap_class.lambda_zero_limit(law, channel, kappa, T, Delta, ratio, log=log, **kw) if lam == 0 else None
    if limit is not None:
        order = limit.order(order)
    rows, sweep = [], Sweep()
    for alpha in order:
        t0, calls0 = time.perf_counter(), getattr(channel, "evaluations", 0)
        try:
            if limit is not None:
                row = limit.row(alpha, sweep)
            else:
                row = _row_at(fmap_class, law, channel, alpha, lam, kappa, sweep, log, **kw)
            reason = row.pop("reason", "")
        except CURVE_ERRORS as e:
            row, reason, sweep.jac = {"alpha": alpha, "lam": lam, "method": "failed"}, f"{type(e).__name__}: {e}", None
        row.update(converged=not reason, reason=reason, seconds=time.perf_counter() - t0,
                   channel_evaluations=getattr(channel, "evaluations", 0) - calls0)
        rows.append(row)
        if log:
            status = row["method"] if not reason else "FAILED"
            log(f"    {fmap_class.label}alpha = {alpha:g}, lambda = {lam:g}: {status}"
                + (f" ({reason})" if reason else "")
                + f", {row['channel_evaluations']} channel evaluations, {row['seconds']:.1f}s")
    return sorted(rows, key=lambda r: r["alpha"])


NEAR_THRESHOLD, NEAR_SIGMA = 0.05, 1e6   # within 5% of alpha_interp: also start from (1e6, m, q of the threshold)


def _threshold_mq(law, threshold, ratio: float, nodes: int) -> tuple[float, float]:
    """(m, q) where the two lambda -> 0+ branches meet (alpha_interp: eps = 0, delta = dbar):
    m = r (J - dbar^2 D) = r (Q0 + Delta/2), q = r^2 J, at (dbar, 0)."""
    fc = FreeConvolution(law, threshold.delta, nodes)
    J, D = fc.J(0.0), fc.dJ_ddelta(0.0) / (2 * threshold.delta)
    return ratio * (J - threshold.delta ** 2 * D), ratio * ratio * J


def _limit_row(law, channel, alpha, kappa, T, Delta, ratio, threshold, **kw) -> dict:
    """One lambda -> 0+ row (see state_evolution_curve)."""
    nan = float("nan")
    base = dict(alpha=alpha, lam=0.0, Sigma=nan, Sigma_hat=nan, m_hat=nan, q_hat=nan, eta=ratio, iterations=0,
                residual=nan, prox_residual=nan)
    if isinstance(threshold, Exception):
        raise ValueError(f"no interpolation threshold: {threshold}")
    if alpha < threshold.alpha:
        lim = interpolating_limit(law, T, Delta, alpha, ratio, nodes=kw.get("nodes", 400))
        return {**base, "m": lim.m, "q": lim.q, "delta": lim.delta, "eps": lim.eps,
                "estimation_error": law.Q0 - 2 * lim.m + lim.q, "train_loss": 0.0,
                "test_error": channel.test_error(lim.m, lim.q), "rank": lim.rank, "valid": bool(kappa >= lim.rank),
                "residual": lim.residual, "method": "interpolating_limit"}
    if getattr(channel, "finite_at_zero_lambda", False):  # a quadratic loss: Sigma stays finite at lambda = 0
        start = _continued_path(law, channel, alpha, 1e-8, kappa, **kw)[0]
        p = solve(law, channel, alpha, 0.0, kappa, init=(start.Sigma, start.m, start.q), **kw)[0]
        return {**p.row(), "method": "lambda_zero"}
    if Delta == 0:  # the exact fit is S0 itself: perfect recovery, S = r S0
        rank = 1.0 - sum(w for t, w in law.atoms if t == 0)
        m, q = ratio * law.Q0, ratio * ratio * law.Q0
        return {**base, "m": m, "q": q, "delta": 0.0, "eps": 0.0, "estimation_error": law.Q0 - 2 * m + q,
                "train_loss": 0.0, "test_error": 0.0, "rank": rank, "valid": bool(kappa >= rank),
                "residual": 0.0, "method": "perfect_recovery"}
    if alpha == threshold.alpha:  # where the two branches meet: eps = 0, delta = dbar, Sigma infinite
        m, q = _threshold_mq(law, threshold, ratio, kw.get("nodes", 400))
        return {**base, "m": m, "q": q, "delta": threshold.delta, "eps": 0.0, "estimation_error": law.Q0 - 2 * m + q,
                "train_loss": 0.0, "test_error": channel.test_error(m, q), "rank": threshold.rank,
                "valid": bool(kappa >= threshold.rank), "residual": threshold.residual, "method": "threshold"}
    raise ValueError(f"alpha = {alpha:g} > alpha_interp = {threshold.alpha:.6g}: the lambda = 0 fixed point is "
                     "solve_ridgeless's (state_evolution_curve)")
