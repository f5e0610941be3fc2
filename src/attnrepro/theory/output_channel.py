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

The proximal problem (for each node) is non-convex: the softmax's tails are flat. `prox` scans the
region that must hold the global minimiser and runs Newton (absolute-eigenvalue-modified Hessian,
backtracking Armijo line search) from three starts; the lowest objective wins. A node whose winning
start has |grad| > PROX_TOL raises ProxNotSolved: a point whose prox fails is a failure, never a
number. Derivatives by the envelope theorem (the objective's partial derivatives at u* held fixed):

    dM/dSigma = -E 1/2 (u* - a)^T G^-1 (u* - a) / Sigma^2,
    dM/dm, dM/dq = E [ -(u* - a)^T G^-1 da/dtheta / Sigma + dl/da0 . da0/dtheta ].

Test error: E ||softmax_beta0(Z0) - softmax_beta(Z)||_F^2 with noiseless z0 (Q0 instead of Q0 + Delta/2),
by the same rule. Closed-form channels for the checks: LinearChannel (a square loss on all the entries:
SPEC's linear-channel limit) and LogitDifferenceChannel (a square loss on the differences: the softmax's
large-Sigma form, the exact-fit test's channel, and the softmax at small beta).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnrepro.theory.gaussian_rules import GaussianRule
from attnrepro.theory.softmax_prox import PROX_TOL, DifferenceCoordinates, ProxNotSolved, entries, prox, softmax_loss

CHUNK = 1 << 15        # nodes solved at once (memory: CHUNK x starts x n_u^2 doubles)
SWITCH_WIDTH = 1e-3    # relative objective gap over which a node's derivatives move from one basin to the other

@dataclass
class ChannelValue:
    M: float
    dSigma: float
    dm: float
    dq: float
    train_loss: float          # E l(u*; a0): the training loss per sample
    prox_residual: float       # the largest |grad| of the proximal objective at the chosen minimisers


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


def linear_loss_matrix(T: int) -> torch.Tensor:
    """A of the linear channel: 1/2 ||X - Y||_F^2 counts an off-diagonal entry twice."""
    return torch.diag(torch.where(entries(T)[0] == entries(T)[1], 1.0, 2.0).double())


class LinearChannel:
    """The linear channel (labels h(S0) + xi, predictions h(S): SPEC's linear-channel limit) in closed
    form, for checking the fixed-point solver: for the loss 1/2 (x - y)^T A (x - y) of the entries,
    M = 1/2 (Q0 + Delta/2 - 2m + q) tr[D (D + A)^-1 A diag(s)], D = diag(1/(s_e Sigma)); derivatives by autograd."""

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
