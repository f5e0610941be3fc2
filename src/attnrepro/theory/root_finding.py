"""A root finder for small smooth systems whose evaluation is expensive and whose domain is bounded:
Newton's method with a forward-difference Jacobian, Broyden updates and a backtracking line search."""

from __future__ import annotations

import numpy as np

from attnrepro.theory.softmax_prox import ProxNotSolved


class NotConverged(RuntimeError):
    """A fixed point or root was not found to its tolerance (or the solve left the domain)."""


def newton_root(fun, y0: np.ndarray, jac: np.ndarray | None = None, tol: float = 1e-8, max_evals: int = 40,
                fd_step: float = 1e-6):
    """A root of fun (R^k -> R^k, returning (r, extra)) by Newton's method: a forward-difference Jacobian
    (or the one given), Broyden's rank-one updates, and a backtracking line search on ||r|| (steps 1, 1/2,
    ..., 1/64; points where fun raises ValueError, ProxNotSolved or an arithmetic error, such as a float
    overflow far out (Sigma = 6e263 squared), count as out of the domain). When the line search fails with an
    updated Jacobian, the Jacobian is recomputed; when it fails with a fresh one, NotConverged.
    Returns (y, r, extra, jac, evals)."""
    evals = 0

    def call(y):
        nonlocal evals
        if evals >= max_evals:
            raise NotConverged(f"root finder: |r| = {np.max(np.abs(r)):.2e} > {tol:g} after {evals} evaluations")
        evals += 1
        return fun(y)

    def fd_jacobian(y, r):
        out = np.empty((len(y), len(y)))
        for k in range(len(y)):
            h = fd_step * max(1.0, abs(y[k]))
            yk = y.copy()
            yk[k] += h
            out[:, k] = (call(yk)[0] - r) / h
        return out

    y = np.asarray(y0, float)
    r = np.full(len(y), np.inf)
    r, extra = call(y)
    fresh = jac is None
    if fresh:
        jac = fd_jacobian(y, r)
    while np.max(np.abs(r)) > tol:
        try:
            step = -np.linalg.solve(jac, r)
        except np.linalg.LinAlgError as e:
            raise NotConverged(f"root finder: singular Jacobian ({e})") from e
        norm, accepted = np.linalg.norm(r), None
        for t in 0.5 ** np.arange(7):
            try:
                r_new, extra_new = call(y + t * step)
            except (ValueError, ArithmeticError, ProxNotSolved):
                continue
            if np.linalg.norm(r_new) < (1 - 1e-4 * t) * norm:
                accepted = t
                break
        if accepted is None:
            if fresh:
                raise NotConverged(f"root finder: no step along Newton's direction lowers |r| = "
                                   f"{np.max(np.abs(r)):.2e}")
            jac, fresh = fd_jacobian(y, r), True
            continue
        dy, dr = accepted * step, r_new - r
        jac = jac + np.outer(dr - jac @ dy, dy) / (dy @ dy)
        y, r, extra, fresh = y + dy, r_new, extra_new, False
    return y, r, extra, jac, evals
