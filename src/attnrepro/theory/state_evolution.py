"""Paper B's ERM state evolution (Claim 3.1): test error, training loss and learned spectrum of
weight-decayed ERM with tied attention, as a damped fixed-point iteration.

The free energy, with lambda~ = sqrt(kappa) lambda and this project's penalty (lambda/2)||W||_F^2
(so eps = lambda~/mhat; SPEC), is the extremum of

    Phi = (qhat Sigma + 2 mhat m - Sigmahat q)/4 + alpha M(Sigma, m, q) - (mhat^2 / (4 Sigmahat)) J(delta, eps),
    delta = sqrt(qhat)/mhat,   eps = lambda~/mhat,   eta = mhat/Sigmahat.

Stationarity (docs/state_evolution.md derives it):

    d/dSigma:    qhat     = -4 alpha dM/dSigma
    d/dm:        mhat     = -2 alpha dM/dm
    d/dq:        Sigmahat =  4 alpha dM/dq
    d/dqhat:     Sigma    = D / Sigmahat,            D = (dJ/ddelta) / (2 delta)
    d/dmhat:     m        = eta (K - delta^2 D),     K = int x (x - eps)_+ dmu_delta = J - (eps/2) dJ/deps
    d/dSigmahat: q        = eta^2 J

(J, D, K at (delta, eps); theory.free_convolution). Outputs: the estimation error
E = Q0 - 2m + q (= ||S - S0||_F^2 / d), the training loss per sample E l(x*) and the test error
E ||out(z0) - out(z)||^2 from the output channel, the learned-spectrum law
eta ReLU(S0 + delta Z - eps I), and the validity condition kappa >= 1 - F_delta(eps) (the
student's width must hold the learned rank).

The iteration: from (Sigma, m, q), the channel gives the hatted variables, the prior side the
new (Sigma, m, q); damped x <- (1 - rho) x + rho x_new. Warm starts along a sweep in alpha,
and at small lambda a path in lambda from a larger one (solve_continued). When eps lies beyond
the support of mu_delta (J = 0) the learned S is 0 and that point is returned.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .free_convolution import FreeConvolution
from .spectral_laws import SpectralLaw


class NotConverged(RuntimeError):
    """The iteration did not reach its tolerance (or left the domain Sigma, q > 0)."""


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
    iterations: int
    residual: float

    def row(self) -> dict:
        return asdict(self)


def _hats(channel, alpha: float, state: tuple[float, float, float]):
    v = channel.evaluate(*state)
    return -4 * alpha * v.dSigma, -2 * alpha * v.dm, 4 * alpha * v.dq, v  # qhat, mhat, Sigmahat


def _prior(law: SpectralLaw, qhat: float, mhat: float, shat: float, lam_t: float, nodes: int):
    if not (qhat > 0 and mhat > 0 and shat > 0):
        raise NotConverged(f"left the domain: qhat = {qhat:.3g}, mhat = {mhat:.3g}, Sigmahat = {shat:.3g}")
    delta, eps, eta = math.sqrt(qhat) / mhat, lam_t / mhat, mhat / shat
    fc = FreeConvolution(law, delta, nodes)
    J, dJd, K = fc.J(eps), fc.dJ_ddelta(eps), fc.K(eps)
    D = dJd / (2 * delta)
    return (D / shat, eta * (K - delta * delta * D), eta * eta * J), (delta, eps, eta, fc)


def solve(law: SpectralLaw, channel, alpha: float, lam: float, kappa: float, init=None, damping: float = 0.3,
          tol: float = 1e-6, max_iter: int = 300, nodes: int = 200, log=None) -> SEPoint:
    """The fixed point at (alpha, lambda) for a channel (output_channel.OutputChannel or LinearChannel),
    by the damped iteration x <- (1 - damping) x + damping map(x) from init = (Sigma, m, q) (default
    (1, Q0/2, Q0/2)), until the map moves every coordinate by less than tol (relative). Raises
    NotConverged."""
    if not (alpha > 0 and lam >= 0 and kappa > 0):
        raise ValueError(f"need alpha > 0, lambda >= 0, kappa > 0; got {alpha}, {lam}, {kappa}")
    lam_t = math.sqrt(kappa) * lam
    state = tuple(init) if init is not None else (1.0, 0.5 * law.Q0, 0.5 * law.Q0)
    for it in range(1, max_iter + 1):
        qhat, mhat, shat, _ = _hats(channel, alpha, state)
        new, (delta, eps, eta, fc) = _prior(law, qhat, mhat, shat, lam_t, nodes)
        if new[2] <= 0 and state[2] < 1e-10 * law.Q0:  # eps stays beyond the support of mu_delta: S = 0
            return _null_point(law, channel, alpha, lam, kappa, (qhat, mhat, shat), (delta, eps, eta), it)
        residual = max(abs(a - b) / max(abs(a), abs(b), 1e-300) for a, b in zip(state, new, strict=True))
        state = tuple((1 - damping) * a + damping * b for a, b in zip(state, new, strict=True))
        if log and it % 10 == 0:
            log(f"  iteration {it}: residual {residual:.2e}, (Sigma, m, q) = " + ", ".join(f"{v:.5g}" for v in state))
        if not all(map(math.isfinite, state)):
            raise NotConverged(f"left the domain at iteration {it}: (Sigma, m, q) = {state}")
        if residual < tol:
            break
    else:
        raise NotConverged(f"no convergence in {max_iter} iterations at alpha = {alpha:g}, lambda = {lam:g}: "
                           f"residual {residual:.2e} > tol {tol:g}")
    qhat, mhat, shat, value = _hats(channel, alpha, state)
    _, (delta, eps, eta, fc) = _prior(law, qhat, mhat, shat, lam_t, nodes)
    Sigma, m, q = state
    rank = float(1 - fc.cdf(eps))
    return SEPoint(alpha=alpha, lam=lam, Sigma=Sigma, m=m, q=q, Sigma_hat=shat, m_hat=mhat, q_hat=qhat, eta=eta,
                   delta=delta, eps=eps, estimation_error=law.Q0 - 2 * m + q, train_loss=value.train_loss,
                   test_error=channel.test_error(m, q), rank=rank, valid=bool(kappa >= rank), iterations=it,
                   residual=residual)


LADDER_TOP, LADDER_STEP = 0.1, 2.0


def solve_continued(law: SpectralLaw, channel, alpha: float, lam: float, kappa: float, init=None,
                    log=None, **kw) -> SEPoint:
    """solve from init; if that fails (or there is no init) and lambda < LADDER_TOP, follow the fixed
    point down from lambda = LADDER_TOP in steps of a factor LADDER_STEP (each step warm-started by
    the last): at small lambda the iteration from a cold start diverges, from a nearby point it
    converges. Raises NotConverged naming the lambda where the path broke."""
    if init is not None:
        try:
            return solve(law, channel, alpha, lam, kappa, init=init, **kw)
        except NotConverged as e:
            if log:
                log(f"  warm start failed ({e}); following lambda down from {LADDER_TOP:g}")
    ladder = [lam]
    while ladder[-1] * LADDER_STEP < LADDER_TOP:
        ladder.append(ladder[-1] * LADDER_STEP)
    if lam < LADDER_TOP:
        ladder.append(LADDER_TOP)
    start = None
    for step_lam in reversed(ladder):
        try:
            p = solve(law, channel, alpha, step_lam, kappa, init=start, **kw)
        except NotConverged as e:
            where = (f"lambda path from {LADDER_TOP:g} broke at lambda = {step_lam:g}" if len(ladder) > 1
                     else "from the default start")
            raise NotConverged(f"{where}: {e}") from e
        start = (p.Sigma, p.m, p.q) if p.q > 0 else None
    return p


def _null_point(law, channel, alpha, lam, kappa, hats, prior, it) -> SEPoint:
    """S = 0: every learned eigenvalue in the atom (weight decay beyond the spectrum's reach)."""
    qhat, mhat, shat = hats
    delta, eps, eta = prior
    tiny = 1e-300
    value = channel.evaluate(1e-12, 0.0, tiny)
    return SEPoint(alpha=alpha, lam=lam, Sigma=0.0, m=0.0, q=0.0, Sigma_hat=shat, m_hat=mhat, q_hat=qhat, eta=eta,
                   delta=delta, eps=eps, estimation_error=law.Q0, train_loss=value.train_loss,
                   test_error=channel.test_error(0.0, tiny), rank=0.0, valid=True, iterations=it, residual=0.0)
