"""The exact-fit test of paper B's interpolation threshold, as a job (model=psd_exact_fit, train=solved).

At lambda = 0 the softmax student fits its labels exactly iff some PSD S has h(S) equal to the
labels' logits up to a constant per row, i.e. (T = 2) logit differences

    t_mu = (h_11 - h_12, h_22 - h_12)(S0) + (xi_11 - xi_12, xi_22 - xi_12)     (the labels at beta = beta0)

(any beta only rescales t, and the PSD matrices are a cone). Per seed: the target S0, then n =
alpha d^2 samples (tokens, noise) from the seed's generator (tasks.attention_indexed); the convex
problem min_{S PSD} 1/2 |A(S) - t|^2 is solved by problems.psd_exact_fit, and the record keeps

- metrics: fits (1 = exact fit, residual per sample <= fit_tol; 0 = a certified minimum above it;
  NaN = undecided at the iteration cap), loss_per_sample (the smallest residual per sample found),
  dual_bound_per_sample (its certified lower bound), gap, grad_map, max_abs_residual, iterations,
  polishes (1 where Newton at the iterate's rank closed the gap), rank_fraction (rank of S / d);
- derived: n, Q0; fit: status ("fit", "no_fit", "undecided") per seed;
- arrays: the eigenvalues of S.
"""

from __future__ import annotations

import math
import time

import torch

from attnrepro.papers.tied_attention import exact_fit as psd_exact_fit
from attnrepro.papers.tied_attention import task as AI
from attnrepro.seeding import replica_generators


def draw(task, gens: list[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per replica: S0 (R, d, d), tokens X (R, n, 2, d) and the labels' logit differences t (R, n, 2)."""
    d, n = task.d, task.n()
    S0s, Xs, ts = [], [], []
    for g in gens:
        S0 = AI.draw_target(g, d, task.target.value, task.kappa0, task.gamma, task.eigenvalues)
        X = AI.draw_tokens(g, n, 2, d)
        h = AI.preactivations(X, S0) + AI.draw_noise(g, n, 2, task.Delta)
        S0s.append(S0)
        Xs.append(X)
        ts.append(torch.stack([h[:, 0, 0] - h[:, 0, 1], h[:, 1, 1] - h[:, 0, 1]], -1))
    return torch.stack(S0s), torch.stack(Xs), torch.stack(ts)


def fit(cfg) -> dict:
    """Solve every seed's problem; the record's derived quantities, how each seed's solve ended (fit), metrics,
    arrays and timings."""
    t0 = time.perf_counter()
    task, model = cfg.task, cfg.model
    S0, X, t = draw(task, replica_generators(cfg.seed, cfg.n_seeds))
    device = torch.device("cuda" if cfg.trainer.accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
                          else "cpu")
    X, t = X.to(device), t.to(device)

    def log(k, info):
        worst = max(info["loss_per_sample"]) if info["loss_per_sample"] else float("nan")
        print(f"    [exact fit] iteration {k}: {len(info['active'])} seeds open, largest residual per sample "
              f"{worst:.3g}", flush=True)

    t1 = time.perf_counter()
    res = psd_exact_fit.solve(X, t, max_iter=model.max_iter, fit_tol=model.fit_tol, gap_tol=model.gap_tol,
                              log=log, log_every=model.log_every)
    t2 = time.perf_counter()
    code = {"fit": 1.0, "no_fit": 0.0, "undecided": math.nan}
    as_list = lambda v: v.detach().cpu().tolist()  # noqa: E731
    d = task.d
    return {
        "derived": {"n": task.n(), "Q0": as_list((S0 ** 2).sum((-1, -2)) / d)}, "fit": {"status": res.status},
        "metrics": {"fits": [code[s] for s in res.status], "loss_per_sample": as_list(res.loss_per_sample),
                    "dual_bound_per_sample": as_list(res.dual_bound_per_sample), "gap": as_list(res.gap),
                    "grad_map": as_list(res.grad_map), "max_abs_residual": as_list(res.max_abs_residual),
                    "iterations": as_list(res.iterations.double()),
                    "polishes": as_list(res.polishes.double()), "rank_fraction": as_list(res.rank.double() / d)},
        "curves": {"step": []},
        "arrays": {"eigenvalues": as_list(res.eigenvalues.flip(-1))},
        "timings": {"setup_s": t1 - t0, "train_s": t2 - t1, "steps": int(res.iterations.max()), "device": str(device)},
    }
