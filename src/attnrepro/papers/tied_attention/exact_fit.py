"""Exact-fit test for paper B's attention-indexed model (T = 2): is there a PSD S with A(S) = t?

A sample is two tokens x_1, x_2 in R^d. For symmetric S the pre-activations are
h_ab(S) = (x_a^T S x_b - delta_ab Tr S) / sqrt(d). The row softmax of a symmetric 2x2 logit
matrix only sees the two differences

    u_1(S) = h_11(S) - h_12(S) = <B_1, S>,   B_1 = (x_1 x_1^T - I - (x_1 x_2^T + x_2 x_1^T)/2) / sqrt(d),
    u_2(S) = h_22(S) - h_12(S) = <B_2, S>,   B_2 = (x_2 x_2^T - I - (x_1 x_2^T + x_2 x_1^T)/2) / sqrt(d),

so n samples define a linear map A: Sym(d) -> R^{n x 2}, A(S)_{mu,k} = u_k(S; X_mu). Given
targets t in R^{n x 2} this module solves the convex problem

    P* = min_{S PSD} F(S),   F(S) = 1/2 ||A(S) - t||^2,

with accelerated projected gradient (FISTA, gradient restart of O'Donoghue & Candes), batched
over a leading replica axis, and classifies every replica as

  "fit"        F(S)/n <= fit_tol at the current iterate S (a PSD matrix that fits exactly, up to
               the project's threshold "residual per sample below 1e-12");
  "no_fit"     a *certified* lower bound D <= P* (a dual-feasible point, see below) has
               D/n > fit_tol, so no PSD S fits. The solve goes on until the relative duality gap
               (F(S) - D) / F(S) <= gap_tol, so that F(S)/n is the minimum to that accuracy, or
               max_iter: then the minimum is only bracketed in [D/n, F/n] (the record's gap says which);
  "undecided"  neither a fit nor a certificate within max_iter iterations (never guessed).

Dual bound
----------
With z = A(S) - t and a multiplier y in R^{n x 2},

    L(S, z, y) = 1/2 ||z||^2 - <y, z - A(S) + t>,
    min_z L = -1/2 ||y||^2 - <t, y> + <A*(y), S>,   min_{S PSD} <A*(y), S> = 0 iff A*(y) PSD
                                                     (and -inf otherwise),

so every y with A*(y) PSD gives the weak-duality bound  P* >= D(y) = -1/2 ||y||^2 - <t, y>.
At the optimum y* = r* = A(S*) - t (KKT: A*(r*) PSD, <A*(r*), S*> = 0, and then D(r*) = P*).
The set {y : A*(y) PSD} is a cone, so along a ray y = a v (a >= 0) the best bound is

    D_ray(v) = max_{a >= 0} D(a v) = <t, v>^2 / (2 ||v||^2)  if <t, v> < 0,   else 0.

Dual candidates v are built from the current residual r = A(S) - t (G = A*(r) = grad F(S)):

  1. v = r itself, if G is (verifiably) PSD. Exactly optimal at the optimum, but at the optimum G
     has a null space (the range of S*, by complementarity) and computed eigenvalues there are
     +-rounding, so this candidate alone rarely verifies.
  2. v_c = r + c w, with w chosen so that A*(w) is positive definite on the "face" F_V = the
     eigenvectors U of G with eigenvalue below tau = sqrt(deficit * lambda_max(G)) (the near-null
     space of G, i.e. ~ range(S)). w = A(U Z U^T) with Z solving the face normal equations
     U^T A*A(U Z U^T) U = I_k by a few CG steps (least-norm w with U^T A*(w) U = I; solvable when
     k(k+1)/2 <= 2n, which holds generically at a no-fit optimum by Pataki's rank bound). Then
     A*(v_c) = G + c M, M = A*(w), is ~ G + c I on the face, and G is block diagonal in the eigenbasis
     with its other eigenvalues >= tau, so c ~ 2 deficit / lambda_min(U^T M U) .. 4^7 times that
     makes it PSD (a Schur-complement argument, valid while c ||M||^2 << tau). The dual loses
     ~ c <A(S), w> = c <S, M> relative to D(r), so the bound is tight when the iterate is accurate.

  Verification (what makes the bound a bound): for each candidate A*(v) is formed and its smallest
  computed eigenvalue (eigvalsh, float64) must exceed  e_form(v) + e_eig, where e_form is the standard
  a-priori dot-product rounding bound gamma_{4n} || |X|^T |W(v)| ||_F / sqrt(d) for forming A*(v)
  (adjoint_error_bound; linear in |v|, so for r + c w it is bounded by e_form(r) + c e_form(w)) and
  e_eig = 8 d eps ||A*(v)||_F bounds eigvalsh's error. A candidate passing this is dual feasible for
  the exact data (X, t) up to these standard floating-point bounds, never an extrapolation of the
  objective. Among verified candidates (and their optimal scaling a) the largest D is kept. The
  construction is heuristic and may fail (e.g. at a poorly converged iterate, or near the threshold
  where F* is tiny and the correction c <S, M> exceeds F*); failing only means no certificate, the
  iteration continues, and the replica may end "undecided". D = 0 (F >= 0) is always valid.
  If range(A*) contains no PD matrix, some PD matrix lies in the null space of A, and then every t is
  fitted exactly by a PSD S: "no_fit" cannot occur there, so nothing is lost.

Gradient mapping
----------------
grad_map = L ||S - Proj(S - G/L)||_F / ||A*(t)||_F (||A*(t)|| = ||grad F(0)||: a fixed scale that
stays meaningful when G* = 0). It is zero exactly at the optimum; it is recorded, and the (more
expensive) certificate is only attempted once it is below cert_trigger. The stopping rule itself is
the certificate (gap), not the gradient mapping.

Step size: L = lambda_max(A*A) by power iteration times a safety factor, and a free safeguard in the
loop: each step checks ||A(S_new - Y)||^2 <= L ||S_new - Y||^2 (the exact quadratic upper bound of
F along the step); a violation increases L for that replica and the step is rejected.

Newton at the iterate's rank (face_polish)
------------------------------------------
FISTA's tail is long where a no-fit minimum is small (near the threshold: 1000-5000 iterations at
d = 50 until the certificate's gap closes). Once a certificate has proved no fit, the iterate's rank k
is taken as the optimum's and f(V) = F(V V^T), V (d, k), is minimised from V = U_k diag(lam_k)^(1/2) by
Newton's method (explicit Hessian, O(n d^2 k^2 + d^3 k^3) per step); at the right rank it converges in a
few steps, and the residual there certifies itself. The point is kept only where its gap closes, so the
verdicts and their verification above are unchanged: only where the iteration stops moves.

Everything is float64; the cost per iteration is one A (X @ S), one A* (a (d, 2n) x (2n, d) product)
and one eigh per replica, i.e. O(n d^2 + d^3).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
from torch import Tensor

FIT_TOL = 1e-12  # "a residual per sample below 1e-12": F/n at or below this is an exact fit
EPS = torch.finfo(torch.float64).eps


EIGH_THREADS = 1  # threads for the (small, d x d) eigensolver calls; None = leave torch's setting


def _eig(fn, M: Tensor):
    """fn(M) (torch.linalg.eigh / eigvalsh) with EIGH_THREADS intra-op threads. On a loaded 2-core
    machine multithreaded MKL eigh of a 100 x 100 matrix was measured ~600x slower (0.4 s) than
    single-threaded (0.65 ms); for d of a few hundred one thread loses little."""
    if EIGH_THREADS is None:
        return fn(M)
    old = torch.get_num_threads()
    if old == EIGH_THREADS:
        return fn(M)
    torch.set_num_threads(EIGH_THREADS)
    try:
        return fn(M)
    finally:
        torch.set_num_threads(old)


# ---------------------------------------------------------------------------------------------
# the linear map and its adjoint
# ---------------------------------------------------------------------------------------------


def logit_differences(X: Tensor, S: Tensor) -> Tensor:
    """A(S): X (..., n, 2, d), S (..., d, d) (same leading axes) -> (..., n, 2) with
    [..., 0] = h_11 - h_12 and [..., 1] = h_22 - h_12. Computes X S once: O(n d^2)."""
    d = X.shape[-1]
    xs = (X.flatten(-3, -2) @ S).view(X.shape)  # (..., n, 2, d): rows x_a^T S
    x1, x2 = X[..., 0, :], X[..., 1, :]
    q11 = (xs[..., 0, :] * x1).sum(-1)
    q22 = (xs[..., 1, :] * x2).sum(-1)
    q12 = (xs[..., 0, :] * x2).sum(-1)
    tr = torch.diagonal(S, dim1=-2, dim2=-1).sum(-1)[..., None]
    return torch.stack((q11 - q12, q22 - q12), dim=-1).sub_(tr[..., None]) / math.sqrt(d)


def adjoint(X: Tensor, r: Tensor) -> Tensor:
    """A*(r) = sum_{mu,k} r_{mu,k} B_{mu,k}: X (..., n, 2, d), r (..., n, 2) -> (..., d, d) symmetric.

    With s = r_1 + r_2: A*(r) sqrt(d) = X_1^T (r_1 X_1 - s/2 X_2) + X_2^T (r_2 X_2 - s/2 X_1) - (sum s) I,
    a single (d, 2n) x (2n, d) product."""
    d = X.shape[-1]
    x1, x2 = X[..., 0, :], X[..., 1, :]
    r1, r2 = r[..., 0, None], r[..., 1, None]
    half_s = 0.5 * (r1 + r2)
    w = torch.stack((r1 * x1 - half_s * x2, r2 * x2 - half_s * x1), dim=-2)  # (..., n, 2, d)
    m = X.flatten(-3, -2).transpose(-1, -2) @ w.flatten(-3, -2)
    m = 0.5 * (m + m.transpose(-1, -2))
    tot = (2.0 * half_s).sum((-2, -1))
    m.diagonal(dim1=-2, dim2=-1).sub_(tot[..., None])
    return m / math.sqrt(d)


def objective(X: Tensor, S: Tensor, t: Tensor) -> Tensor:
    """F(S) = 1/2 ||A(S) - t||^2 per replica (not divided by n)."""
    return 0.5 * (logit_differences(X, S) - t).square().sum((-2, -1))


def project_psd(M: Tensor) -> tuple[Tensor, Tensor]:
    """Frobenius projection of symmetric M (..., d, d) onto the PSD cone, and its eigenvalues (..., d)."""
    lam, u = _eig(torch.linalg.eigh, M)
    lam = lam.clamp_min(0.0)
    return (u * lam[..., None, :]) @ u.transpose(-1, -2), lam


def lipschitz(X: Tensor, iters: int = 60, safety: float = 1.05, seed: int = 0) -> Tensor:
    """lambda_max(A*A) per replica by power iteration on Sym(d), times safety. X (..., n, 2, d) -> (...)."""
    gen = torch.Generator().manual_seed(seed)
    d = X.shape[-1]
    s = torch.randn(*X.shape[:-3], d, d, generator=gen, dtype=X.dtype).to(X.device)
    s = s + s.transpose(-1, -2)
    rq = torch.zeros(X.shape[:-3], dtype=X.dtype, device=X.device)
    for _ in range(iters):
        s = s / torch.linalg.matrix_norm(s)[..., None, None]
        as_ = logit_differences(X, s)
        rq = as_.square().sum((-2, -1))  # <s, A*A s> with ||s|| = 1: a lower bound on lambda_max
        s = adjoint(X, as_)
    return safety * rq


# ---------------------------------------------------------------------------------------------
# the dual certificate
# ---------------------------------------------------------------------------------------------

CERT_SCALES = tuple(4.0 ** j for j in range(8))  # c = c_base * CERT_SCALES
CERT_CG_ITERS = 60
CERT_CG_TOL = 0.05


def adjoint_error_bound(X: Tensor, v: Tensor) -> Tensor:
    """An a-priori bound on the spectral-norm rounding error of the computed adjoint(X, v) (R,).

    adjoint forms X^T W (inner length m = 2n) and subtracts (sum s) I. The standard dot-product bound
    |fl(X^T W) - X^T W| <= gamma_m |X|^T |W| entrywise (gamma_m = m eps / (1 - m eps)), the few relative
    eps of forming W (absorbed by the factor 2 on m) and of the trace term give, in spectral norm
    (<= Frobenius), err <= gamma_{2m} (|| |X|^T |W| ||_F + d^{1/2} sum|v|) / sqrt(d)."""
    d = X.shape[-1]
    m = 2 * X.shape[-3] + 8
    gamma = 2 * m * EPS / (1 - 2 * m * EPS)
    x1, x2 = X[..., 0, :].abs(), X[..., 1, :].abs()
    a1, a2 = v[..., 0, None].abs(), v[..., 1, None].abs()
    hs = 0.5 * (a1 + a2)
    w = torch.stack((a1 * x1 + hs * x2, a2 * x2 + hs * x1), dim=-2)
    prod = X.abs().flatten(-3, -2).transpose(-1, -2) @ w.flatten(-3, -2)
    return gamma * (torch.linalg.matrix_norm(prod) + math.sqrt(d) * v.abs().sum((-2, -1))) / math.sqrt(d)


def _eig_error(M: Tensor) -> Tensor:
    """A (generous) bound on the absolute eigenvalue error of eigvalsh on symmetric M: 8 d eps ||M||_F."""
    return 8 * M.shape[-1] * EPS * torch.linalg.matrix_norm(M)


def _ray_bound(t: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """max_{a >= 0} D(a v) and the maximising a (for v with A*(v) PSD)."""
    tv = (t * v).sum((-2, -1))
    vv = v.square().sum((-2, -1)).clamp_min(torch.finfo(v.dtype).tiny)
    a = (-tv / vv).clamp_min(0.0)
    return 0.5 * a * a * vv * (tv < 0), a  # = tv^2 / (2 vv) when tv < 0


def _face_multiplier(X: Tensor, Um: Tensor, mask: Tensor, iters: int, tol: float) -> Tensor:
    """w = A(Um Z Um^T) with Z solving H(Z) = Um^T A*A(Um Z Um^T) Um = diag(mask) by batched CG,
    so that Um^T A*(w) Um ~ I on the masked directions (least-norm w in range(A) restricted to the
    face). Um (R, d, d) with the masked-out columns zero. Only needs to be approximate."""

    def H(Z: Tensor) -> Tensor:
        P = Um @ Z @ Um.transpose(-1, -2)
        return Um.transpose(-1, -2) @ adjoint(X, logit_differences(X, P)) @ Um

    def dot(a: Tensor, b: Tensor) -> Tensor:
        return (a * b).sum((-2, -1))

    B = torch.diag_embed(mask)
    Z = torch.zeros_like(B)
    res = B.clone()
    p = res.clone()
    rr = dot(res, res)
    rr0 = rr.clamp_min(torch.finfo(B.dtype).tiny)
    for _ in range(iters):
        if bool((rr <= tol * tol * rr0).all()):
            break
        Hp = H(p)
        pHp = dot(p, Hp)
        alpha = torch.where(pHp > 0, rr / pHp.clamp_min(torch.finfo(B.dtype).tiny), torch.zeros_like(rr))
        Z = Z + alpha[:, None, None] * p
        res = res - alpha[:, None, None] * Hp
        rr_new = dot(res, res)
        p = res + (rr_new / rr.clamp_min(torch.finfo(B.dtype).tiny))[:, None, None] * p
        rr = rr_new
    return logit_differences(X, Um @ Z @ Um.transpose(-1, -2))


def dual_certificate(X: Tensor, t: Tensor, r: Tensor, G: Optional[Tensor] = None,
                     cg_iters: int = CERT_CG_ITERS, cg_tol: float = CERT_CG_TOL) -> tuple[Tensor, Tensor]:
    """A verified dual-feasible y (A*(y) PSD) built from the residual r = A(S) - t, and D(y).

    X (R, n, 2, d), t, r (R, n, 2), G = A*(r) (optional) -> (y (R, n, 2), bound (R,)), bound >= 0.
    Where no candidate is verified PSD, y = 0 and bound = 0 (the trivial bound F >= 0).
    See the module docstring for the construction and the verification."""
    if G is None:
        G = adjoint(X, r)
    R, dt = r.shape[0], r.dtype
    tiny = torch.finfo(dt).tiny
    lam, U = _eig(torch.linalg.eigh, G)
    best = torch.zeros(R, dtype=dt, device=r.device)
    best_y = torch.zeros_like(r)

    def consider(v: Tensor, ok: Tensor) -> None:
        nonlocal best, best_y
        bound, a = _ray_bound(t, v)
        better = ok & (bound > best)
        best = torch.where(better, bound, best)
        best_y = torch.where(better[:, None, None], a[:, None, None] * v, best_y)

    err_r = adjoint_error_bound(X, r)
    consider(r, lam[:, 0] >= err_r + _eig_error(G))
    lam_max = lam[:, -1].abs().clamp_min(tiny)
    deficit = (err_r + _eig_error(G) - lam[:, 0]).clamp_min(0.0)  # what c M must make up on the face
    # the face: eigenvalues of G below the geometric mean of the deficit and lambda_max
    tau = torch.sqrt(deficit.clamp_min(EPS * lam_max) * lam_max)
    mask = (lam < tau[:, None]).to(dt)
    Um = U * mask[:, None, :]
    w = _face_multiplier(X, Um, mask, cg_iters, cg_tol)
    M = adjoint(X, w)
    # ~ lambda_min(Um^T M Um) on the face (sets the scale of c): shift the other directions away
    Mu = U.transpose(-1, -2) @ M @ U
    big = 10.0 * (torch.linalg.matrix_norm(Mu) + 1.0)[:, None]
    m_face = _eig(torch.linalg.eigvalsh, Mu + torch.diag_embed((1.0 - mask) * big))[:, 0]
    err_w = adjoint_error_bound(X, w)
    c_base = torch.where(m_face > 0, 2.0 * deficit / m_face.clamp_min(tiny), torch.zeros_like(deficit))
    c = c_base[:, None] * torch.tensor(CERT_SCALES, dtype=dt, device=r.device)  # (R, C)
    Gc = G[:, None] + c[..., None, None] * M[:, None]
    lam_c = _eig(torch.linalg.eigvalsh, Gc)  # (R, C, d)
    ok_c = (lam_c[..., 0] >= err_r[:, None] + c * err_w[:, None] + _eig_error(Gc)) & (c > 0)
    for j in range(len(CERT_SCALES)):
        consider(r + c[:, j, None, None] * w, ok_c[:, j])
    return best_y, best


# ---------------------------------------------------------------------------------------------
# the face polish
# ---------------------------------------------------------------------------------------------

POLISH = True  # solve's default: Newton at the iterate's rank (face_polish) to close a proved no-fit's gap
POLISH_RANK_TOL = 1e-10  # the rank of S: its eigenvalues above this times the largest
POLISH_MAX_ENTRIES = 2 ** 26  # Newton's Jacobian (2n x dk) or Hessian (dk x dk) above this: no polish (512 MiB)
POLISH_STEPS = 8


def factor_jacobian(X: Tensor, V: Tensor) -> Tensor:
    """The Jacobian of V -> A(V V^T) at V (d, k), for one replica X (n, 2, d): (2n, d k), row (mu, a) the
    flattened 2 B_mu,a V, with sqrt(d) B_mu,1 V = x_1 (x_1^T V) - V - (x_1 (x_2^T V) + x_2 (x_1^T V))/2
    (and 1 <-> 2)."""
    d = X.shape[-1]
    x1, x2 = X[:, 0], X[:, 1]
    p1, p2 = x1 @ V, x2 @ V  # (n, k)
    cross = 0.5 * (x1[:, :, None] * p2[:, None, :] + x2[:, :, None] * p1[:, None, :])
    j1 = x1[:, :, None] * p1[:, None, :] - V - cross
    j2 = x2[:, :, None] * p2[:, None, :] - V - cross
    return (2.0 / math.sqrt(d)) * torch.stack((j1, j2), dim=1).flatten(2).flatten(0, 1)


def _damped_cholesky(H: Tensor) -> Optional[Tensor]:
    """The Cholesky factor of H + mu I, mu = 1e-10 max|diag H| raised x1e4 until it is positive definite (H is
    PSD and singular along the rotations at an optimum); None when mu would exceed 1e-2 max|diag H| (H far from
    PSD: not near an optimum)."""
    scale = float(H.diagonal().abs().max())
    eye = torch.eye(H.shape[0], dtype=H.dtype, device=H.device)
    mu = 1e-10 * scale
    while mu <= 1e-2 * scale:
        L, info = torch.linalg.cholesky_ex(H + mu * eye)
        if int(info) == 0:
            return L
        mu *= 1e4
    return None


POLISH_PRICE = 0.5  # a Newton step's flops over FISTA's, times this: what a try costs in FISTA iterations (measured)


def _polish_price(n: int, d: int, rank: Tensor) -> Tensor:
    """What face_polish costs, in FISTA iterations of one replica: three Newton steps, each the Hessian J^T J
    (2n (dk)^2 flops) and its Cholesky ((dk)^3 / 3), over one FISTA iteration (A and A*, 4 n d^2, and an eigh,
    about 9 d^3), times POLISH_PRICE (at d = 50, a try took about 0.5 s, 670 iterations of one replica)."""
    dk = d * rank.double()
    return POLISH_PRICE * 3 * (2 * n * dk ** 2 + dk ** 3 / 3) / (4 * n * d ** 2 + 9 * d ** 3)


def _fista_left(gap_before: Tensor, gap_now: Tensor, iterations: Tensor, gap_tol: float) -> Tensor:
    """FISTA's iterations still needed to bring the gap to gap_tol at the linear rate seen between two certificates
    `iterations` apart (gap_before, then gap_now); inf where it did not shrink, 0 before there are two."""
    rate = torch.log(gap_before / gap_now) / iterations.double()
    left = torch.log(gap_now / gap_tol) / rate
    return torch.where(torch.isnan(gap_before), torch.zeros_like(left),
                       torch.where(rate > 0, left, torch.full_like(left, math.inf)))


def _try_polish(X: Tensor, t: Tensor, S: Tensor, F: Tensor, y: Tensor, D: Tensor, best_dual: Tensor, fit_tol: float,
                gap_tol: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """One try of face_polish for the replicas given (S, its F, the certificate y, D just made at S, the best
    bound so far): (S', A(S'), F(S'), take, y, D) with take where S' fits or closes the gap (and F(S') < F), and
    (y, D) the better of the two certificates (a dual bound holds whatever primal point it came from)."""
    n = X.shape[-3]
    Sp = face_polish(X, t, S)
    ASp = logit_differences(X, Sp)
    rp = ASp - t
    Fp = 0.5 * rp.square().sum((-2, -1))
    yp, Dp = dual_certificate(X, t, rp)
    y, D = torch.where((Dp > D)[:, None, None], yp, y), torch.maximum(D, Dp)
    gap = (Fp - torch.maximum(D, best_dual)) / torch.clamp_min(Fp, n * fit_tol)
    take = (Fp < F) & ((Fp / n <= fit_tol) | (gap <= gap_tol))
    return Sp, ASp, Fp, take, y, D


def face_polish(X: Tensor, t: Tensor, S: Tensor, rank_tol: float = POLISH_RANK_TOL, steps: int = POLISH_STEPS,
                max_entries: int = POLISH_MAX_ENTRIES) -> Tensor:
    """S polished at its rank, per replica: with k the number of eigenvalues of S above rank_tol times the
    largest and V0 = U_k diag(lam_k)^(1/2), Newton's method on f(V) = F(V V^T) = 1/2 ||A(V V^T) - t||^2 over
    V (d, k): gradient 2 G V and Hessian H[dV] = J^T J dV + 2 G dV (G = A*(A(V V^T) - t), J = factor_jacobian;
    damped to positive definite by _damped_cholesky, as it is singular along the rotations V -> V Q), each step
    dV = -H^-1 2 G V halved until f decreases, for at most `steps` steps or until f decreases by less than 1e-12 f.
    X (R, n, 2, d), t (R, n, 2), S (R, d, d).

    Near an optimum of min_{S PSD} F(S) of rank k this converges fast where FISTA is slow (a near-threshold no-fit
    took 1000-5000 FISTA iterations), and a no-fit optimum's residual then certifies itself (dual_certificate).
    The returned V V^T is PSD; it may be worse than S where the rank or the start is wrong, so the caller keeps
    it only where it helps. A replica whose Jacobian or Hessian would exceed max_entries entries is returned
    unchanged."""
    lam, U = _eig(torch.linalg.eigh, S)
    out = S.clone()
    n, d = X.shape[-3], X.shape[-1]
    for r in range(S.shape[0]):
        on = lam[r] > rank_tol * lam[r, -1]
        k = int(on.sum())
        if k == 0 or lam[r, -1] <= 0 or max(2 * n, d * k) * d * k > max_entries:
            continue
        Xr, tr = X[r:r + 1], t[r:r + 1]
        V = U[r][:, on] * lam[r][on].sqrt()
        f = float(objective(Xr, (V @ V.T)[None], tr))
        for _ in range(steps):
            G = adjoint(Xr, logit_differences(Xr, (V @ V.T)[None]) - tr)[0]
            J = factor_jacobian(Xr[0], V)
            L = _damped_cholesky(J.T @ J + 2.0 * torch.kron(G, torch.eye(k, dtype=V.dtype, device=V.device)))
            if L is None:
                break
            step = -torch.cholesky_solve((2.0 * G @ V).flatten()[:, None], L).view(d, k)
            a, fn = 1.0, f
            while a > 1e-4:
                Vn = V + a * step
                fn = float(objective(Xr, (Vn @ Vn.T)[None], tr))
                if fn < f:
                    break
                a *= 0.5
            if not fn < f:
                break
            V, f, converged = Vn, fn, f - fn <= 1e-12 * f
            if converged:
                break
        out[r] = V @ V.T
    return out


# ---------------------------------------------------------------------------------------------
# the solver
# ---------------------------------------------------------------------------------------------


@dataclass
class FitResult:
    """Per replica (leading axis R). loss_per_sample = F(S)/n at the returned S; dual_bound_per_sample
    = D/n, a certified lower bound on min F / n (0 = the trivial bound); gap = (F - D) / max(F, n fit_tol)
    at the last certificate (nan if none was attempted); grad_map = relative gradient-mapping norm at
    the last check; rank = #eigenvalues of S above 1e-8 * max; dual_y = the certificate y (zeros if
    none); polishes = how many times S was replaced by face_polish's point (0 or 1: that closes the gap)."""

    status: list[str]
    loss_per_sample: Tensor
    dual_bound_per_sample: Tensor
    gap: Tensor
    grad_map: Tensor
    max_abs_residual: Tensor
    iterations: Tensor
    restarts: Tensor
    polishes: Tensor
    rank: Tensor
    eigenvalues: Tensor
    S: Tensor
    dual_y: Tensor
    lipschitz: Tensor
    seconds: float
    history: list = field(default_factory=list)

    def summary(self) -> list[dict]:
        return [dict(status=self.status[i], loss_per_sample=float(self.loss_per_sample[i]),
                     dual_bound_per_sample=float(self.dual_bound_per_sample[i]), gap=float(self.gap[i]),
                     grad_map=float(self.grad_map[i]), max_abs_residual=float(self.max_abs_residual[i]),
                     iterations=int(self.iterations[i]), restarts=int(self.restarts[i]),
                     polishes=int(self.polishes[i]),
                     rank=int(self.rank[i])) for i in range(len(self.status))]


def solve(X: Tensor, t: Tensor, max_iter: int = 20000, fit_tol: float = FIT_TOL, gap_tol: float = 1e-6,
          check_every: int = 20, cert_trigger: float = 1e-6, cert_every: int = 100, L: Optional[Tensor] = None,
          power_iters: int = 60, S_init: Optional[Tensor] = None, require_gap: bool = True,
          log: Optional[Callable[[int, dict], None]] = None, log_every: int = 500,
          polish: Optional[bool] = None) -> FitResult:
    """Minimise F(S) = 1/2 ||A(S) - t||^2 over PSD S, per replica, and classify fit / no_fit / undecided.

    X (R, n, 2, d), t (R, n, 2) (float64 recommended; computed in float64). Start S = S_init or 0.
    FISTA with gradient restart, step 1/L (L from `lipschitz` unless given, raised when the in-loop
    check sees a larger curvature). Every iteration: fit test F/n <= fit_tol. Every check_every
    iterations: the gradient mapping, and when it is <= cert_trigger, a dual certificate; "no_fit" when
    D/n > fit_tol and (F - D)/F <= gap_tol (with require_gap=False as soon as D/n > fit_tol: the
    absence of a fit is then proved but the minimum is only bracketed in [D/n, F/n]). With polish (default
    POLISH), a replica whose certificate proves no fit but leaves the gap open, and whose gap FISTA would take
    longer to close (at the rate seen since the last certificate) than a Newton try costs (_polish_price), is
    also tried at face_polish(S), Newton's method at S's rank, and takes that point where it closes the gap (a
    failed try waits cert_every, 2 cert_every, 4 cert_every ... iterations); either point's dual bound is kept.
    log(k, info) is called every log_every iterations with info = dict(active=[replica ids],
    loss_per_sample=, grad_map=, gap=, L=) (lists over the active replicas)."""
    t0 = time.perf_counter()
    polish = POLISH if polish is None else polish
    X = X.to(torch.float64)
    t = t.to(torch.float64)
    R, n, _, d = X.shape
    dev = X.device
    Lr = (lipschitz(X, power_iters) if L is None else torch.as_tensor(L, dtype=torch.float64)
          .expand(R).clone()).to(dev)
    scale = torch.linalg.matrix_norm(adjoint(X, t)).clamp_min(torch.finfo(torch.float64).tiny)  # ||grad F(0)||

    # outputs (full R)
    status = ["undecided"] * R
    S_out = torch.zeros(R, d, d, dtype=torch.float64, device=dev)
    gap_out = torch.full((R,), float("nan"), dtype=torch.float64, device=dev)
    gm_out = torch.full((R,), float("nan"), dtype=torch.float64, device=dev)
    dual_out = torch.zeros(R, dtype=torch.float64, device=dev)
    y_out = torch.zeros(R, n, 2, dtype=torch.float64, device=dev)
    it_out = torch.zeros(R, dtype=torch.long)
    rs_out = torch.zeros(R, dtype=torch.long)
    po_out = torch.zeros(R, dtype=torch.long)

    # working state over the active replicas idx
    idx = torch.arange(R, device=dev)
    Xa, ta, La, sc = X, t, Lr.clone(), scale
    S = torch.zeros(R, d, d, dtype=torch.float64, device=dev) if S_init is None else S_init.to(X).clone()
    AS = logit_differences(Xa, S)
    Y, AY = S.clone(), AS.clone()
    tk = torch.ones(R, dtype=torch.float64, device=dev)
    restarts = torch.zeros(R, dtype=torch.long, device=dev)
    polished = torch.zeros(R, dtype=torch.long, device=dev)
    polish_at = torch.zeros(R, dtype=torch.long, device=dev)
    polish_wait = torch.full((R,), cert_every, dtype=torch.long, device=dev)
    best_dual = torch.zeros(R, dtype=torch.float64, device=dev)
    best_y = torch.zeros(R, n, 2, dtype=torch.float64, device=dev)
    gap_a = torch.full((R,), float("nan"), dtype=torch.float64, device=dev)
    gm_a = torch.full((R,), float("nan"), dtype=torch.float64, device=dev)
    last_cert = torch.full((R,), -10 ** 9, dtype=torch.long, device=dev)
    F = 0.5 * (AS - ta).square().sum((-2, -1))
    history = []

    def finish(done: Tensor, label: str, k: int) -> None:
        for j in torch.nonzero(done).flatten().tolist():
            i = int(idx[j])
            status[i] = label
            S_out[i], gap_out[i], gm_out[i] = S[j], gap_a[j], gm_a[j]
            dual_out[i], y_out[i] = best_dual[j], best_y[j]
            it_out[i], rs_out[i], po_out[i], Lr[i] = k, restarts[j], polished[j], La[j]

    k = 0
    fit = F / n <= fit_tol
    if bool(fit.any()):
        finish(fit, "fit", 0)
    keep = ~fit
    while True:
        if not bool(keep.all()):
            idx = idx[keep]
            if not idx.numel():
                break
            Xa, ta, La, sc = Xa[keep], ta[keep], La[keep], sc[keep]
            S, AS, Y, AY, tk, F = S[keep], AS[keep], Y[keep], AY[keep], tk[keep], F[keep]
            restarts, polished, best_dual, best_y = restarts[keep], polished[keep], best_dual[keep], best_y[keep]
            polish_at, polish_wait = polish_at[keep], polish_wait[keep]
            gap_a, gm_a, last_cert = gap_a[keep], gm_a[keep], last_cert[keep]
        if k >= max_iter:
            break
        k += 1
        GY = adjoint(Xa, AY - ta)
        Snew, _ = project_psd(Y - GY / La[:, None, None])
        ASnew = logit_differences(Xa, Snew)
        # curvature safeguard: ||A(S_new - Y)||^2 <= L ||S_new - Y||^2
        dS = Snew - Y
        num = (ASnew - AY).square().sum((-2, -1))
        den = dS.square().sum((-2, -1))
        bad = num > La * den * (1 + 1e-9) + 1e-300
        if bool(bad.any()):
            La = torch.where(bad, torch.maximum(1.2 * La, 1.05 * num / den.clamp_min(1e-300)), La)
            m3 = bad[:, None, None]
            Snew, ASnew = torch.where(m3, S, Snew), torch.where(m3, AS, ASnew)
        # gradient restart: <Y - S_new, S_new - S> > 0
        rst = ((Y - Snew) * (Snew - S)).sum((-2, -1)) > 0
        rst = rst | bad
        tnew = 0.5 * (1 + torch.sqrt(1 + 4 * tk * tk))
        beta = torch.where(rst, torch.zeros_like(tk), (tk - 1) / tnew)
        tk = torch.where(rst, torch.ones_like(tk), tnew)
        restarts += rst.long()
        Y = Snew + beta[:, None, None] * (Snew - S)
        AY = ASnew + beta[:, None, None] * (ASnew - AS)
        S, AS = Snew, ASnew
        F = 0.5 * (AS - ta).square().sum((-2, -1))

        fit = F / n <= fit_tol
        done_nf = torch.zeros_like(fit)
        if k % check_every == 0:
            r = AS - ta
            G = adjoint(Xa, r)
            Pg, _ = project_psd(S - G / La[:, None, None])
            gm_a = La * torch.linalg.matrix_norm(S - Pg) / sc
            want = (gm_a <= cert_trigger) & ~fit & (k - last_cert >= cert_every)
            if bool(want.any()):
                w = torch.nonzero(want).flatten()
                since = k - last_cert[w]
                last_cert[w] = k
                y, D = dual_certificate(Xa[w], ta[w], r[w], G[w])
                if polish:  # a proved no-fit whose gap FISTA closes more slowly than Newton would: face_polish
                    Dw = torch.maximum(D, best_dual[w])
                    gap_w = (F[w] - Dw) / torch.clamp_min(F[w], n * fit_tol)
                    trial = (Dw / n > fit_tol) & (gap_w > gap_tol) & (k >= polish_at[w])
                    if bool(trial.any()):
                        lam_w = _eig(torch.linalg.eigvalsh, S[w])
                        rank = (lam_w > POLISH_RANK_TOL * lam_w[:, -1:]).sum(-1)
                        trial &= _fista_left(gap_a[w], gap_w, since, gap_tol) > _polish_price(n, d, rank)
                    if bool(trial.any()):
                        v = w[trial]
                        Sp, ASp, Fp, take, y[trial], D[trial] = _try_polish(
                            Xa[v], ta[v], S[v], F[v], y[trial], D[trial], best_dual[v], fit_tol, gap_tol)
                        kept = v[take]
                        S[kept], AS[kept], F[kept] = Sp[take], ASp[take], Fp[take]
                        polished[kept] += 1
                        fit = F / n <= fit_tol
                        failed = v[~take]
                        polish_wait[failed] *= 2
                        polish_at[failed] = k + polish_wait[failed]
                upd = D > best_dual[w]
                best_dual[w] = torch.where(upd, D, best_dual[w])
                best_y[w] = torch.where(upd[:, None, None], y, best_y[w])
                gap_a[w] = (F[w] - best_dual[w]) / torch.clamp_min(F[w], n * fit_tol)
                done_nf = ((gap_a <= gap_tol) | (not require_gap)) & (best_dual / n > fit_tol) & ~fit
        if log is not None and k % log_every == 0:
            info = dict(active=idx.tolist(), loss_per_sample=(F / n).tolist(), grad_map=gm_a.tolist(),
                        gap=gap_a.tolist(), L=La.tolist())
            history.append((k, info))
            log(k, info)
        if bool(fit.any()):
            finish(fit, "fit", k)
        if bool(done_nf.any()):
            finish(done_nf, "no_fit", k)
        keep = ~(fit | done_nf)
    if idx.numel():
        certified = best_dual / n > fit_tol  # no fit proved, the minimum only bracketed in [D/n, F/n]
        finish(certified, "no_fit", k)
        finish(~certified, "undecided", k)

    A_out = logit_differences(X, S_out)
    res = A_out - t
    loss = 0.5 * res.square().sum((-2, -1)) / n
    lam = _eig(torch.linalg.eigvalsh, S_out)
    rank = (lam > 1e-8 * lam.amax(-1, keepdim=True).clamp_min(1e-300)).sum(-1)
    return FitResult(status=status, loss_per_sample=loss, dual_bound_per_sample=dual_out / n, gap=gap_out,
                     grad_map=gm_out, max_abs_residual=res.abs().amax((-2, -1)), iterations=it_out,
                     restarts=rs_out, polishes=po_out, rank=rank, eigenvalues=lam, S=S_out, dual_y=y_out, lipschitz=Lr,
                     seconds=time.perf_counter() - t0, history=history)
