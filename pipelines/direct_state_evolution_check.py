"""Paper B's direct student (S symmetric, penalty (lambda/2) sqrt(p d) ||S||_F^2) in theory: its state
evolution against simulations, and both students at their optimal lambda (docs/state_evolution.md, "The
direct student").

Three subcommands; every number of the report comes from one of them.

    # simulations: the direct model trained to its minimiser by float64 L-BFGS, one JSON line per run
    OMP_NUM_THREADS=1 python pipelines/direct_state_evolution_check.py simulate --d 100 --seeds 0 1 \
        --out outputs/direct_se/sim_d100.jsonl
    OMP_NUM_THREADS=1 python pipelines/direct_state_evolution_check.py simulate --d 200 --seeds 0 \
        --out outputs/direct_se/sim_d200.jsonl

    # the state evolution at every (alpha, lambda) of those runs, and the relative deviations
    OMP_NUM_THREADS=1 python pipelines/direct_state_evolution_check.py compare --own-law \
        outputs/direct_se/sim_d100.jsonl outputs/direct_se/sim_d200.jsonl

    # both students at their optimal lambda (the state evolution's test error minimised over log lambda)
    OMP_NUM_THREADS=1 python pipelines/direct_state_evolution_check.py optimal --out outputs/direct_se/optimal.jsonl

Parameters: tied_factorized_vs_direct's (conf/experiment/tied_factorized_vs_direct.yaml, the model configs):
Wishart target kappa0 = 0.5, T = 2, Delta = 0.5, beta = beta0 = 1, seq2lab, student kappa = 0.5 (for the direct
model kappa enters only through lambda~ = sqrt(kappa) lambda).

The simulation (`simulate_direct`) uses the project's own problem classes (papers.tied_attention: the target,
the samples, DirectTiedAttention and TiedAttentionProblem's objective and metrics), draws per seed, in order, S0,
the student's init A(0) (symmetric, N(0, 1)), the noiseless test set and the training set (so a seed keeps
its target, init and test set across alpha and lambda), and minimises the objective sum_mu 1/2 ||A_hat - y||^2
+ (lambda/2) sqrt(p d) ||S||_F^2 by torch's L-BFGS (float64, strong Wolfe, history 20) until the relative
gradient ||grad L|| ||A|| / |L(A(0))| is <= tol_grad (the project's criterion; 2e-5 in its experiments, 1e-6
here).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ALPHAS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4)
LAMS = (0.001, 0.01, 0.1, 0.3, 1.0)
PARAMS = dict(kappa=0.5, kappa0=0.5, T=2, Delta=0.5)


def simulate_direct(d: int, alpha: float, lam: float, seed: int, *, kappa: float = 0.5, kappa0: float = 0.5,
                    T: int = 2, Delta: float = 0.5, n_test: int = 20000, tol_grad: float = 1e-6,
                    max_evals: int = 6000) -> dict:
    """One direct student trained to its minimiser (module docstring); returns its metrics (train_loss,
    test_error, estimation_error, q, m, Q0 of its own S0), converged (relative gradient <= tol_grad) and the
    number of objective evaluations."""
    import torch

    from attnrepro.papers.tied_attention import task as AI
    from attnrepro.papers.tied_attention.model import DirectTiedAttention
    from attnrepro.papers.tied_attention.problem import SampleSet, TiedAttentionProblem

    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(seed)
    p = round(kappa * d)
    S0 = AI.draw_target(g, d, "wishart", kappa0)[None]
    model = DirectTiedAttention.draw([g], d, p, 1.0, lam, "seq2lab")
    test = SampleSet.draw([g], S0, n_test, T, 0.0, 1.0)
    train = SampleSet.draw([g], S0, round(alpha * d * d), T, Delta, 1.0)
    val = SampleSet(train.X[:, :0], train.A[:, :0])
    problem = TiedAttentionProblem(model, S0, train, val, test, chunk=1 << 30, n_top=round(kappa0 * d))
    opt = torch.optim.LBFGS([model.A], lr=1.0, max_iter=25, history_size=20, line_search_fn="strong_wolfe",
                            tolerance_grad=0.0, tolerance_change=0.0)
    evals = 0

    def closure():
        nonlocal evals
        evals += 1
        opt.zero_grad()
        return problem.accumulate(lambda t: t.backward()).sum()

    L0 = float(closure())
    rel, reason = math.inf, ""
    while evals < max_evals:
        before = model.A.detach().clone()
        opt.step(closure)
        closure()  # the gradient at the new point
        rel = float(model.A.grad.norm() * model.A.detach().norm()) / abs(L0)
        if rel <= tol_grad:
            break
        if torch.equal(before, model.A.detach()):
            reason = f"stalled at relative gradient {rel:.2e}"
            break
    else:
        reason = f"{max_evals} evaluations, relative gradient {rel:.2e}"
    with torch.no_grad():
        ev = {k: float(v[0]) for k, v in problem.evaluate().items()
              if k in ("train_loss", "test_error", "estimation_error", "q", "m")}
        Q0 = float((S0**2).sum() / d)
    return dict(d=d, alpha=alpha, lam=lam, seed=seed, kappa=kappa, kappa0=kappa0, T=T, Delta=Delta, **ev, Q0=Q0,
                rel_grad=rel, converged=rel <= tol_grad, reason=reason, evaluations=evals,
                seconds=time.perf_counter() - t0)


def _simulate(args) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["d"], r["alpha"], r["lam"], r["seed"]))
    with args.out.open("a") as f:
        for seed in args.seeds:
            for lam in args.lams:
                for alpha in args.alphas:
                    if (args.d, alpha, lam, seed) in done:
                        continue
                    row = simulate_direct(args.d, alpha, lam, seed, n_test=args.n_test, tol_grad=args.tol_grad,
                                          **PARAMS)
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    print(f"d = {args.d}, alpha = {alpha:g}, lambda = {lam:g}, seed {seed}: "
                          f"test {row['test_error']:.5f}, train {row['train_loss']:.5g}, "
                          f"rel. grad {row['rel_grad']:.1e}, {row['evaluations']} evals, {row['seconds']:.0f} s",
                          flush=True)


def _seed_law(d: int, seed: int, kappa0: float):
    """The empirical spectral law of seed's S0 at dimension d (simulate_direct's first draw)."""
    import torch

    from attnrepro.papers.tied_attention import task as AI
    from attnrepro.theory.spectral_laws import Atomic

    S0 = AI.draw_target(torch.Generator().manual_seed(seed), d, "wishart", kappa0)
    return Atomic(tuple(torch.linalg.eigvalsh(S0).tolist()))


def _theory(alphas, lams, points: int, law=None) -> dict[tuple[float, float], dict]:
    from attnrepro.theory.direct_state_evolution import direct_state_evolution

    out = {}
    for lam in lams:
        for r in direct_state_evolution(sorted(alphas), lam, points=points, law=law, **PARAMS):
            out[(r["alpha"], lam)] = r
    return out


def _compare(args) -> None:
    """Per d: the simulations' mean over seeds against the state evolution at the d -> infinity law (the claim),
    and, as a diagnostic, each seed against the state evolution at its own S0's spectrum (the direct student's
    state evolution sees mu0 only through Q0 = ||S0||_F^2/d, which fluctuates from seed to seed by several %)."""
    sims = [json.loads(line) for path in args.files for line in Path(path).read_text().splitlines()]
    keys = sorted({(r["alpha"], r["lam"]) for r in sims})
    alphas, lams = sorted({a for a, _ in keys}), sorted({lam for _, lam in keys})
    theory = _theory(alphas, lams, args.points)
    own = {}
    if args.own_law:
        for d, seed in sorted({(r["d"], r["seed"]) for r in sims}):
            own[(d, seed)] = _theory(alphas, lams, args.points, law=_seed_law(d, seed, PARAMS["kappa0"]))
    for d in sorted({r["d"] for r in sims}):
        seeds = sorted({r["seed"] for r in sims if r["d"] == d})
        Q0s = {r["seed"]: r["Q0"] for r in sims if r["d"] == d}
        print(f"\nd = {d}, seeds {seeds} (their Q0: {', '.join(f'{Q0s[s]:.4f}' for s in seeds)}; the law's 1.5)")
        print("| alpha | lambda | seeds | test error: sim | theory | rel. dev. | own S0 | train loss: sim | theory | "
              "rel. dev. | own S0 |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        devs = {"test_error": [], "train_loss": []}
        devs_own = {"test_error": [], "train_loss": []}
        for alpha, lam in keys:
            runs = [r for r in sims if r["d"] == d and r["alpha"] == alpha and r["lam"] == lam]
            bad = [r for r in runs if not r["converged"]]
            runs = [r for r in runs if r["converged"]]
            th = theory[(alpha, lam)]
            if not runs or not th["converged"]:
                print(f"| {alpha:g} | {lam:g} | {len(runs)} (+{len(bad)} not converged) | theory: {th['reason']} |")
                continue
            cells = []
            for k in ("test_error", "train_loss"):
                s = statistics.fmean(r[k] for r in runs)
                dev = s / th[k] - 1
                devs[k].append((abs(dev), alpha, lam))
                cells += [f"{s:.5g}", f"{th[k]:.5g}", f"{100 * dev:+.1f}%"]
                if own:
                    dev_own = statistics.fmean(r[k] / own[(d, r["seed"])][(alpha, lam)][k] - 1 for r in runs)
                    devs_own[k].append((abs(dev_own), alpha, lam))
                    cells.append(f"{100 * dev_own:+.1f}%")
                else:
                    cells.append("")
            print(f"| {alpha:g} | {lam:g} | {len(runs)}" + (f" (+{len(bad)} not converged)" if bad else "")
                  + " | " + " | ".join(cells) + " |")
        for name, table in (("the d -> infinity law", devs), ("each seed's own S0", devs_own)):
            for k, v in table.items():
                if v:
                    worst = max(v)
                    median = 100 * statistics.median(x for x, _, _ in v)
                    print(f"against {name}: {k}: median |rel. dev.| {median:.2f}%, largest {100 * worst[0]:.2f}% "
                          f"(alpha = {worst[1]:g}, lambda = {worst[2]:g}), over {len(v)} points")


def _optimal(args) -> None:
    from attnrepro.theory.direct_state_evolution import optimal_lambda_curve

    rows = {}
    if args.load:  # rows of an earlier run (the direct curve: kappa only rescales it, lambda~ = sqrt(kappa) lambda)
        for line in args.load.read_text().splitlines():
            r = json.loads(line)
            rows.setdefault(r["model"], []).append(r)
    for model in args.models:
        rows[model] = optimal_lambda_curve(model, args.alphas, points=args.points, kappa=args.kappa,
                                           kappa0=PARAMS["kappa0"], T=PARAMS["T"], Delta=PARAMS["Delta"],
                                           log=lambda s: print(s, flush=True) if args.verbose else None)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w") as f:
            for model, rs in rows.items():
                for r in rs:
                    f.write(json.dumps({"model": model, **r}) + "\n")
    print(f"\nkappa = {args.kappa}, kappa0 = {PARAMS['kappa0']}, T = {PARAMS['T']}, Delta = {PARAMS['Delta']}, "
          f"Sobol' 2^{args.points}")
    print("| alpha | factorized lambda* | test error | rank at lambda* | direct lambda* | test error "
          "| direct/factorized |")
    print("|---|---|---|---|---|---|---|")
    nan = float("nan")
    by_alpha = {m: {r["alpha"]: r for r in rs} for m, rs in rows.items()}
    missing = {"alpha": nan, "converged": False, "reason": "not computed", "test_error": nan}

    def cell(r):
        if not r["converged"]:
            return f"FAILED ({r['reason'][:80]})", ""
        note = " (at a bound)" if r["at_bound"] else " (validity edge)" if r.get("validity_bound") else ""
        return f"{r['lam_star']:.4g}{note}", f"{r['test_error']:.5f}"

    for alpha in sorted({a for rs in by_alpha.values() for a in rs}):
        f = by_alpha.get("factorized", {}).get(alpha, missing)
        dr = by_alpha.get("direct", {}).get(alpha, missing)
        (fl, fe), (dl, de) = cell(f), cell(dr)
        ratio = dr["test_error"] / f["test_error"] if f["converged"] and dr["converged"] else nan
        print(f"| {alpha:g} | {fl} | {fe} | {f.get('rank', nan):.3f} | {dl} | {de} | {ratio:.3f} |")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("simulate")
    s.add_argument("--d", type=int, required=True)
    s.add_argument("--seeds", type=int, nargs="+", default=[0])
    s.add_argument("--alphas", type=float, nargs="+", default=list(ALPHAS))
    s.add_argument("--lams", type=float, nargs="+", default=list(LAMS))
    s.add_argument("--n-test", type=int, default=20000)
    s.add_argument("--tol-grad", type=float, default=1e-6)
    s.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare")
    c.add_argument("files", nargs="+")
    c.add_argument("--points", type=int, default=14, help="log2 of the Sobol' rule's size")
    c.add_argument("--own-law", action="store_true", help="also each seed against the theory at its own S0")
    o = sub.add_parser("optimal")
    o.add_argument("--alphas", type=float, nargs="+",
                   default=[0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6])
    o.add_argument("--kappa", type=float, default=PARAMS["kappa"])
    o.add_argument("--points", type=int, default=12)
    o.add_argument("--models", nargs="*", default=["factorized", "direct"], choices=["factorized", "direct"])
    o.add_argument("--load", type=Path, default=None, help="JSON lines of an earlier `optimal` run to table with these")
    o.add_argument("--verbose", action="store_true")
    o.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    {"simulate": _simulate, "compare": _compare, "optimal": _optimal}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
