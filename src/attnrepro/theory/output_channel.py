"""The output term M(Sigma, m, q) of paper B's ERM state evolution: a Moreau envelope of the square
loss through the row softmax, integrated by a deterministic Gaussian rule, with the proximal problem
solved for its global minimiser.

The T(T+1)/2 symmetric pre-activations e = (a <= b) of a sample enter with a scale s_e = 2 on the
diagonal and 1 off it. Per entry (z0_e, z_e) ~ N(0, s_e [[Q0 + Delta/2, m], [m, q]]), independent
across entries, and

    M = E min_x [ sum_e (x_e - z_e)^2 / (2 s_e Sigma) + l(x; z0) ],
    l(x; z0) = 1/2 || softmax_beta(X) - softmax_beta0(Z0) ||_F^2       (X, Z0: the symmetric T x T matrices).

Difference coordinates. Adding one constant to every entry leaves every row's softmax unchanged, so
l sees x only through the n_u = (T^2 + T - 2)/2 differences u = D x, u_i = x_{e_i} - x_ref (ref = the
entry (1, 2); T = 2: u = (x11 - x12, x22 - x12)). Minimising the quadratic over the remaining
direction at fixed u gives the marginal form of D x (partial minimisation of a Gaussian quadratic
form), exactly, with nothing left over:

    M = E min_u [ 1/2 (u - a)^T G^-1 (u - a) / Sigma + l(u; a0) ],     G = D diag(s) D^T
                                                                       (T = 2: [[3, 1], [1, 3]]),

where a = D z ~ N(0, q G) and a0 = D z0 ~ N(0, (Q0 + Delta/2) G) with cross-covariance m G. With
G = L L^T and xi = (g, g0) ~ N(0, I_{2 n_u}): a = sqrt(q) L g, a0 = (m / sqrt(q)) L g + tau L g0,
tau = sqrt(Q0 + Delta/2 - m^2 / q). E is a fixed Gaussian rule over xi (theory.gaussian_rules), so M is
a deterministic function of (Sigma, m, q) and no state is kept between calls.

The proximal problem (for each node) is non-convex: the softmax's tails are flat. It is solved by
Newton with an absolute-eigenvalue-modified Hessian and a backtracking (Armijo) line search from
several starts: u = a (the quadratic's minimiser), u = (beta0/beta) a0 (the exact fit, l = 0), every
mix of their coordinates (T <= 3), and their midpoint; the lowest objective wins. A node whose winning
start has |grad| > PROX_TOL raises ProxNotSolved: a point whose prox fails is a failure, never a
number. Derivatives by the envelope theorem (the objective's partial derivatives at u* held fixed):

    dM/dSigma = -E 1/2 (u* - a)^T G^-1 (u* - a) / Sigma^2,
    dM/dm, dM/dq = E [ -(u* - a)^T G^-1 da/dtheta / Sigma + dl/da0 . da0/dtheta ].

Test error: E ||softmax_beta0(Z0) - softmax_beta(Z)||_F^2 with noiseless z0 (Q0 instead of Q0 + Delta/2),
by the same rule. For a quadratic loss 1/2 (x - y)^T A (x - y) of all the entries, M has the closed form
closed_form_M (the check of LinearChannel; the softmax at small beta reduces to it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import torch

from .gaussian_rules import GaussianRule

PROX_TOL = 1e-9        # the largest |grad| allowed at a node's proximal minimiser
NEWTON_TOL = 1e-12     # Newton stops a start when its |grad| is below this ...
NEWTON_STEPS = 100     # ... or after this many steps
HALVINGS = 60          # backtracking line search: at most this many halvings of the step
ARMIJO = 1e-4
CHUNK = 1 << 15        # nodes solved at once (memory: CHUNK x starts x n_u^2 doubles)
SWITCH_WIDTH = 1e-3    # relative objective gap over which a node's derivatives move from one basin to the other


class ProxNotSolved(RuntimeError):
    """The proximal problem's minimiser was not found to PROX_TOL at some node."""


