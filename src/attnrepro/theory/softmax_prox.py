"""The proximal problem of paper B's output channel, in the logit-difference coordinates, solved for its
global minimiser at every node of a Gaussian rule at once.

For T tokens the row softmax sees the symmetric logits only through the n_u = (T^2 + T - 2)/2
differences u = D x (DifferenceCoordinates; T = 2: u = (x11 - x12, x22 - x12)). Per node,

    f(u) = 1/2 (u - a)^T G^-1 (u - a) / Sigma + l(u; Y0),     l = 1/2 || softmax_rows(beta X(u)) - Y0 ||_F^2,

G = D diag(s) D^T. f is not convex (the softmax's tails are flat): `prox` scans the ellipse that must
hold the global minimiser (f <= min(f(a), f(fit)) and l >= 0), then runs Newton with an absolute-
eigenvalue-modified Hessian and a backtracking Armijo line search from a, from near the exact fit and from
the SCAN_BASINS lowest basins of the scan (its points below all their neighbours), and keeps the lowest
objective and the best distinct runner-up. A node whose winning start has |grad| > PROX_TOL is
reported by the caller (output_channel raises ProxNotSolved).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

import torch

PROX_TOL = 1e-9        # the largest |grad| allowed at a node's proximal minimiser
NEWTON_TOL = 1e-12     # Newton stops a start when its |grad| is below this ...
NEWTON_STEPS = 100     # ... or after this many steps
HALVINGS = 60          # backtracking line search: at most this many halvings of the step
ARMIJO = 1e-4
SWITCH_WIDTH = 1e-3    # relative objective gap over which a node's derivatives move from one basin to the other
SCAN_GRID = 13         # T = 2: the scan's grid is SCAN_GRID x SCAN_GRID points of the square, those in the disc
SCAN_BASINS = 3        # Newton starts from the scan's lowest points of this many of its basins
SCAN_BLOCK = 4096      # nodes scanned at once

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



def softmax_loss(coords: DifferenceCoordinates, u: torch.Tensor, Y0: torch.Tensor, beta: float,
                 derivatives: bool = True):
    """l(u) = 1/2 ||softmax_rows(beta X(u)) - Y0||_F^2, its gradient (..., n_u) and Hessian (..., n_u, n_u)
    (None, None without `derivatives`: a line search or a scan needs the value only).

    Per row a, with P = softmax(beta X_a), R = P - Y0_a, J = diag(P) - P P^T, c = R * P, s = sum c:
    dl/dX_a = beta J R,  d2l/dX_a^2 = beta^2 [J J + diag(c) - c P^T - P c^T + s P P^T - s J].
    T = 2 in closed form (pair_loss); this general form is its check."""
    if coords.T == 2:
        return pair_loss(u, Y0, beta, derivatives)
    P = torch.softmax(beta * coords.logits(u), dim=-1)
    R = P - Y0
    loss = 0.5 * (R * R).sum((-1, -2))
    if not derivatives:
        return loss, None, None
    c = R * P
    s = c.sum(-1, keepdim=True)
    grad = coords.pull(beta * (c - P * s))
    J = torch.diag_embed(P) - P[..., :, None] * P[..., None, :]
    s2 = s[..., None]
    H = (J @ J + torch.diag_embed(c) - c[..., :, None] * P[..., None, :] - P[..., :, None] * c[..., None, :]
         + s2 * P[..., :, None] * P[..., None, :] - s2 * J)
    Hu = torch.einsum("abi,...abc,acj->...ij", coords.B, beta * beta * H, coords.B)
    return loss, grad, Hu


def pair_loss(u: torch.Tensor, Y0: torch.Tensor, beta: float, derivatives: bool = True):
    """T = 2: row 1 is (p1, 1 - p1), row 2 (1 - p2, p2), p_i = sigmoid(beta u_i), so with y_i the labels'
    p_i, l = (p1 - y1)^2 + (p2 - y2)^2: dl/du_i = 2 beta p_i' r_i, d2l/du_i^2 = 2 beta^2 (p_i'^2 + r_i p_i'(1 - 2 p_i)),
    p' = p (1 - p), r = p - y; separable, so the Hessian is diagonal."""
    p = torch.sigmoid(beta * u)
    y = torch.stack([Y0[..., 0, 0], Y0[..., 1, 1]], -1)
    r = p - y
    loss = r[..., 0] * r[..., 0] + r[..., 1] * r[..., 1]   # = (r * r).sum(-1), without a reduction over 2 entries
    if not derivatives:
        return loss, None, None
    dp = p * (1 - p)
    return loss, 2 * beta * dp * r, torch.diag_embed(2 * beta * beta * dp * (dp + r * (1 - 2 * p)))


