"""Speed and memory benchmarks: `make bench`. Prints a table and writes outputs/bench/bench.json.

Each case runs in its own process, so its peak resident memory is its own.

  xor_one_step : one population gradient step, softmax attention, d = 4096,
                 m = log2(d)^2 = 144, 40 seeds as replicas (float64):
                 the bare step in plain torch, and the whole job through the
                 pipeline (compose, build, Lightning, record).
  tied_factorized : paper B's factorized tied attention, d = 100, T = 2, alpha = 0.2
                 (n = 2000), kappa = 0.5, 1000 full-batch Adam steps (float32, metrics
                 logged every 50 steps): 8 seeds as replicas through the pipeline
                 (run_job -> fit -> Lightning) against a plain PyTorch loop of the same
                 problem one seed at a time, and Lightning's overhead (pipeline train
                 time against the same 8-replica problem stepped in a plain loop).
  tied_authors : paper B's factorized tied attention at d = 200, T = 2, alpha = 0.21 (n = 8400),
                 p = 100, 1000 full-batch Adam steps, lr 0.1, float32: a plain loop written as the
                 authors' public script does it (nn.Linear(d, p, bias=False), einsum Gram over (n, T, p),
                 trace subtraction, nn.Softmax, loss sum (y_hat - y)^2 / d, all samples in one batch,
                 one seed), the pipeline with 1 and with 4 seeds (train time per seed), and the two
                 matmuls a step needs (Z = X W^T and its weight gradient, one seed) 1000 times: the
                 ratios and the pipeline's share of that matmul time.
  tied_gradient : one evaluation of paper B's factorized objective and gradient (T = 2, seq2lab, one thread),
                 by hand (FactorizedTiedAttention.pair_fit_gradient) against autograd's route, alternating, best
                 of three rounds: d = p = 200 and d = 200, p = 100 at the slice's alpha = 0.16, and d = p = 100
                 at the quick profile's alpha = 0.16, with 8, 2 and 1 replicas, float32 and float64.
  theory_mmse  : paper B's Bayes-optimal MMSE curve, 100 values of alpha, Wishart target
                 kappa0 = 0.5, T = 2 (tabulate m(qhat) at 160 points, then the curve).
  theory_J     : J(delta, eps) and both partial derivatives on a 10 x 10 grid (100 points,
                 10 distinct delta), Wishart target kappa0 = 0.5; and the same grid for the
                 power-law target at d = 100 (100 atoms).
  theory_se    : the ERM state evolution, softmax channel, T = 2, Wishart kappa0 = 0.5,
                 Delta = 0.5, kappa = 1, alpha = 0.1, quick-profile settings (Sobol' 2^12): one point
                 at lambda = 0.1 and 1e-3, from a cold start and warm-started from alpha = 0.09
                 (as along a sweep); and the quick profile's whole theory stage.
  theory_limit : the softmax state evolution along lambda = 0.1 ... 1e-6 at alpha = 0.1 against
                 its closed-form lambda -> 0+ limit (the gaps), and along lambda = 0.1 ... 1e-4 at
                 alpha = 0.2 > alpha_interp, where the limit is the fixed point at lambda = 0 (finite;
                 the path is still far from it at 1e-4, where eps = lambda~/mhat is not small:
                 docs/state_evolution.md, "Above alpha_interp").
  channel_accuracy : the output channel's Sobol' rules (2^12 quick, 2^16 paper) against 10^6
                 Monte Carlo draws at five (Sigma, m, q), Sigma up to 3000.
  tied_slice   : a fixed slice of paper B's paper profile at d = 200 (--slice-d), 2 seeds (--slice-seeds;
                 the paper's 8 with --slice-seeds 8), one thread,
                 trained by L-BFGS to the paper's tol_grad = 2e-5 under four protocols, job by job
                 side by side: 0, float64 throughout (train=lbfgs_fullbatch) with every seed evaluated until
                 the job ends, every L-BFGS step run to its 20 iterations and autograd's gradient (the
                 protocol before lit.compaction, the per-iteration gradient test and the gradient by hand);
                 1, float64 with a seed's step ending at tol_grad, a stopped seed leaving the batch and the
                 gradient by hand; 2, that with float32 (approximate Wolfe line search) until the relative
                 gradient is 1.5e-5 or the objective stalls, then float64 from there
                 (train=lbfgs_mixed_precision, paper B's lambda > 0 default); 3, protocol 2 with autograd's
                 gradient (the protocol before the gradient by hand). tied_error_vs_alpha at
                 Delta = 0.5, alpha in {0.15, 0.2} and every lambda > 0 of its grid; tied_interpolation_peak
                 at alpha = 0.16 and every lambda > 0. Core-seconds (CPU time of one thread, so a
                 busy machine slows but does not inflate them), steps, relative gradients, and each
                 point's test error under each. --slice-experiments, --slice-lambdas and --slice-protocols
                 (numbers, default 0 1 2; the first given is the one the others are compared with) run part of it.
  tied_warm_starts : warm starts for tied_interpolation_peak at d = 100, 2 seeds, float64 L-BFGS: each
                 point from the seed's cold init against from the previous point's answer, along the
                 lambda path at alpha = 0.16 (descending, glmnet's pathwise order) and the alpha path at
                 lambda = 1e-4: core-seconds, test errors and objectives.
  exact_fit    : tied_interpolation_threshold's exact-fit jobs at d = 50, Delta in {0.5, 1}, alpha in
                 {0.14, 0.15, 0.16, 0.17, 0.2} (around the threshold, where FISTA's tail is long), 8 seeds, one
                 thread, through the pipeline with and without Newton at the iterate's rank (face_polish):
                 core-seconds, iterations, verdicts and certified minima.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _median_time(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def pipeline_job(overrides: list[str]):
    """Run one job through the pipeline (compose, run_job) in a temp outputs dir:
    (its config, wall seconds, its record)."""
    from attnrepro.jobs.grid import compose
    from attnrepro.jobs.records import read_record, record_path
    from attnrepro.jobs.training import job_key, run_job

    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose([*overrides, f"paths.outputs={tmp}"])
        t = time.perf_counter()
        run_job(cfg)
        job_s = time.perf_counter() - t
        return cfg, job_s, read_record(record_path(tmp, cfg.experiment, job_key(cfg)))


def case_xor_one_step(d: int = 4096, n_seeds: int = 40) -> dict:
    import torch


    cfg, job_s, rec = pipeline_job(["experiment=xor_phase_dm", f"task.d={d}", "model.m_c=1.0",
                                    f"n_seeds={n_seeds}"])

    from attnrepro.config import validate
    from attnrepro.papers.sparse_xor.problem import build
    from attnrepro.seeding import replica_generators

    obj = validate(cfg)
    problem, derived = build(obj.task, obj.model, obj.train, replica_generators(0, n_seeds))
    opt = torch.optim.SGD(problem.parameters(), lr=derived["lr"])

    def step():
        opt.zero_grad()
        problem.accumulate(lambda loss: loss.backward())
        opt.step()

    step_s = _median_time(step, 7)
    return {"case": f"one population step, d={d}, m={derived['m']}, {n_seeds} seeds",
            "plain torch step (s)": step_s, "step per seed (ms)": 1e3 * step_s / n_seeds,
            "pipeline job total (s)": job_s, "pipeline train_s (s)": rec["timings"]["train_s"],
            "peak RSS (MB)": _peak_mb(), "threads": torch.get_num_threads()}


def _plain_loop(obj, seed: int, n_seeds: int) -> float:
    """Seconds for obj.train.steps Adam steps of the problem in a plain loop (no Lightning), evaluating
    the metrics every log_every steps as the pipeline does."""
    import torch

    from attnrepro.papers.tied_attention.problem import build
    from attnrepro.seeding import replica_generators

    problem, derived = build(obj.task, obj.model, obj.train, replica_generators(seed, n_seeds))
    opt = torch.optim.Adam(problem.parameters(), lr=derived["lr"])
    t = time.perf_counter()
    problem.evaluate()
    for step in range(1, obj.train.steps + 1):
        opt.zero_grad()
        problem.accumulate(lambda loss: loss.backward())
        opt.step()
        if step % obj.train.log_every == 0:
            problem.evaluate()
    return time.perf_counter() - t


def case_tied_factorized(d: int = 100, n_seeds: int = 8, single_seeds: int = 2) -> dict:
    import torch

    from attnrepro.config import validate

    cfg, job_s, rec = pipeline_job(["task=attention_indexed", "model=tied_factorized", "train=adam_fullbatch",
                                    f"task.d={d}", "task.T=2", "task.alpha=0.2", f"n_seeds={n_seeds}",
                                    "train.tol=0"])
    obj = validate(cfg)
    steps, train_s = rec["timings"]["steps"], rec["timings"]["train_s"]
    single = [_plain_loop(obj, seed, 1) for seed in range(single_seeds)]
    replicated = _plain_loop(obj, 0, n_seeds)
    per_seed_pipeline, per_seed_single = train_s / n_seeds, statistics.mean(single)
    return {"case": f"factorized tied attention, d={d}, T=2, alpha=0.2 (n={obj.task.n()}), p={obj.model.p(d)}, "
                    f"{steps} Adam steps, {n_seeds} seeds",
            "pipeline job total (s)": job_s, "pipeline train_s (s)": train_s,
            "pipeline per seed (s)": per_seed_pipeline,
            f"plain loop, 1 seed at a time, per seed (s, mean of {single_seeds})": per_seed_single,
            "speed-up per seed, pipeline replicas vs plain single": per_seed_single / per_seed_pipeline,
            "plain loop, 8 replicas, per seed (s)": replicated / n_seeds,
            "speed-up per seed, plain replicas vs plain single": per_seed_single * n_seeds / replicated,
            "pipeline step (ms)": 1e3 * train_s / steps, "plain replicated step (ms)": 1e3 * replicated / steps,
            "Lightning overhead (fraction of pipeline step)": (train_s - replicated) / train_s,
            "peak RSS (MB)": _peak_mb(), "threads": torch.get_num_threads()}


def case_tied_gradient() -> dict:
    import torch

    from attnrepro.papers.tied_attention.model import FactorizedTiedAttention
    from attnrepro.papers.tied_attention.problem import SampleSet, TiedAttentionProblem

    torch.set_num_threads(1)
    out = {"case": "paper B's factorized objective and gradient, T = 2, seq2lab, one thread: ms per evaluation"}
    for d, p, R in ((200, 200, 8), (200, 200, 2), (200, 200, 1), (200, 100, 8), (100, 100, 8), (100, 100, 1)):
        n = round(0.16 * d * d)
        for dtype in (torch.float32, torch.float64):
            g = torch.Generator().manual_seed(0)
            X = torch.randn(R, n, 2, d, generator=g, dtype=torch.float64).to(dtype)
            A = torch.softmax(torch.randn(R, n, 2, 2, generator=g, dtype=torch.float64), -1).to(dtype)
            model = FactorizedTiedAttention.draw([torch.Generator().manual_seed(r) for r in range(R)], d, p, 1.0,
                                                 1e-3, "seq2lab", dtype=dtype)
            data = SampleSet(X, A)
            problem = TiedAttentionProblem(model, torch.eye(d).expand(R, d, d), data, data, data, 8192, 1)
            best = {}
            for by_hand in (False, True) * 3:
                TiedAttentionProblem.gradient_by_hand = by_hand
                best[by_hand] = min(best.get(by_hand, math.inf), _median_time(
                    lambda problem=problem: (problem.zero_grad(), problem.accumulate(torch.Tensor.backward)), 3))
            TiedAttentionProblem.gradient_by_hand = True
            key = f"d={d} p={p} n={n} {R} replicas {str(dtype)[6:]}"
            out[key] = (f"autograd {1e3 * best[False]:.1f}, by hand {1e3 * best[True]:.1f} "
                        f"({best[False] / best[True]:.2f}x)")
    return out


def _authors_loop(X, y, p: int, steps: int) -> float:
    """Seconds for `steps` Adam steps of the authors'-style loop on one seed's samples X (n, T, d)."""
    import math

    import torch
    from torch import nn

    n, T, d = X.shape

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.Q = nn.Linear(d, p, bias=False)
            self.softmax = nn.Softmax(dim=-1)

        def forward(self, x):
            z = self.Q(x)
            h = torch.einsum("nap,nbp->nab", z, z) / math.sqrt(p * d) / math.sqrt(d)
            trace = torch.trace(self.Q.weight.T @ self.Q.weight) / math.sqrt(p * d) / math.sqrt(d)
            return self.softmax(h - trace * torch.eye(T))

    model = Attention()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    t = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(X) - y) ** 2).sum() / d
        loss.backward()
        opt.step()
    return time.perf_counter() - t


def case_tied_authors(d: int = 200, steps: int = 1000) -> dict:
    import torch

    from attnrepro.config import validate
    from attnrepro.papers.tied_attention.problem import build
    from attnrepro.seeding import replica_generators

    base = ["task=attention_indexed", "model=tied_factorized", "train=adam_fullbatch", f"task.d={d}", "task.T=2",
            "task.alpha=0.21", "model.kappa=0.5", f"train.steps={steps}", "train.tol=0", "train.tol_grad=0",
            "train.fixed_steps=true"]
    per_seed = {}
    for seeds in (1, 4):
        cfg, _, rec = pipeline_job([*base, f"n_seeds={seeds}"])
        per_seed[seeds] = rec["timings"]["train_s"] / seeds
    obj = validate(cfg)
    problem, _ = build(obj.task, obj.model, obj.train, replica_generators(0, 1))
    X, y, p = problem.train_set.X[0], problem.train_set.A[0], obj.model.p(d)
    authors = _authors_loop(X, y, p, steps)
    X2 = X.reshape(-1, d).contiguous()
    W = torch.randn(p, d, dtype=X.dtype)
    G = torch.randn(X2.shape[0], p, dtype=X.dtype)
    matmul = steps * _median_time(lambda: (X2 @ W.T, G.T @ X2), 20)
    n = obj.task.n()
    return {"case": f"factorized tied attention, d={d}, T=2, alpha=0.21 (n={n}), p={p}, {steps} Adam steps, lr 0.1, "
                    f"float32",
            "authors'-style loop, 1 seed (s)": authors,
            "pipeline, 1 seed: train time per seed (s)": per_seed[1],
            "pipeline, 4 seeds: train time per seed (s)": per_seed[4],
            "the two matmuls of a step, 1 seed, x steps (s)": matmul,
            "GFLOP/s of those matmuls": 2 * 2 * n * 2 * p * d * steps / matmul / 1e9,
            "speed-up per seed, 1 seed (target >= 2.5x with 4)": authors / per_seed[1],
            "speed-up per seed, 4 seeds (target >= 2.5x)": authors / per_seed[4],
            "share of the matmul time, 4 seeds (target >= 60%)": matmul / per_seed[4],
            "peak RSS (MB)": _peak_mb(), "threads": torch.get_num_threads()}


def case_theory_mmse(points: int = 100) -> dict:
    import numpy as np

    from attnrepro.theory.bayes_optimal import PriorCurve
    from attnrepro.theory.spectral_laws import MarchenkoPastur

    def curve():
        PriorCurve.tabulate(MarchenkoPastur(0.5)).mmse(np.linspace(0, 0.4, points), 2)

    return {"case": f"Bayes-optimal MMSE curve, {points} values of alpha, Wishart kappa0 = 0.5, T = 2",
            "whole curve (s, median of 3)": _median_time(curve, 3), "peak RSS (MB)": _peak_mb()}


def case_theory_J(n: int = 10) -> dict:
    import numpy as np

    from attnrepro.theory.free_convolution import FreeConvolution
    from attnrepro.theory.spectral_laws import MarchenkoPastur, power_law

    def grid(law):
        def run():
            for delta in np.geomspace(0.05, 3.0, n):
                fc = FreeConvolution(law, delta)
                eps = np.linspace(0.0, 3.0, n)
                fc.J(eps), fc.dJ_deps(eps), fc.dJ_ddelta(eps)
        return run

    return {"case": f"J, dJ/deps, dJ/ddelta on a {n} x {n} (delta, eps) grid",
            "Wishart kappa0 = 0.5 (s, median of 3)": _median_time(grid(MarchenkoPastur(0.5)), 3),
            "power law d = 100, gamma = 1 (s, median of 3)": _median_time(grid(power_law(100, 1.0)), 3),
            "peak RSS (MB)": _peak_mb()}


def case_theory_se() -> dict:
    import torch

    from attnrepro.jobs import theory as theory_runs
    from attnrepro.theory.gaussian_rules import sobol
    from attnrepro.theory.output_channel import SoftmaxChannel
    from attnrepro.theory.spectral_laws import MarchenkoPastur
    from attnrepro.theory.state_evolution import solve, solve_continued

    law = MarchenkoPastur(0.5)
    channel = SoftmaxChannel(2, law.Q0, 0.5, sobol(4, 12))
    out = {"case": "ERM state evolution, softmax, T = 2, kappa0 = 0.5, Delta = 0.5, kappa = 1, alpha = 0.1, quick "
                   "settings (Sobol' 2^12, tol 1e-6)"}
    for lam in (0.1, 1e-3):
        t = time.perf_counter()
        p, _ = solve_continued(law, channel, 0.1, lam, 1.0, tol=1e-6)
        out[f"lambda = {lam:g}, cold start (s)"] = time.perf_counter() - t
        prev, jac = solve_continued(law, channel, 0.09, lam, 1.0, tol=1e-6)
        t = time.perf_counter()
        q, _ = solve(law, channel, 0.1, lam, 1.0, init=(prev.Sigma, prev.m, prev.q), jac=jac, tol=1e-6)
        out[f"lambda = {lam:g}, warm start from alpha = 0.09 (s)"] = time.perf_counter() - t
        out[f"lambda = {lam:g}, warm: channel evaluations"] = q.iterations
    with tempfile.TemporaryDirectory() as tmp:
        settings = theory_runs.theory_settings("quick", [f"paths.outputs={tmp}"])
        t = time.perf_counter()
        counts = theory_runs.run(settings, log=lambda *_: None)
        out["quick profile's theory stage, every curve (s)"] = time.perf_counter() - t
        out["  curves computed, failed"] = f"{counts['complete']}, {counts['failed']}"
        out["  workers"] = settings.workers
    out.update({"peak RSS (MB)": _peak_mb(), "threads": torch.get_num_threads()})
    return out


def case_channel_accuracy() -> dict:
    """The Sobol' rules of the quick (2^12) and paper (2^16) profiles against 10^6 Monte Carlo draws (10
    batches of 10^5, s.e. from their spread) and against a 2^20-point Sobol' set of another seed, at five
    (Sigma, m, q)."""
    import numpy as np

    from attnrepro.theory.gaussian_rules import monte_carlo, sobol
    from attnrepro.theory.output_channel import SoftmaxChannel

    Q0, Delta, names = 1.5, 0.5, ("M", "dSigma", "dm", "dq")
    points = [(0.5, 0.8, 1.0), (3.0, 1.0, 1.2), (30.0, 1.1, 1.3), (100.0, 1.2, 1.3), (3000.0, 1.3, 1.5)]
    rules = {k: SoftmaxChannel(2, Q0, Delta, sobol(4, k)) for k in (12, 16)}
    out = {"case": "output channel: Sobol' rules against 10^6 Monte Carlo draws (T = 2, Q0 = 1.5, Delta = 0.5); "
                   "|rule - MC| / |MC| per quantity, and the MC s.e. (relative)"}
    worst = {12: 0.0, 16: 0.0}
    worst_ref = {12: 0.0, 16: 0.0}
    for pt in points:
        mc = np.array([[getattr(SoftmaxChannel(2, Q0, Delta, monte_carlo(4, 100_000, seed=100 + b)).evaluate(*pt), k)
                        for k in names] for b in range(10)])
        mean, se = mc.mean(0), mc.std(0, ddof=1) / np.sqrt(10)
        label = f"(Sigma, m, q) = {pt}"
        out[f"{label} MC s.e."] = " ".join(f"{n} {s / abs(m):.1e}" for n, m, s in zip(names, mean, se, strict=True))
        ref = SoftmaxChannel(2, Q0, Delta, sobol(4, 20, seed=7)).evaluate(*pt)
        for k, ch in rules.items():
            v = ch.evaluate(*pt)
            dev = [abs(getattr(v, n) - m) / abs(m) for n, m in zip(names, mean, strict=True)]
            dref = [abs(getattr(v, n) / getattr(ref, n) - 1) for n in names]
            worst[k], worst_ref[k] = max(worst[k], max(dev)), max(worst_ref[k], max(dref))
            out[f"{label} 2^{k} vs MC"] = " ".join(f"{n} {x:.1e}" for n, x in zip(names, dev, strict=True))
            out[f"{label} 2^{k} vs Sobol' 2^20"] = " ".join(f"{n} {x:.1e}" for n, x in zip(names, dref, strict=True))
    out.update({f"largest deviation from MC, 2^{k}": w for k, w in worst.items()})
    out.update({f"largest deviation from Sobol' 2^20 (seed 7), 2^{k}": w for k, w in worst_ref.items()})
    return out


def case_theory_limit() -> dict:
    """The softmax state evolution along lambda at alpha = 0.1 < alpha_interp against its closed-form
    lambda -> 0+ limit (kappa = 1, kappa0 = 0.5, T = 2, Delta = 0.5, Sobol' 2^14)."""
    from attnrepro.theory.gaussian_rules import sobol
    from attnrepro.theory.output_channel import SoftmaxChannel
    from attnrepro.theory.spectral_laws import MarchenkoPastur
    from attnrepro.theory.state_evolution import interpolating_limit, solve_continued, state_evolution_curve

    law = MarchenkoPastur(0.5)
    channel = SoftmaxChannel(2, law.Q0, 0.5, sobol(4, 14))
    lim = interpolating_limit(law, 2, 0.5, 0.1)
    E_lim, test_lim = law.Q0 - 2 * lim.m + lim.q, channel.test_error(lim.m, lim.q)
    out = {"case": "softmax state evolution vs lambda at alpha = 0.1 (kappa = 1, kappa0 = 0.5, T = 2, Delta = 0.5, "
                   "Sobol' 2^14): gaps to the closed-form lambda -> 0+ limit",
           "limit: E, test error, eta, delta, eps": f"{E_lim:.5f} {test_lim:.5f} 1 {lim.delta:.5f} {lim.eps:.5f}"}
    for lam in (0.1, 0.03, 0.01, 0.003, 0.001, 3e-4, 1e-4, 1e-5, 1e-6):
        r = state_evolution_curve(law, channel, [0.1], lam, 1.0, 2, 0.5, tol=1e-8)[0]
        if not r["converged"]:
            out[f"lambda = {lam:g}"] = f"FAILED: {r['reason']}"
            continue
        out[f"lambda = {lam:g}"] = (f"E {r['estimation_error']:.5f} (gap {r['estimation_error'] - E_lim:+.2e}), test "
                                    f"{r['test_error']:.5f} (gap {r['test_error'] - test_lim:+.2e}), eta - 1 "
                                    f"{r['eta'] - 1:+.2e}, delta gap {r['delta'] - lim.delta:+.2e}, eps gap "
                                    f"{r['eps'] - lim.eps:+.2e}, train {r['train_loss']:.2e}, prox residual "
                                    f"{r['prox_residual']:.1e}, {r['channel_evaluations']} evaluations")
    # above alpha_interp: q and E grow as lambda falls, towards the lambda = 0 fixed point (reached below 1e-5)
    rows = state_evolution_curve(law, channel, [0.2], 0.1, 1.0, 2, 0.5, tol=1e-8)
    for lam in (0.03, 0.01, 3e-3, 1e-3, 3e-4, 1e-4):
        prev = rows[-1]
        init = (prev["Sigma"] * prev["lam"] / lam, prev["m"], prev["q"]) if prev["converged"] else None
        try:
            p, _ = solve_continued(law, channel, 0.2, lam, 1.0, inits=[init], tol=1e-8)
            rows.append({**p.row(), "converged": True})
        except Exception as e:  # noqa: BLE001 - reported, the table goes on
            rows.append({"lam": lam, "converged": False, "reason": str(e)})
    for r in rows:
        out[f"alpha = 0.2 > alpha_interp, lambda = {r['lam']:g}"] = (
            f"q {r['q']:.4f}, E {r['estimation_error']:.4f}, test {r['test_error']:.4f}, train {r['train_loss']:.2e}, "
            f"eta {r['eta']:.4f}" if r["converged"] else f"FAILED: {r.get('reason', '')[:200]}")
    return out


SLICE = [  # (experiment, the point's overrides): the paper grid's L-BFGS points of the slice
    *[("tied_error_vs_alpha", [f"task.alpha={a}", f"model.lam={lam}", "task.Delta=0.5", "train=lbfgs_fullbatch",
                               "train.tol=0", "train.tol_grad=2e-5"])
      for a in (0.15, 0.2) for lam in (0.001, 0.01, 0.1, 0.3)],
    *[("tied_interpolation_peak", ["task.alpha=0.16", f"model.lam={lam}", "train=lbfgs_fullbatch"])
      for lam in (0.0001, 0.001, 0.01, 0.03, 0.1, 0.3)],
]


def _mixed(point: list[str]) -> list[str]:
    """The point under train=lbfgs_mixed_precision (float32 first) instead of lbfgs_fullbatch."""
    return [o for o in point if o != "train=lbfgs_fullbatch"] + ["train=lbfgs_mixed_precision"]


SLICE_PROTOCOLS = (  # (name, the protocol's settings of lit.replica and the problem, overrides of the point)
    ("float64, every seed evaluated, autograd", {"narrowing": False, "step_gradient_test": False,
                                                 "gradient_by_hand": False}, lambda point: point),
    ("float64", {"narrowing": True, "step_gradient_test": True, "gradient_by_hand": True}, lambda point: point),
    ("float32 -> float64", {"narrowing": True, "step_gradient_test": True, "gradient_by_hand": True}, _mixed),
    ("float32 -> float64, autograd", {"narrowing": True, "step_gradient_test": True, "gradient_by_hand": False},
     _mixed),
)


def _slice_points(experiments=(), lambdas=()) -> list[tuple[str, list[str]]]:
    """The SLICE points of `experiments` at `lambdas` (each default: all)."""
    return [(e, point) for e, point in SLICE if (not experiments or e in experiments)
            and (not lambdas or any(f"model.lam={lam}" in point for lam in lambdas))]


def case_tied_slice(d: int = 200, n_seeds: int = 2, experiments: tuple[str, ...] = (), lambdas: tuple[str, ...] = (),
                    protocols: tuple[int, ...] = (0, 1, 2)) -> dict:
    """The slice's jobs (those of `experiments` and `lambdas`, default all) under each of `protocols` (indices into
    SLICE_PROTOCOLS, the first the one the others are compared with), alternating job by job (one thread:
    seconds are core-seconds). Protocol 0 is the one before lit.compaction, the per-iteration gradient test and
    the gradient by hand: a seed that stopped is still evaluated until the job ends, an L-BFGS step runs all its
    iterations, and autograd takes the gradient."""
    import torch

    from attnrepro.lit.replica import ReplicaModule
    from attnrepro.papers.tied_attention.problem import TiedAttentionProblem

    torch.set_num_threads(1)
    chosen = [SLICE_PROTOCOLS[i] for i in protocols]
    rows = []
    for experiment, point in _slice_points(experiments, lambdas):
        for protocol, settings, overrides in chosen:
            for name, value in settings.items():
                setattr(TiedAttentionProblem if name == "gradient_by_hand" else ReplicaModule, name, value)
            cpu = time.process_time()
            _, _, rec = pipeline_job([f"experiment={experiment}", f"task.d={d}", f"n_seeds={n_seeds}",
                                      *overrides(point)])
            job_s = time.process_time() - cpu  # CPU seconds: core-seconds on one thread, on a busy machine too
            fitted, t = rec["fit"], rec["timings"]
            rows.append({"protocol": protocol, "point": f"{experiment} {' '.join(point[:2])}", "s": job_s,
                         "steps": t["steps"], "coarse_steps": t.get("coarse_steps", 0),
                         "grad_rel": max(fitted["grad_rel"]), "converged": sum(fitted["converged"]),
                         "test_error": rec["metrics"]["test_error"]})
            print(f"[tied_slice] {protocol:30s} {rows[-1]['point']}: {job_s:.1f} s, {t['steps']} steps, "
                  f"{rows[-1]['converged']} of {n_seeds} converged, test {rows[-1]['test_error']}",
                  file=sys.stderr, flush=True)
    ReplicaModule.narrowing = ReplicaModule.step_gradient_test = TiedAttentionProblem.gradient_by_hand = True
    jobs = len(rows) // len(chosen)
    out = {"case": f"paper-profile slice, d={d}, {n_seeds} seeds, {jobs} L-BFGS jobs per protocol, 1 thread"}
    by = {name: [r for r in rows if r["protocol"] == name] for name, *_ in chosen}
    for protocol, mine in by.items():
        out[f"{protocol}: core-seconds"] = sum(r["s"] for r in mine)
        out[f"{protocol}: steps (coarse)"] = f"{sum(r['steps'] for r in mine)} ({sum(r['coarse_steps'] for r in mine)})"
        out[f"{protocol}: worst grad_rel"] = max(r["grad_rel"] for r in mine)
        out[f"{protocol}: seeds converged"] = f"{sum(r['converged'] for r in mine)} of {n_seeds * len(mine)}"
    (old, old_rows), *new = by.items()
    for protocol, mine in new:
        out[f"speed-up of {protocol}"] = out[f"{old}: core-seconds"] / out[f"{protocol}: core-seconds"]
        gaps = [abs(b - a) / abs(a) for o, n in zip(old_rows, mine) for a, b in zip(o["test_error"], n["test_error"])]
        out[f"{protocol}: test error, largest relative gap"] = max(gaps)
        out[f"{protocol}: test error, median relative gap"] = statistics.median(gaps)
    out["per point (s, each protocol)"] = "; ".join(
        r[0]["point"] + ": " + "/".join(f"{x['s']:.1f}" for x in r) for r in zip(*by.values()))
    return out


def case_tied_warm_starts(d: int = 100, n_seeds: int = 2) -> dict:
    """Cold starts against warm starts along a path (each point from the previous point's answer): the
    lambda path at alpha = 0.16, descending, and the alpha path at lambda = 1e-4, ascending. L_0 is each
    point's cold-init objective in both, so that tol_grad means the same."""
    from types import SimpleNamespace

    import torch

    from attnrepro.config import validate
    from attnrepro.jobs.fit import _quiet_lightning, fit_replicas
    from attnrepro.jobs.grid import compose
    from attnrepro.papers.tied_attention.problem import build
    from attnrepro.seeding import replica_generators

    torch.set_num_threads(1)
    _quiet_lightning()
    cpu = SimpleNamespace(accelerator="cpu", devices=1)
    paths = {"lambda path (alpha = 0.16)": [["task.alpha=0.16", f"model.lam={lam}"]
                                            for lam in (0.3, 0.1, 0.03, 0.01, 0.001, 0.0001)],
             "alpha path (lambda = 1e-4)": [[f"task.alpha={a}", "model.lam=0.0001"] for a in (0.12, 0.14, 0.16, 0.18)]}
    out = {"case": f"warm starts, tied_interpolation_peak, d={d}, {n_seeds} seeds, float64 L-BFGS to 2e-5"}
    for name, points in paths.items():
        seconds, gaps, previous = {"cold": 0.0, "warm": 0.0}, [], None
        for point in points:
            obj = validate(compose(["experiment=tied_interpolation_peak", "train=lbfgs_fullbatch", f"task.d={d}",
                                    f"n_seeds={n_seeds}", *point]))
            answers = {}
            for start in ("cold", "warm") if previous is not None else ("cold",):
                problem, _ = build(obj.task, obj.model, obj.train, replica_generators(obj.seed, n_seeds))
                L0 = problem.accumulate(None)
                if start == "warm":
                    with torch.no_grad():
                        for p, q in zip(problem.parameters(), previous, strict=True):
                            p.copy_(q)
                t = time.process_time()
                module = fit_replicas(problem, obj.train, obj.train.lr, 0.0, 2e-5, cpu, L0)
                steps, stop = module.global_step, module.stop
                seconds[start] += time.process_time() - t
                m = problem.evaluate()
                answers[start] = ([p.detach().clone() for p in problem.parameters()], m["test_error"].tolist())
                out[f"{name} {' '.join(point)}, {start}: steps, test errors, objectives"] = (
                    f"{steps}, {[round(v, 5) for v in m['test_error'].tolist()]}, "
                    f"{[round(v, 6) for v in m['objective'].tolist()]}, {stop}")
            if "warm" in answers:
                gaps += [abs(w - c) / c for c, w in zip(answers["cold"][1], answers["warm"][1])]
            previous = answers["warm" if "warm" in answers else "cold"][0]
        out[f"{name}: core-seconds cold, warm"] = (f"{seconds['cold']:.1f}, {seconds['warm']:.1f} "
                                                   "(the first point is cold in both)")
        out[f"{name}: largest relative test-error gap, warm against cold"] = max(gaps)
    return out


def case_exact_fit(d: int = 50, alphas: tuple[float, ...] = (0.14, 0.15, 0.16, 0.17, 0.2)) -> dict:
    """tied_interpolation_threshold's exact-fit jobs at d, Delta in {0.5, 1} and `alphas` (8 seeds, the quick and
    paper profiles' seeds and max_iter), each through the pipeline with and without face_polish (Newton at the
    iterate's rank) side by side, one thread: core-seconds, iterations, and whether verdicts and certified minima
    agree."""
    import torch

    from attnrepro.papers.tied_attention import exact_fit

    torch.set_num_threads(1)
    rows = []
    for Delta in (0.5, 1.0):
        for alpha in alphas:
            point = [f"task.d={d}", f"task.Delta={Delta}", f"task.alpha={alpha}", "n_seeds=8"]
            by = {}
            for polish in (False, True):
                exact_fit.POLISH = polish
                cpu = time.process_time()
                _, _, rec = pipeline_job(["experiment=tied_interpolation_threshold", *point])
                by[polish] = (time.process_time() - cpu, rec)
            (s0, a), (s1, b) = by[False], by[True]
            closed = [(x <= 1e-6, y <= 1e-6) for x, y in zip(a["metrics"]["gap"], b["metrics"]["gap"])]
            both = [i for i, (x, y) in enumerate(closed) if x and y and a["fit"]["status"][i] == "no_fit"]
            rel = max([abs(b["metrics"]["loss_per_sample"][i] / a["metrics"]["loss_per_sample"][i] - 1) for i in both],
                      default=0.0)
            rows.append({"point": " ".join(point[1:3]), "s": (s0, s1), "same verdicts": a["fit"] == b["fit"],
                         "certified": (sum(x for x, _ in closed), sum(y for _, y in closed)), "rel": rel,
                         "iterations": (max(a["metrics"]["iterations"]), max(b["metrics"]["iterations"]))})
            print(f"[exact_fit] {rows[-1]}", file=sys.stderr, flush=True)
    exact_fit.POLISH = True
    out = {"case": f"exact-fit test, d={d}, 8 seeds, {len(rows)} jobs, FISTA alone against FISTA + face_polish, "
                   "1 thread"}
    out["core-seconds, FISTA alone"] = sum(r["s"][0] for r in rows)
    out["core-seconds, with face_polish"] = sum(r["s"][1] for r in rows)
    out["speed-up"] = out["core-seconds, FISTA alone"] / out["core-seconds, with face_polish"]
    out["jobs with the same verdicts"] = f"{sum(r['same verdicts'] for r in rows)} of {len(rows)}"
    out["no-fit minima certified to gap 1e-6"] = (f"{sum(r['certified'][0] for r in rows)} -> "
                                                  f"{sum(r['certified'][1] for r in rows)}")
    out["largest relative change of a minimum certified by both"] = max(r["rel"] for r in rows)
    out["per point (s; most iterations)"] = "; ".join(
        f"{r['point']}: {r['s'][0]:.1f}/{r['s'][1]:.1f} s; {r['iterations'][0]:.0f}/{r['iterations'][1]:.0f}"
        for r in rows)
    return out


CASES = {"xor_one_step": case_xor_one_step, "tied_factorized": case_tied_factorized, "tied_authors": case_tied_authors,
         "tied_gradient": case_tied_gradient,
         "theory_mmse": case_theory_mmse, "theory_J": case_theory_J, "theory_se": case_theory_se,
         "channel_accuracy": case_channel_accuracy, "theory_limit": case_theory_limit,
         "tied_slice": case_tied_slice, "tied_warm_starts": case_tied_warm_starts, "exact_fit": case_exact_fit}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=sorted(CASES), help="run one case in this process (internal)")
    ap.add_argument("--only", nargs="*", choices=sorted(CASES), help="cases to run (default: all)")
    ap.add_argument("--slice-d", type=int, default=200, help="tied_slice's d (default 200, the paper's)")
    ap.add_argument("--slice-seeds", type=int, default=2, help="tied_slice's seeds per job (default 2; the paper's: 8)")
    ap.add_argument("--slice-experiments", nargs="*", default=[], choices=sorted({e for e, _ in SLICE}),
                    help="tied_slice's jobs of these experiments only (default: all)")
    lams = sorted({o.split("=")[1] for _, point in SLICE for o in point if o.startswith("model.lam=")}, key=float)
    ap.add_argument("--slice-lambdas", nargs="*", default=[], choices=lams,
                    help="tied_slice's jobs at these lambda only (default: all)")
    ap.add_argument("--slice-protocols", nargs="*", type=int, default=[0, 1, 2],
                    choices=range(len(SLICE_PROTOCOLS)), help="tied_slice's protocols, by number (default: 0 1 2)")
    args = ap.parse_args()
    if len(set(args.slice_protocols)) < 2 or len(set(args.slice_protocols)) < len(args.slice_protocols):
        ap.error("--slice-protocols needs two or more different protocols: the first is the one the others are "
                 "compared with")
    if not _slice_points(args.slice_experiments, args.slice_lambdas):
        ap.error(f"no tied_slice point of {args.slice_experiments} at lambda in {args.slice_lambdas}")
    slice_args = ["--slice-d", str(args.slice_d), "--slice-seeds", str(args.slice_seeds),
                  "--slice-experiments", *args.slice_experiments, "--slice-lambdas", *args.slice_lambdas,
                  "--slice-protocols", *map(str, args.slice_protocols)]
    if args.case:
        kw = dict(d=args.slice_d, n_seeds=args.slice_seeds, experiments=tuple(args.slice_experiments),
                  lambdas=tuple(args.slice_lambdas), protocols=tuple(args.slice_protocols))
        print(json.dumps(CASES[args.case](**(kw if args.case == "tied_slice" else {}))))
        return 0
    results = []
    for name in args.only or CASES:
        print(f"[bench] {name} ...", flush=True)
        out = subprocess.run([sys.executable, __file__, "--case", name, *slice_args], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
        if out.returncode != 0:
            return out.returncode
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    for r in results:
        print(f"\n{r['case']}")
        for k, v in r.items():
            if k != "case":
                print(f"  {k:28s} {v:.4g}" if isinstance(v, float) else f"  {k:28s} {v}")
    dest = Path(os.environ.get("ATTNREPRO_OUTPUTS", ROOT / "outputs")) / "bench" / "bench.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps({"machine": f"{os.cpu_count()} cores", "results": results}, indent=1))
    print(f"\nwritten {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