def entries(T: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows a, columns b, scales s_e) of the entries a <= b."""
    a, b = torch.triu_indices(T, T)
    return a, b, torch.where(a == b, 2.0, 1.0).double()


@dataclass(frozen=True)
class DifferenceCoordinates:
    """u = D x for T tokens: D (n_u, n_e), G = D diag(s) D^T, its Cholesky factor L and inverse, and
    B (T, T, n_u) with the logits X(u)_ab = sum_i B_abi u_i (x_ref = 0)."""

    T: int

    @cached_property
    def _parts(self):
        a, b, s = entries(self.T)
        n_e = len(s)
        ref = next(i for i in range(n_e) if int(a[i]) == 0 and int(b[i]) == 1)
        keep = [i for i in range(n_e) if i != ref]
        D = torch.zeros(len(keep), n_e, dtype=torch.float64)
        B = torch.zeros(self.T, self.T, len(keep), dtype=torch.float64)
        for row, e in enumerate(keep):
            D[row, e], D[row, ref] = 1.0, -1.0
            B[a[e], b[e], row] = B[b[e], a[e], row] = 1.0
        G = D @ torch.diag(s) @ D.T
        return D, G, torch.linalg.cholesky(G), torch.linalg.inv(G), B

    @property
    def n_u(self) -> int:
        return self.T * (self.T + 1) // 2 - 1

    @property
    def G(self) -> torch.Tensor:
        return self._parts[1]

    @property
    def L(self) -> torch.Tensor:
        return self._parts[2]

    @property
    def G_inv(self) -> torch.Tensor:
        return self._parts[3]

    @property
    def B(self) -> torch.Tensor:
        return self._parts[4]

    def logits(self, u: torch.Tensor) -> torch.Tensor:
        """(..., n_u) -> (..., T, T)."""
        return torch.einsum("abi,...i->...ab", self.B, u)

    def pull(self, gX: torch.Tensor) -> torch.Tensor:
        """A gradient in the logits (..., T, T) -> in u (..., n_u)."""
        return torch.einsum("abi,...ab->...i", self.B, gX)


@dataclass
class ChannelValue:
    M: float
    dSigma: float
    dm: float
    dq: float
    train_loss: float          # E l(u*; a0): the training loss per sample
    prox_residual: float       # the largest |grad| of the proximal objective at the chosen minimisers


def softmax_loss(coords: DifferenceCoordinates, u: torch.Tensor, Y0: torch.Tensor, beta: float,
                 hessian: bool = True):
    """l(u) = 1/2 ||softmax_rows(beta X(u)) - Y0||_F^2, its gradient (..., n_u) and Hessian (..., n_u, n_u).

    Per row a, with P = softmax(beta X_a), R = P - Y0_a, J = diag(P) - P P^T, c = R * P, s = sum c:
    dl/dX_a = beta J R,  d2l/dX_a^2 = beta^2 [J J + diag(c) - c P^T - P c^T + s P P^T - s J].
    T = 2 in closed form (pair_loss); this general form is its check."""
    if coords.T == 2:
        return pair_loss(u, Y0, beta, hessian)
    P = torch.softmax(beta * coords.logits(u), dim=-1)
    R = P - Y0
    loss = 0.5 * (R * R).sum((-1, -2))
    c = R * P
    s = c.sum(-1, keepdim=True)
    grad = coords.pull(beta * (c - P * s))
    if not hessian:
        return loss, grad, None
    J = torch.diag_embed(P) - P[..., :, None] * P[..., None, :]
    s2 = s[..., None]
    H = (J @ J + torch.diag_embed(c) - c[..., :, None] * P[..., None, :] - P[..., :, None] * c[..., None, :]
         + s2 * P[..., :, None] * P[..., None, :] - s2 * J)
    Hu = torch.einsum("abi,...abc,acj->...ij", coords.B, beta * beta * H, coords.B)
    return loss, grad, Hu


def pair_loss(u: torch.Tensor, Y0: torch.Tensor, beta: float, hessian: bool = True):
    """T = 2: row 1 is (p1, 1 - p1), row 2 (1 - p2, p2), p_i = sigmoid(beta u_i), so with y_i the labels'
    p_i, l = (p1 - y1)^2 + (p2 - y2)^2: dl/du_i = 2 beta p_i' r_i, d2l/du_i^2 = 2 beta^2 (p_i'^2 + r_i p_i'(1 - 2 p_i)),
    p' = p (1 - p), r = p - y; separable, so the Hessian is diagonal."""
    p = torch.sigmoid(beta * u)
    y = torch.stack([Y0[..., 0, 0], Y0[..., 1, 1]], -1)
    r = p - y
    dp = p * (1 - p)
    loss = (r * r).sum(-1)
    grad = 2 * beta * dp * r
    if not hessian:
        return loss, grad, None
    return loss, grad, torch.diag_embed(2 * beta * beta * dp * (dp + r * (1 - 2 * p)))