def _objective(u, a, Y0, P_quad, coords, beta, derivatives=True):
    r = u - a
    Pr = r @ P_quad
    loss, g, H = softmax_loss(coords, u, Y0, beta, derivatives)
    if not derivatives:
        return 0.5 * (r * Pr).sum(-1) + loss, None, None
    return 0.5 * (r * Pr).sum(-1) + loss, g + Pr, H + P_quad


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
        full = _objective(ua + step, ai, yi, P_quad, coords, beta, derivatives=False)[0]
        found = take_full | (full <= fa + ARMIJO * slope)
        t = torch.ones_like(fa)
        sub = torch.nonzero(~found).squeeze(1)
        if len(sub):  # the rows where the full step fails: the next K step lengths at once
            trial = ua[sub][None] + TRIALS[:, None, None] * step[sub][None]        # (K, n, n_u)
            ft = _objective(trial.reshape(-1, ua.shape[1]), ai[sub].repeat(K, 1), yi[sub].repeat(K, 1, 1), P_quad,
                            coords, beta, derivatives=False)[0].reshape(K, -1)
            ok = ft <= fa[sub][None] + ARMIJO * TRIALS[:, None] * slope[sub][None]
            found[sub] = ok.any(0)
            t[sub] = torch.where(ok.any(0), TRIALS[ok.int().argmax(0)], TRIALS[-1])
        for _ in range(HALVINGS - K):  # rows where no trial length passed: keep halving
            sub = torch.nonzero(~found).squeeze(1)
            if not len(sub):
                break
            t[sub] *= 0.5
            fs = _objective(ua[sub] + t[sub, None] * step[sub], ai[sub], yi[sub], P_quad, coords, beta,
                            derivatives=False)[0]
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
    """Fixed scan points in the unit ball of R^n_u: a SCAN_GRID x SCAN_GRID grid inside the disc (n_u = 2),
    else 64 Sobol' points mapped into the ball."""
    if n_u == 2:
        g = torch.linspace(-1, 1, SCAN_GRID, dtype=torch.float64)
        pts = torch.cartesian_prod(g, g)
        return pts[pts.norm(dim=1) <= 1 + 1e-12]
    from scipy.stats import qmc

    x = torch.as_tensor(qmc.Sobol(d=n_u, scramble=True, seed=0).random_base2(6)) * 2 - 1
    return x / x.norm(dim=1, keepdim=True).clamp_min(1.0)


