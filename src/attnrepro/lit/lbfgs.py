"""L-BFGS with one history, step and line search per replica, all replicas evaluated in one batch.

Every parameter has the replica axis first, and the objective is a sum of independent per-replica
terms, so replica r's trajectory depends on its own (f_r, g_r) only: the iteration below is torch's
L-BFGS with its strong-Wolfe line search (torch.optim.lbfgs, ported from minFunc), written per replica
as a generator that yields a trial step t along its direction d and receives (f, g) at x + t d. The
driver evaluates the trial points of every replica still searching in one call of the closure (a
replica that is not searching is evaluated where it stands), so a seed takes the same steps alone or
beside others, at the cost of one batched evaluation per round. Replicas outside ``active`` (those
that converged: lit.replica) do not move.

One ``step`` is, per replica, up to ``max_iter`` iterations and ``max_eval`` evaluations, as torch's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Generator

import torch
from torch import Tensor

# A line search yields a trial step t and receives (f, g) at x + t d; it returns (f, g, t, evaluations).
Search = Generator[float, tuple[float, Tensor], tuple[float, Tensor, float, int]]


def cubic_minimum(x1: float, f1: float, g1: float, x2: float, f2: float, g2: float,
                  bounds: tuple[float, float] | None = None) -> float:
    """The minimiser of the cubic through (x1, f1, f'=g1) and (x2, f2, f'=g2), clipped to bounds (default
    [min(x1, x2), max(x1, x2)]); the bounds' midpoint when the cubic has no minimum:
    d1 = g1 + g2 - 3 (f1 - f2)/(x1 - x2), d2 = sqrt(d1^2 - g1 g2),
    x = x2 - (x2 - x1) (g2 + d2 - d1)/(g2 - g1 + 2 d2)."""
    lo, hi = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 * d1 - g1 * g2
    if d2_square < 0:
        return (lo + hi) / 2.0
    d2 = math.sqrt(d2_square)
    if x1 <= x2:
        x = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        x = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(x, lo), hi)


APPROXIMATE_DELTA = 0.1  # Hager and Zhang's delta: the approximate Wolfe condition's g(x + t d).d <= (2 delta - 1) gtd


def strong_wolfe(d: Tensor, t: float, f: float, g: Tensor, gtd: float, c1: float = 1e-4, c2: float = 0.9,
                 tolerance_change: float = 1e-9, max_ls: int = 25, f_noise: float = 0.0) -> Search:
    """A step t along d from x (f, g, gtd = g.d there) meeting the strong Wolfe conditions
    f(x + t d) <= f + c1 t gtd and |g(x + t d).d| <= -c2 gtd: bracketing, then zoom by cubic interpolation
    (torch.optim.lbfgs._strong_wolfe, step for step).

    f_noise > 0 (an absolute error of f): a trial also ends the search where it meets Hager and Zhang's
    approximate Wolfe conditions, c2 gtd <= g(x + t d).d <= (2 delta - 1) gtd with f(x + t d) <= f + f_noise
    (CG_DESCENT, 2005): the decrease c1 t gtd near a minimum falls below the rounding of f (float32: about
    1e-7 |f|), where the derivative along d, a sum of the gradient's own rounding, is still exact enough."""
    d_norm = float(d.abs().max())

    def approximate(f_new: float, gtd_new: float) -> bool:
        return f_noise > 0 and f_new <= f + f_noise and c2 * gtd <= gtd_new <= (2 * APPROXIMATE_DELTA - 1) * gtd

    f_new, g_new = yield t
    evals, gtd_new = 1, float(g_new.dot(d))
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done, ls_iter = False, 0
    while ls_iter < max_ls:
        if approximate(f_new, gtd_new):
            bracket, bf, bg, bgtd = [t], [f_new], [g_new], [gtd_new]
            done = True
            break
        if f_new > f + c1 * t * gtd or (ls_iter > 1 and f_new >= f_prev):
            bracket, bf, bg, bgtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bf, bg, bgtd = [t], [f_new], [g_new], [gtd_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bf, bg, bgtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], [gtd_prev, gtd_new]
            break
        previous = t
        t = cubic_minimum(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(t + 0.01 * (t - t_prev), t * 10))
        t_prev, f_prev, g_prev, gtd_prev = previous, f_new, g_new, gtd_new
        f_new, g_new = yield t
        evals, gtd_new, ls_iter = evals + 1, float(g_new.dot(d)), ls_iter + 1
    if ls_iter == max_ls:
        bracket, bf, bg, bgtd = [0.0, t], [f, f_new], [g, g_new], [gtd, gtd_new]
    insufficient = False
    low, high = (0, 1) if bf[0] <= bf[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = cubic_minimum(bracket[0], bf[0], bgtd[0], bracket[1], bf[1], bgtd[1])
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:  # too close to an end of the bracket
            if insufficient or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) else min(bracket) + eps
                insufficient = False
            else:
                insufficient = True
        else:
            insufficient = False
        f_new, g_new = yield t
        evals, gtd_new, ls_iter = evals + 1, float(g_new.dot(d)), ls_iter + 1
        if approximate(f_new, gtd_new):
            bracket[low], bf[low], bg[low], bgtd[low] = t, f_new, g_new, gtd_new
            done = True
        elif f_new > f + c1 * t * gtd or f_new >= bf[low]:
            bracket[high], bf[high], bg[high], bgtd[high] = t, f_new, g_new, gtd_new
            low, high = (0, 1) if bf[0] <= bf[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                bracket[high], bf[high], bg[high], bgtd[high] = bracket[low], bf[low], bg[low], bgtd[low]
            bracket[low], bf[low], bg[low], bgtd[low] = t, f_new, g_new, gtd_new
    return bf[low], bg[low], bracket[low], evals


@dataclass
class ReplicaState:
    """One replica's L-BFGS memory, kept across steps: direction, step, curvature pairs (s, y, 1/y.s),
    the initial inverse-Hessian scale and the previous gradient."""

    x: Tensor                              # the replica's current point (a row of the flat parameters)
    d: Tensor | None = None
    t: float = 0.0
    steps: list[Tensor] = field(default_factory=list)   # s_k = t_k d_k
    diffs: list[Tensor] = field(default_factory=list)   # y_k = g_{k+1} - g_k
    rho: list[float] = field(default_factory=list)      # 1 / (y_k . s_k)
    H_diag: float = 1.0
    prev_g: Tensor | None = None
    n_iter: int = 0


class ReplicaLBFGS(torch.optim.Optimizer):
    """L-BFGS per replica (module docstring). ``step(closure)``: closure() fills p.grad with the gradient of
    the summed objective and returns the (R,) per-replica objective; returns the (R,) objective at the new
    points, with p.grad holding each replica's gradient there. ``active``: the replicas to move (all by
    default). ``gradient_tol``: per replica, a bound on ||g|| ||x|| (all of its parameters) that also ends
    its step, at the first iteration that meets it (lit.replica sets it to tol_grad |L_0|, its relative
    gradient test); ``f_noise``: the line search's approximate Wolfe test (strong_wolfe) with
    f_noise |f| as the error of f."""

    def __init__(self, params, lr: float = 1.0, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9, history_size: int = 10,
                 f_noise: float = 0.0):
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval or max_iter * 5 // 4,
                        tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                        history_size=history_size, f_noise=f_noise)
        super().__init__(params, defaults)
        self._params = self.param_groups[0]["params"]
        self.replicas = self._params[0].shape[0]
        if any(p.shape[0] != self.replicas for p in self._params):
            raise ValueError("every parameter needs the replica axis first, of one length")
        self.active = [True] * self.replicas
        self.gradient_tol: list[float] | None = None
        self.replica_states: list[ReplicaState] | None = None

    def narrow(self, params: list[Tensor], keep: list[int]) -> None:
        """Go on with ``params`` (replicas ``keep`` of the current ones, in that order), each replica keeping
        its history (lit.compaction)."""
        self.param_groups[0]["params"] = self._params = list(params)
        self.replicas = len(keep)
        self.active = [self.active[r] for r in keep]
        if self.gradient_tol is not None:
            self.gradient_tol = [self.gradient_tol[r] for r in keep]
        if self.replica_states is not None:
            self.replica_states = [self.replica_states[r] for r in keep]

    def _flat(self, tensors) -> Tensor:
        return torch.cat([t.reshape(self.replicas, -1) for t in tensors], dim=1)

    def _set(self, X: Tensor) -> None:
        offset = 0
        for p in self._params:
            n = p[0].numel()
            p.copy_(X[:, offset:offset + n].view_as(p))
            offset += n

    def _evaluate(self, closure: Callable[[], Tensor], X: Tensor) -> tuple[Tensor, Tensor]:
        self._set(X)
        with torch.enable_grad():
            f = closure().detach()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self._params]
        return f.to(torch.float64), self._flat(grads).clone()

    def _replica_step(self, s: ReplicaState, f: float, g: Tensor, gradient_tol: float):
        """One torch L-BFGS step of one replica from s.x (f, g there): yields trial steps along s.d, receives
        (f, g) there; moves s.x and returns (f, g) at the new point. It ends early where ||g|| ||x|| <=
        gradient_tol (as where torch's max |g| <= tolerance_grad)."""
        group = self.param_groups[0]
        lr, tol_grad, tol_change = group["lr"], group["tolerance_grad"], group["tolerance_change"]
        max_iter, max_eval, history = group["max_iter"], group["max_eval"], group["history_size"]

        def small(g: Tensor) -> bool:
            return float(g.abs().max()) <= tol_grad or (
                gradient_tol > 0 and float(g.norm()) * float(s.x.norm()) <= gradient_tol)

        if small(g):
            return f, g
        n_iter, evals = 0, 1
        while n_iter < max_iter:
            n_iter, s.n_iter = n_iter + 1, s.n_iter + 1
            if s.n_iter == 1:
                s.d, s.steps, s.diffs, s.rho, s.H_diag = -g, [], [], [], 1.0
            else:
                y, step = g - s.prev_g, s.d * s.t
                ys = float(y.dot(step))
                if ys > 1e-10:
                    if len(s.steps) == history:
                        s.steps.pop(0), s.diffs.pop(0), s.rho.pop(0)
                    s.steps.append(step), s.diffs.append(y), s.rho.append(1.0 / ys)
                    s.H_diag = ys / float(y.dot(y))
                q, a = -g, [0.0] * len(s.steps)  # the two-loop recursion: d = -H g
                for i in range(len(s.steps) - 1, -1, -1):
                    a[i] = float(s.steps[i].dot(q)) * s.rho[i]
                    q = q - a[i] * s.diffs[i]
                r = q * s.H_diag
                for i in range(len(s.steps)):
                    r = r + (a[i] - float(s.diffs[i].dot(r)) * s.rho[i]) * s.steps[i]
                s.d = r
            s.prev_g, prev_f = g, f
            s.t = min(1.0, 1.0 / float(g.abs().sum())) * lr if s.n_iter == 1 else lr
            gtd = float(g.dot(s.d))
            if gtd > -tol_change:
                break
            f, g, s.t, ls_evals = yield from strong_wolfe(s.d, s.t, f, g, gtd, max_ls=max_eval - evals,
                                                          f_noise=group["f_noise"] * abs(f))
            s.x.add_(s.d, alpha=s.t)
            evals += ls_evals
            if n_iter == max_iter or evals >= max_eval or small(g):
                break
            if float(s.d.abs().max()) * abs(s.t) <= tol_change or abs(f - prev_f) < tol_change:
                break
        return f, g

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor]) -> Tensor:  # type: ignore[override]
        X = self._flat(self._params).clone()
        if self.replica_states is None:
            self.replica_states = [ReplicaState(X[r]) for r in range(self.replicas)]
        else:
            for r, s in enumerate(self.replica_states):
                s.x = X[r]
        f, G = self._evaluate(closure, X)
        final = [(float(f[r]), G[r]) for r in range(self.replicas)]
        searches, trials = {}, {}
        gradient_tol = self.gradient_tol or [0.0] * self.replicas
        for r in range(self.replicas):
            if self.active[r]:
                searches[r] = self._replica_step(self.replica_states[r], *final[r], gradient_tol[r])
                self._advance(searches, trials, final, r, None)
        while trials:
            trial = X.clone()
            for r, t in trials.items():
                trial[r].add_(self.replica_states[r].d, alpha=t)
            f, G = self._evaluate(closure, trial)
            for r in list(trials):
                self._advance(searches, trials, final, r, (float(f[r]), G[r]))
        self._set(X)
        grad = torch.stack([g for _, g in final])
        offset = 0
        for p in self._params:
            n = p[0].numel()
            p.grad = grad[:, offset:offset + n].reshape(p.shape).clone()
            offset += n
        return torch.tensor([v for v, _ in final], dtype=torch.float64)

    @staticmethod
    def _advance(searches: dict, trials: dict, final: list, r: int, value) -> None:
        """Send replica r its evaluation; keep its next trial step, or its final (f, g) when its step ended."""
        try:
            trials[r] = next(searches[r]) if value is None else searches[r].send(value)
        except StopIteration as end:
            trials.pop(r, None)
            final[r] = end.value