def _objective(u, a, Y0, P_quad, coords, beta, hessian=True):
    r = u - a
    Pr = r @ P_quad
    loss, g, H = softmax_loss(coords, u, Y0, beta, hessian)
    return 0.5 * (r * Pr).sum(-1) + loss, g + Pr, (H + P_quad if hessian else None)


def _modified_newton_step(H: torch.Tensor, g: torch.Tensor, floor: float) -> tuple[torch.Tensor, torch.Tensor]:
    """-|H|^-1 g with |H| = V max(|Lambda|, floor) V^T, and whether H was positive definite (> floor).
    2 x 2 in closed form (eigenvalues mean +- r, eigenvectors at angle theta = atan2(2 b, a - c)/2)."""
    if H.shape[-1] == 2:
        a, b, c = H[..., 0, 0], H[..., 0, 1], H[..., 1, 1]
        mean, r = 0.5 * (a + c), torch.hypot(0.5 * (a - c), b)
        theta = 0.5 * torch.atan2(2 * b, a - c)
        v1 = torch.stack([torch.cos(theta), torch.sin(theta)], -1)     # eigenvalue mean + r
        v2 = torch.stack([-torch.sin(theta), torch.cos(theta)], -1)    # eigenvalue mean - r
        l1, l2 = (mean + r).abs().clamp_min(floor), (mean - r).abs().clamp_min(floor)
        step = -(v1 * ((v1 * g).sum(-1) / l1)[:, None] + v2 * ((v2 * g).sum(-1) / l2)[:, None])
        return step, mean - r > floor
    vals, vecs = torch.linalg.eigh(H)
    convex = vals[:, 0] > floor
    vals = vals.abs().clamp_min(floor)
    step = -(vecs @ ((vecs.transpose(-1, -2) @ g[..., None]).squeeze(-1) / vals)[..., None]).squeeze(-1)
    return step, convex


TRIALS = torch.tensor([0.5 ** k for k in range(1, 9)], dtype=torch.float64)  # step lengths tried at once


def _newton(u, a, Y0, P_quad, coords, beta):
    """Newton with a backtracking (Armijo) line search from the rows of u, in place; returns (f, grad).
    Where the full step fails, the next eight step lengths 1/2, ..., 1/256 are tried at once, smaller ones
    one by one."""
    floor = 1e-6 * float(torch.linalg.eigvalsh(P_quad)[0])
    f, g, H = _objective(u, a, Y0, P_quad, coords, beta)
    active = torch.ones(len(u), dtype=torch.bool)
    K = len(TRIALS)
    for _ in range(NEWTON_STEPS):
        active &= g.abs().amax(-1) > NEWTON_TOL
        idx = torch.nonzero(active).squeeze(1)
        if not len(idx):
            break
        ua, ga, fa, ai, yi = u[idx], g[idx], f[idx], a[idx], Y0[idx]
        step, convex = _modified_newton_step(H[idx], ga, floor)
        slope = (ga * step).sum(-1)
        # near a minimum where the Hessian is positive definite, a full Newton step whose predicted decrease
        # is below the rounding of f is taken as it is (Armijo cannot see it; Newton converges there)
        take_full = convex & (-slope <= 1e-13 * (1 + fa.abs()))
        full = _objective(ua + step, ai, yi, P_quad, coords, beta, hessian=False)[0]
        found = take_full | (full <= fa + ARMIJO * slope)
        t = torch.ones_like(fa)
        sub = torch.nonzero(~found).squeeze(1)
        if len(sub):  # the rows where the full step fails: the next K step lengths at once
            trial = ua[sub][None] + TRIALS[:, None, None] * step[sub][None]        # (K, n, n_u)
            ft = _objective(trial.reshape(-1, ua.shape[1]), ai[sub].repeat(K, 1), yi[sub].repeat(K, 1, 1), P_quad,
                            coords, beta, hessian=False)[0].reshape(K, -1)
            ok = ft <= fa[sub][None] + ARMIJO * TRIALS[:, None] * slope[sub][None]
            found[sub] = ok.any(0)
            t[sub] = torch.where(ok.any(0), TRIALS[ok.int().argmax(0)], TRIALS[-1])
        for _ in range(HALVINGS - K):  # rows where no trial length passed: keep halving
            sub = torch.nonzero(~found).squeeze(1)
            if not len(sub):
                break
            t[sub] *= 0.5
            fs = _objective(ua[sub] + t[sub, None] * step[sub], ai[sub], yi[sub], P_quad, coords, beta,
                            hessian=False)[0]
            found[sub] = fs <= fa[sub] + ARMIJO * t[sub] * slope[sub]
        new_u = torch.where(found[:, None], ua + t[:, None] * step, ua)
        u[idx] = new_u
        f[idx], g[idx], H[idx] = _objective(new_u, ai, yi, P_quad, coords, beta)
        active[idx[~found]] = False  # no decrease at any step length: at a minimum to rounding
    return f, g


