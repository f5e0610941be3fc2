"""Paper B's lambda -> 0+ curve above alpha_interp, against the lambda path (docs/state_evolution.md,
"Above alpha_interp").

For each scrambling seed of the Sobol' rule: the lambda -> 0+ curve (erm_state_evolution(alphas, lam=0):
the closed form below alpha_interp, the fixed point at lambda = 0 above it), and for the first seed the
lambda > 0 curves at --lams (each an independent sweep in alpha, no start from the lambda = 0 answer) with
the extrapolation lambda -> 0 from the two smallest (linear in lambda: f(0) ~ f(l2) + (f(l2) - f(l1)) l2/(l1 - l2)).
Prints one table per quantity and writes every row as JSON lines to --out.

    OMP_NUM_THREADS=1 python pipelines/ridgeless_above_threshold.py --points 16 --seeds 0 1 2 3 \
        --out outputs/ridgeless/p16.jsonl

The parameters are the issue's: kappa = 1, kappa0 = 0.5, T = 2, Delta = 0.5 (Wishart target, beta = beta0 = 1).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

from attnrepro.theory.erm_curve import erm_state_evolution
from attnrepro.theory.interpolation import interpolation_threshold
from attnrepro.theory.spectral_laws import MarchenkoPastur

ALPHAS = (0.1, 0.15, 0.1535, 0.154, 0.155, 0.16, 0.17, 0.18, 0.2, 0.22, 0.25, 0.3, 0.35, 0.4, 0.5)
KEYS = ("test_error", "train_loss", "q", "m", "estimation_error", "Sigma", "delta", "eta", "rank")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--alphas", type=float, nargs="+", default=list(ALPHAS))
    ap.add_argument("--points", type=int, default=16, help="log2 of the Sobol' rule's size")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3], help="the rule's scrambling seeds")
    ap.add_argument("--lams", type=float, nargs="*", default=[1e-4, 1e-5, 1e-6],
                    help="the lambda path, at the first seed (empty: none)")
    ap.add_argument("--path-alphas", type=float, nargs="*", default=None,
                    help="the alphas of the lambda path (default: those >= 0.16; closer to alpha_interp lambda = 1e-6 "
                         "is far from the limit and its solves are slow)")
    ap.add_argument("--kappa", type=float, default=1.0)
    ap.add_argument("--kappa0", type=float, default=0.5)
    ap.add_argument("--Delta", type=float, default=0.5)
    ap.add_argument("--T", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="JSON lines, one per row")
    args = ap.parse_args()

    thr = interpolation_threshold(MarchenkoPastur(args.kappa0), args.T, args.Delta)
    print(f"alpha_interp = {thr.alpha:.6f} (delta_bar = {thr.delta:.5f}, rank {thr.rank:.4f})", flush=True)
    common = dict(kappa=args.kappa, kappa0=args.kappa0, T=args.T, Delta=args.Delta, points=args.points)
    rows = []
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("")

    def keep(new):
        rows.extend(new)
        if args.out:  # as each curve is done
            with args.out.open("a") as f:
                f.write("".join(json.dumps(r, default=float) + "\n" for r in new))

    for seed in args.seeds:
        t0 = time.perf_counter()
        keep([{**r, "seed": seed} for r in erm_state_evolution(args.alphas, 0.0, seed=seed, **common)])
        print(f"lambda = 0, seed {seed}: {time.perf_counter() - t0:.0f}s", flush=True)
    path_alphas = args.path_alphas if args.path_alphas is not None else [a for a in args.alphas if a >= 0.16]
    for lam in args.lams:
        t0 = time.perf_counter()
        curve = erm_state_evolution(path_alphas, lam, seed=args.seeds[0], **common)
        keep([{**r, "seed": args.seeds[0]} for r in curve])
        print(f"lambda = {lam:g}, seed {args.seeds[0]}: {time.perf_counter() - t0:.0f}s", flush=True)

    def value(alpha, lam, seed, key):
        hit = [r for r in rows if r["alpha"] == alpha and r["lam"] == lam and r["seed"] == seed and r["converged"]]
        return hit[0][key] if hit else math.nan

    print(f"\nlambda -> 0+ at kappa = {args.kappa:g}, kappa0 = {args.kappa0:g}, T = {args.T}, Delta = {args.Delta:g}, "
          f"Sobol' 2^{args.points}, seeds {args.seeds}: mean [s.e. over seeds]; failures with their reasons below")
    print(f"{'alpha':>7} {'method':>19} " + " ".join(f"{k:>21}" for k in ("test_error", "train_loss", "q", "Sigma")))
    for a in sorted(set(args.alphas)):
        method = {r["method"] for r in rows if r["alpha"] == a and r["lam"] == 0}
        cells = []
        for k in ("test_error", "train_loss", "q", "Sigma"):
            vals = [v for s in args.seeds if not math.isnan(v := value(a, 0.0, s, k))]
            se = statistics.stdev(vals) / math.sqrt(len(vals)) if len(vals) > 1 else math.nan
            cells.append(f"{statistics.fmean(vals):.5g} [{se:.1e}]" if vals else "failed")
        print(f"{a:7.4f} {'/'.join(sorted(method)):>19} " + " ".join(f"{c:>21}" for c in cells))
    for r in rows:
        if not r["converged"]:
            print(f"  FAILED alpha = {r['alpha']:g}, lambda = {r['lam']:g}, seed {r['seed']}: {r['reason']}")

    if args.lams:
        s, lams = args.seeds[0], sorted(args.lams, reverse=True)
        print(f"\nthe lambda path at seed {s} (same rule): value at each lambda, its lambda -> 0 extrapolation from "
              f"the two smallest, and the lambda = 0 row")
        for k in ("test_error", "q", "train_loss"):
            print(f"{k}:")
            print(f"{'alpha':>7} " + " ".join(f"{f'lambda={lam:g}':>12}" for lam in lams)
                  + f" {'extrap.':>12} {'lambda=0':>12} {'0 - extrap.':>12} {'0 - 1e-5':>12}")
            for a in sorted(x for x in set(args.alphas) if x > thr.alpha):
                path = [value(a, lam, s, k) for lam in lams]
                zero = value(a, 0.0, s, k)
                l1, l2 = lams[-2:] if len(lams) > 1 else (math.nan, math.nan)
                extra = path[-1] + (path[-1] - path[-2]) * l2 / (l1 - l2) if len(lams) > 1 else math.nan
                gap5 = zero - value(a, 1e-5, s, k) if 1e-5 in lams else math.nan
                print(f"{a:7.4f} " + " ".join(f"{v:12.6g}" for v in path)
                      + f" {extra:12.6g} {zero:12.6g} {zero - extra:+12.2e} {gap5:+12.2e}")


if __name__ == "__main__":
    main()