@lru_cache(maxsize=None)
def _scan(n_u: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The scan points and each one's 2 n_u nearest others (its grid neighbours for n_u = 2)."""
    ball = _unit_ball_points(n_u)
    dist = torch.cdist(ball, ball)
    dist.fill_diagonal_(math.inf)
    return ball, dist.topk(2 * n_u, largest=False).indices


def prox(coords: DifferenceCoordinates, a: torch.Tensor, Y0: torch.Tensor, fit: torch.Tensor, sigma: float,
         beta: float) -> ProxSolution:
    """argmin_u f(u) = 1/2 (u - a)^T G^-1 (u - a)/Sigma + l(u; Y0) for every row of a (N, n_u); fit (N, n_u) is
    the exact-fit point (l = 0).

    The global minimiser lies in the ellipse where the quadratic part is at most min(f(a), f(fit)) (l >= 0),
    i.e. u = a + sqrt(Sigma) L w with |w| <= rho = sqrt(2 min(f(a), f(fit))), G = L L^T. f is scanned on fixed
    points of that ellipse, and Newton runs from u = a, one Newton step off the exact fit, and the lowest
    point of each of the scan's SCAN_BASINS lowest basins (a scan point below all its neighbours; the best
    point's basin first, the best point itself where there are fewer). The lowest objective is the global
    minimum; the lowest of the minima distinct from it (|u - u*|_inf > 1e-6 (1 + |u*|_inf)) is kept as the
    runner-up. One start from the scan's best point alone missed the global minimum at up to 6 of a rule's
    2^14 nodes (and more runner-ups: docs/state_evolution.md, "The prox's starts")."""
    N, n_u = a.shape
    P_quad = coords.G_inv / sigma
    f_a = _objective(a, a, Y0, P_quad, coords, beta, derivatives=False)[0]
    f_fit = _objective(fit, a, Y0, P_quad, coords, beta, derivatives=False)[0]
    rho = torch.sqrt(2 * torch.minimum(f_a, f_fit))
    rows = torch.arange(N)
    scale = math.sqrt(sigma) * rho
    ball, neighbours = _scan(n_u)
    offsets = ball @ coords.L.T                                                              # (K, n_u)
    picks = torch.cat([_scan_basins(a[lo:lo + SCAN_BLOCK], Y0[lo:lo + SCAN_BLOCK], rho[lo:lo + SCAN_BLOCK],
                                    scale[lo:lo + SCAN_BLOCK], ball, offsets, neighbours, coords, beta)
                       for lo in range(0, N, SCAN_BLOCK)])
    # starts: a, near the exact fit and the scan's best point at every node; another basin's point where it has one
    starts = [a, _fit_predictor(coords, a, Y0, fit, P_quad, beta), a + scale[:, None] * offsets[picks[:, 0]]]
    owners = [rows, rows, rows]
    for j in range(1, SCAN_BASINS):
        idx = torch.nonzero(picks[:, j] >= 0).squeeze(1)
        starts.append(a[idx] + scale[idx, None] * offsets[picks[idx, j]])
        owners.append(idx)
    u, owner = torch.cat(starts), torch.cat(owners)
    f, g = _newton(u, a[owner], Y0[owner], P_quad, coords, beta)
    slot = torch.cat([torch.full((len(o),), j) for j, o in enumerate(owners)])
    U = torch.full((len(starts), N, n_u), math.nan, dtype=u.dtype)
    F = torch.full((len(starts), N), math.inf, dtype=f.dtype)
    R = torch.full((len(starts), N), math.inf, dtype=f.dtype)
    U[slot, owner], F[slot, owner], R[slot, owner] = u, f, g.abs().amax(-1)
    k = F.argmin(0)
    u1 = U[k, rows]
    other = torch.where(_distinct(U, u1[None]), F, torch.inf)
    k2 = other.argmin(0)
    has2 = torch.isfinite(other[k2, rows])
    nan = torch.full_like(F[0], math.nan)
    return ProxSolution(u1, F[k, rows], R[k, rows], torch.where(has2[:, None], U[k2, rows], math.nan),
                        torch.where(has2, F[k2, rows], nan), torch.where(has2, R[k2, rows], nan))


def _scan_basins(a, Y0, rho, scale, ball, offsets, neighbours, coords, beta) -> torch.Tensor:
    """(n, SCAN_BASINS): per node, the scan points u = a + scale offsets[k] (offsets = ball L^T) lowest in the
    scan's lowest basins (a point below all its neighbours; the best point first), -1 where the node has fewer.
    There the quadratic part of f is rho^2 |w|^2 / 2 (w the ball point). Scan point first (K, n): a neighbour's
    values are then whole rows, so the comparisons read memory in order."""
    scan = a[None] + scale[None, :, None] * offsets[:, None]                                 # (K, n, n_u)
    loss = softmax_loss(coords, scan, Y0[None], beta, derivatives=False)[0]
    f = 0.5 * (rho * rho)[None] * (ball * ball).sum(-1)[:, None] + loss                     # (K, n)
    basin = torch.ones_like(f, dtype=torch.bool)
    for j in range(neighbours.shape[1]):
        basin &= f < f[neighbours[:, j]]
    basin[f.argmin(0), torch.arange(f.shape[1])] = True
    lowest, picks = torch.where(basin, f, torch.inf).topk(SCAN_BASINS, dim=0, largest=False)
    return torch.where(torch.isfinite(lowest), picks, -1).T


def _distinct(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return (u - v).abs().amax(-1) > 1e-6 * (1 + v.abs().amax(-1))