def _fit_predictor(coords, a, Y0, fit, P_quad, beta):
    """One Newton step from the exact fit (where l = 0 and its Hessian is J^T J):
    fit + (P + H_l(fit))^-1 P (a - fit), the start for the basin of the exact fit."""
    H = softmax_loss(coords, fit, Y0, beta)[2] + P_quad
    rhs = ((a - fit) @ P_quad)[..., None]
    return fit + torch.linalg.solve(H, rhs).squeeze(-1)


@dataclass
class ProxSolution:
    """Per node: the global minimiser u (N, n_u), its objective f and |grad|_inf; where a second, distinct
    local minimum was found, its u2, f2, residual2 (NaN elsewhere)."""

    u: torch.Tensor
    f: torch.Tensor
    residual: torch.Tensor
    u2: torch.Tensor
    f2: torch.Tensor
    residual2: torch.Tensor


def _unit_ball_points(n_u: int) -> torch.Tensor:
    """Fixed scan points in the unit ball of R^n_u: a 7 x 7 grid inside the disc (n_u = 2), else 64
    Sobol' points mapped into the ball."""
    if n_u == 2:
        g = torch.linspace(-1, 1, 7, dtype=torch.float64)
        pts = torch.cartesian_prod(g, g)
        return pts[pts.norm(dim=1) <= 1 + 1e-12]
    from scipy.stats import qmc

    x = torch.as_tensor(qmc.Sobol(d=n_u, scramble=True, seed=0).random_base2(6)) * 2 - 1
    return x / x.norm(dim=1, keepdim=True).clamp_min(1.0)


def prox(coords: DifferenceCoordinates, a: torch.Tensor, Y0: torch.Tensor, fit: torch.Tensor, sigma: float,
         beta: float) -> ProxSolution:
    """argmin_u f(u) = 1/2 (u - a)^T G^-1 (u - a)/Sigma + l(u; Y0) for every row of a (N, n_u); fit (N, n_u) is
    the exact-fit point (l = 0).

    The global minimiser lies in the ellipse where the quadratic part is at most min(f(a), f(fit)) (l >= 0),
    i.e. u = a + sqrt(Sigma) L w with |w| <= rho = sqrt(2 min(f(a), f(fit))), G = L L^T. f is scanned on fixed
    points of that ellipse, and Newton runs from three starts: u = a, one Newton step off the exact fit,
    and the scan's best point. The lowest objective is the global minimum; the lowest of the minima
    distinct from it (|u - u*|_inf > 1e-6 (1 + |u*|_inf)) is kept as the runner-up."""
    N, n_u = a.shape
    P_quad = coords.G_inv / sigma
    f_a = _objective(a, a, Y0, P_quad, coords, beta, hessian=False)[0]
    f_fit = _objective(fit, a, Y0, P_quad, coords, beta, hessian=False)[0]
    rho = torch.sqrt(2 * torch.minimum(f_a, f_fit))
    ball = _unit_ball_points(n_u)
    K = len(ball)
    scan = a[:, None] + math.sqrt(sigma) * rho[:, None, None] * (ball @ coords.L.T)[None]     # (N, K, n_u)
    f_scan = _objective(scan.reshape(-1, n_u), a.repeat_interleave(K, 0), Y0.repeat_interleave(K, 0), P_quad, coords,
                        beta, hessian=False)[0].reshape(N, K)
    rows = torch.arange(N)
    starts = [a, _fit_predictor(coords, a, Y0, fit, P_quad, beta), scan[rows, f_scan.argmin(1)]]
    S = len(starts)
    u = torch.cat(starts)
    f, g = _newton(u, a.repeat(S, 1), Y0.repeat(S, 1, 1), P_quad, coords, beta)
    u, f, res = u.reshape(S, N, n_u), f.reshape(S, N), g.reshape(S, N, n_u).abs().amax(-1)
    k = f.argmin(0)
    u1 = u[k, rows]
    other = torch.where(_distinct(u, u1[None]), f, torch.inf)
    k2 = other.argmin(0)
    has2 = torch.isfinite(other[k2, rows])
    nan = torch.full_like(f[0], math.nan)
    return ProxSolution(u1, f[k, rows], res[k, rows], torch.where(has2[:, None], u[k2, rows], math.nan),
                        torch.where(has2, f[k2, rows], nan), torch.where(has2, res[k2, rows], nan))


def _distinct(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return (u - v).abs().amax(-1) > 1e-6 * (1 + v.abs().amax(-1))


class SoftmaxChannel:
    """M(Sigma, m, q) and its derivatives for T tokens and the row softmax, over a Gaussian rule in
    2 n_u dimensions (theory.gaussian_rules; the rule's nodes are (g, g0))."""

    def __init__(self, T: int, Q0: float, Delta: float, rule: GaussianRule, beta: float = 1.0, beta0: float = 1.0):
        self.coords = DifferenceCoordinates(T)
        n_u = self.coords.n_u
        if rule.nodes.shape[1] != 2 * n_u:
            raise ValueError(f"T = {T} needs a rule in {2 * n_u} dimensions, got {rule.nodes.shape[1]} ({rule.name})")
        if not (Q0 > 0 and Delta >= 0 and beta > 0 and beta0 > 0):
            raise ValueError(f"need Q0 > 0, Delta >= 0, beta, beta0 > 0; got {Q0}, {Delta}, {beta}, {beta0}")
        self.T, self.Q0, self.Delta, self.beta, self.beta0, self.rule = T, Q0, Delta, beta, beta0, rule
        xi = torch.as_tensor(rule.nodes, dtype=torch.float64)
        L = self.coords.L
        self._Lg, self._Lg0 = xi[:, :n_u] @ L.T, xi[:, n_u:] @ L.T
        self._w = torch.as_tensor(rule.weights, dtype=torch.float64)
        self.evaluations = 0  # a count of evaluate() calls, for reporting the work (values keep no state)

    def _draws(self, m: float, q: float, var0: float):
        """(a, a0) at the rule's nodes, and (da0/dm, da0/dq); var0 = Var of z0 per unit scale."""
        tau2 = var0 - m * m / q
        if tau2 < -1e-12 * var0:
            raise ValueError(f"m^2/q = {m * m / q:.6g} exceeds the label variance {var0:.6g}")
        tau = math.sqrt(max(tau2, 0.0))
        rq = math.sqrt(q)
        a = rq * self._Lg
        a0 = (m / rq) * self._Lg + tau * self._Lg0
        dtau_dm, dtau_dq = (-m / (q * tau), m * m / (2 * q * q * tau)) if tau > 0 else (0.0, 0.0)
        da0_dm = self._Lg / rq + dtau_dm * self._Lg0
        da0_dq = (-m / (2 * q * rq)) * self._Lg + dtau_dq * self._Lg0
        return a, a0, da0_dm, da0_dq

    def _labels(self, a0: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.beta0 * self.coords.logits(a0), dim=-1)

    def evaluate(self, sigma: float, m: float, q: float) -> ChannelValue:
        """M, dM/dSigma, dM/dm, dM/dq at (Sigma, m, q), the training loss E l(u*) and the worst prox
        residual; raises ProxNotSolved when some node's minimiser is not found to PROX_TOL.

        Where a node has two local minima within a relative objective gap of order SWITCH_WIDTH, its
        derivatives are the Gibbs average w1 x(u1) + w2 x(u2), w2 = sigmoid(-(f2 - f1)/(SWITCH_WIDTH |f1|)): as
        the global minimiser switches from one basin to the other, the envelope derivatives then move
        continuously, and the fixed-point map has no jumps (of the size of one node's weight) for a root
        finder to stall on. M itself is the global minimum.

        Control variate: the exact fit's objective f_fit = 1/2 (r a0 - a)^T G^-1 (r a0 - a)/Sigma (r = beta0/beta)
        has the closed-form mean (n_u/2)(r^2 (Q0 + Delta/2) - 2 r m + q)/Sigma, and so have its derivatives;
        each of M, dM/dSigma, dM/dm, dM/dq is estimated as E_rule[x - c y] + c E[y], with y the matching
        quantity of f_fit and c the rule's regression coefficient of x on y. At large Sigma f_fit carries
        nearly all of M, and only the part the exact fit misses (saturated labels, in the tails) is left to
        the rule."""
        if not (sigma > 0 and q > 0 and math.isfinite(sigma) and math.isfinite(q)):
            raise ValueError(f"need finite Sigma > 0 and q > 0, got Sigma = {sigma}, q = {q}")
        self.evaluations += 1
        var0 = self.Q0 + self.Delta / 2
        a_all, a0_all, da0_dm_all, da0_dq_all = self._draws(m, q, var0)
        Ginv, ratio, n_u = self.coords.G_inv, self.beta0 / self.beta, self.coords.n_u
        xs, ys, worst = [], [], 0.0
        for lo in range(0, len(self._w), CHUNK):
            sl = slice(lo, lo + CHUNK)
            a, a0, da0_dm, da0_dq = a_all[sl], a0_all[sl], da0_dm_all[sl], da0_dq_all[sl]
            Y0 = self._labels(a0)
            sol = prox(self.coords, a, Y0, ratio * a0, sigma, self.beta)
            x = self._node_terms(sol.u, sol.f, a, Y0, da0_dm, da0_dq, sigma, q)
            w2 = torch.sigmoid(-(sol.f2 - sol.f) / (SWITCH_WIDTH * sol.f.abs().clamp_min(1e-300)))
            two = torch.nonzero(torch.isfinite(sol.f2) & (w2 > 1e-12)).squeeze(1)
            worst = max(worst, float(sol.residual.max()), float(sol.residual2[two].max()) if len(two) else 0.0)
            if len(two):
                x2 = self._node_terms(sol.u2[two], sol.f2[two], a[two], Y0[two], da0_dm[two], da0_dq[two], sigma, q)
                x[two, 1:] = (1 - w2[two, None]) * x[two, 1:] + w2[two, None] * x2[:, 1:]
            xs.append(x)
            e = ratio * a0 - a
            Ge = e @ Ginv
            fit = 0.5 * (e * Ge).sum(-1) / sigma
            ys.append(torch.stack([fit, -fit / sigma, ratio * (Ge * da0_dm).sum(-1) / sigma,
                                   (Ge * (ratio * da0_dq - a / (2 * q))).sum(-1) / sigma], -1))
        if worst > PROX_TOL:
            raise ProxNotSolved(f"prox residual {worst:.2e} > {PROX_TOL:g} at Sigma = {sigma:.6g}, "
                                f"m = {m:.6g}, q = {q:.6g}")
        x, y, w = torch.cat(xs), torch.cat(ys), self._w
        c_fit = ratio * ratio * var0 - 2 * ratio * m + q
        mean_y = torch.tensor([0.5 * n_u * c_fit / sigma, -0.5 * n_u * c_fit / sigma ** 2, -n_u * ratio / sigma,
                               0.5 * n_u / sigma], dtype=torch.float64)
        xc, yc = x[:, :4] - w @ x[:, :4], y - w @ y
        coef = (w @ (xc * yc)) / (w @ (yc * yc)).clamp_min(1e-300)
        est = w @ x[:, :4] - coef * (w @ y - mean_y)
        return ChannelValue(*(float(v) for v in est), train_loss=float(w @ x[:, 4]), prox_residual=worst)

    def _node_terms(self, u, f, a, Y0, da0_dm, da0_dq, sigma, q) -> torch.Tensor:
        """Per node at the minimiser u: (f, df/dSigma, df/dm, df/dq, l(u)) by the envelope theorem."""
        r = u - a
        Gr = r @ self.coords.G_inv
        quad = 0.5 * (r * Gr).sum(-1)
        # dl/da0 = -pull(beta0 J0 R): the loss's derivative through the label softmax_beta0(X(a0))
        R = torch.softmax(self.beta * self.coords.logits(u), dim=-1) - Y0
        c0 = R * Y0
        dl_da0 = -self.coords.pull(self.beta0 * (c0 - Y0 * c0.sum(-1, keepdim=True)))
        # d(quad/Sigma)/da . da/dq = -(Gr/Sigma) . a/(2q)
        dq = -(Gr * a).sum(-1) / (2 * q * sigma) + (dl_da0 * da0_dq).sum(-1)
        dm = (dl_da0 * da0_dm).sum(-1)
        return torch.stack([f, -quad / sigma ** 2, dm, dq, f - quad / sigma], -1)

    def at_zero(self) -> ChannelValue:
        """M and its derivatives at S = 0 (Sigma -> 0, m = 0, q -> 0), by Price's theorem: with u* -> a -> 0
        and (a, a0) Gaussian with Cov(a, a0) = m G, Var a = q G,

            dM/dSigma = -1/2 E[g^T G g],   dM/dq = 1/2 sum_ij G_ij E[d2l/du_i du_j],
            dM/dm = sum_ij G_ij E[d2l/du_i da0_j],   M = E l(0; a0),

        g = dl/du at u = 0, expectations over a0 ~ N(0, (Q0 + Delta/2) G) (the rule's g0 part). No
        cancellation at q -> 0, unlike the pathwise derivatives."""
        a0 = math.sqrt(self.Q0 + self.Delta / 2) * self._Lg0
        Y0 = self._labels(a0)
        loss, g, H = softmax_loss(self.coords, torch.zeros_like(a0), Y0, self.beta)
        # d2l/du da0 = -beta beta0 sum_a B_a^T J_P,a J_Y0,a B_a (rows a; P uniform at u = 0)
        P = torch.full_like(Y0, 1.0 / self.T)
        J_P = torch.diag_embed(P) - P[..., :, None] * P[..., None, :]
        J_Y = torch.diag_embed(Y0) - Y0[..., :, None] * Y0[..., None, :]
        B = self.coords.B
        H_ua0 = -self.beta * self.beta0 * torch.einsum("abi,nabc,acj->nij", B, J_P @ J_Y, B)
        G, w = self.coords.G, self._w
        return ChannelValue(M=float(w @ loss), dSigma=float(-0.5 * (w @ ((g @ G) * g).sum(-1))),
                            dm=float(w @ (H_ua0 * G).sum((-1, -2))), dq=float(0.5 * (w @ (H * G).sum((-1, -2)))),
                            train_loss=float(w @ loss), prox_residual=0.0)

    def surrogate(self) -> "LogitDifferenceChannel":
        """The quadratic channel with the loss's mean curvature at the exact fit, A = E d2l/du2 (u = r a0):
        the large-Sigma form of this channel, cheap and exact, whose fixed point starts this one's."""
        a0 = math.sqrt(self.Q0 + self.Delta / 2) * self._Lg0
        ratio = self.beta0 / self.beta
        H = softmax_loss(self.coords, ratio * a0, self._labels(a0), self.beta)[2]
        return LogitDifferenceChannel(self.T, self.Q0, self.Delta, ratio, A=torch.einsum("n,nij->ij", self._w, H))

    def test_error(self, m: float, q: float) -> float:
        """E ||softmax_beta0(Z0) - softmax_beta(Z)||_F^2 on noiseless test pre-activations."""
        if q <= 0:  # S = 0: the prediction is uniform
            a0 = math.sqrt(self.Q0) * self._Lg0
            diff = self._labels(a0) - 1.0 / self.T
        else:
            a, a0, _, _ = self._draws(m, q, self.Q0)
            diff = self._labels(a0) - torch.softmax(self.beta * self.coords.logits(a), dim=-1)
        return float(self._w @ (diff * diff).sum((-1, -2)))


def closed_form_M(T: int, Q0: float, Delta: float, sigma: float, m: float, q: float, A: torch.Tensor) -> float:
    """M for a quadratic loss 1/2 (x - y)^T A (x - y) of the entries, y = z0:
    1/2 (Q0 + Delta/2 - 2m + q) tr[(D^-1 + A^-1)^-1 diag(s)], D = diag(1/(s_e Sigma)) (A may be singular:
    (D^-1 + A^-1)^-1 = D (D + A)^-1 A)."""
    s = entries(T)[2]
    D = torch.diag(1.0 / (s * sigma))
    K = D @ torch.linalg.solve(D + A, A)
    return float(0.5 * (Q0 + Delta / 2 - 2 * m + q) * torch.trace(K @ torch.diag(s)))


def linear_loss_matrix(T: int) -> torch.Tensor:
    """A of the linear channel: 1/2 ||X - Y||_F^2 counts an off-diagonal entry twice."""
    return torch.diag(torch.where(entries(T)[0] == entries(T)[1], 1.0, 2.0).double())


class LinearChannel:
    """The linear channel (labels h(S0) + xi, predictions h(S): SPEC's linear-channel limit) in closed
    form (closed_form_M; derivatives by autograd), for checking the fixed-point solver."""

    def __init__(self, T: int, Q0: float, Delta: float = 0.0):
        self.T, self.Q0, self.Delta = T, Q0, Delta
        self.A = linear_loss_matrix(T)

    def evaluate(self, sigma: float, m: float, q: float) -> ChannelValue:
        s_t, m_t, q_t = (torch.tensor(float(v), dtype=torch.float64, requires_grad=True) for v in (sigma, m, q))
        s = entries(self.T)[2]
        D = torch.diag(1.0 / (s * s_t))
        c = self.Q0 + self.Delta / 2 - 2 * m_t + q_t
        value = 0.5 * c * torch.trace(D @ torch.linalg.solve(D + self.A, self.A) @ torch.diag(s))
        d_sigma, d_m, d_q = torch.autograd.grad(value, (s_t, m_t, q_t))
        R = torch.linalg.solve(D + self.A, D)  # x* - y = R (z - y)
        train = 0.5 * c * torch.trace(R.T @ self.A @ R @ torch.diag(s))
        return ChannelValue(float(value.detach()), float(d_sigma), float(d_m), float(d_q), float(train.detach()), 0.0)

    def test_error(self, m: float, q: float) -> float:
        s = entries(self.T)[2]
        return float((self.A.diagonal() * s).sum() * (self.Q0 - 2 * m + q))


class LogitDifferenceChannel:
    """A square loss on the logit differences, l(u) = 1/2 (u - r a0)^T A (u - r a0) (r = beta0/beta; labels'
    differences r a0, predictions u = D x; A = I by default), in closed form:

        M = 1/2 c tr[(Sigma G + A^-1)^-1 G],   training loss 1/2 c tr[A K G K^T],   K = (I + Sigma G A)^-1,
        c = r^2 (Q0 + Delta/2) - 2 r m + q,

    min_u 1/2 (u - a)^T (Sigma G)^-1 (u - a) + l(u) = 1/2 (a - t)^T (Sigma G + A^-1)^-1 (a - t), with u* - t =
    (I + Sigma G A)^-1 (a - t) and a - t of covariance c G. With A = I its state evolution at lambda = 0 above
    alpha_interp gives the smallest residual per sample of PSD least squares on the logit differences (the
    exact-fit test, problems.psd_exact_fit); with A the softmax loss's curvature it is the cheap start of
    the softmax state evolution."""

    finite_at_zero_lambda = True  # a quadratic loss: above alpha_interp the lambda = 0 fixed point is finite

    def __init__(self, T: int, Q0: float, Delta: float = 0.0, ratio: float = 1.0, A: torch.Tensor | None = None):
        self.T, self.Q0, self.Delta, self.ratio = T, Q0, Delta, ratio
        self.G = DifferenceCoordinates(T).G
        self.A = torch.eye(len(self.G), dtype=torch.float64) if A is None else A.to(torch.float64)

    def evaluate(self, sigma: float, m: float, q: float) -> ChannelValue:
        s_t, m_t, q_t = (torch.tensor(float(v), dtype=torch.float64, requires_grad=True) for v in (sigma, m, q))
        r, G, A = self.ratio, self.G, self.A
        c = r * r * (self.Q0 + self.Delta / 2) - 2 * r * m_t + q_t
        value = 0.5 * c * torch.trace(torch.linalg.solve(s_t * G @ A + torch.eye(len(G), dtype=torch.float64), G) @ A)
        d_sigma, d_m, d_q = torch.autograd.grad(value, (s_t, m_t, q_t))
        K = torch.linalg.inv(torch.eye(len(G), dtype=torch.float64) + sigma * G @ A)
        train = 0.5 * float(c.detach()) * torch.trace(A @ K @ G @ K.T)
        return ChannelValue(float(value.detach()), float(d_sigma), float(d_m), float(d_q), float(train), 0.0)

    def test_error(self, m: float, q: float) -> float:
        """E |a - r a0|^2 on noiseless labels: the logit-difference error per sample."""
        r = self.ratio
        return float(torch.trace(self.G) * (r * r * self.Q0 - 2 * r * m + q))
