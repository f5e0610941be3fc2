"""Every figure from one command: run each experiment's sweep, its theory curves, aggregate, render.

    python pipelines/reproduce.py --profile quick            # what `make reproduce-figures` runs
    python pipelines/reproduce.py --profile smoke --only xor_phase_dm

Each sweep is `pipelines/train.py -m experiment=<name> profile=<profile>`, then
`pipelines/theory.py` computes the theory curves of the experiments that have them;
jobs and curves whose record is complete are skipped, so a second run computes nothing.
Extra arguments after `--` go to every sweep (e.g. `-- trainer.accelerator=cpu`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnrepro.jobs.grid import experiments  # noqa: E402


def run(cmd: list[str]) -> int:
    return subprocess.call([sys.executable, *cmd], cwd=ROOT)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=os.environ.get("PROFILE", "quick"), choices=["smoke", "quick", "paper"])
    ap.add_argument("--only", default="", help="comma-separated experiments (default: all)")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every sweep")
    args = ap.parse_args()

    names = [n for n in args.only.split(",") if n] or experiments()
    unknown = sorted(set(names) - set(experiments()))
    if unknown:
        ap.error(f"unknown experiments {unknown}; known: {experiments()}")
    start = time.perf_counter()
    failed_sweeps = []
    for i, name in enumerate(names, 1):
        t = time.perf_counter()
        print(f"\n=== [{i}/{len(names)}] sweep {name} (profile {args.profile}) ===", flush=True)
        rc = run(["pipelines/train.py", "-m", f"experiment={name}", f"profile={args.profile}", *args.overrides])
        print(f"=== [{i}/{len(names)}] {name}: {'done' if rc == 0 else f'exit {rc}'} in "
              f"{time.perf_counter() - t:.1f}s (total {time.perf_counter() - start:.1f}s) ===", flush=True)
        if rc != 0:
            failed_sweeps.append(name)
    from attnrepro.jobs.theory import theory_experiments

    with_theory = [n for n in names if n in theory_experiments()]
    rc_theory = 0
    if with_theory:
        print(f"\n=== theory curves ({', '.join(with_theory)}) ===", flush=True)
        rc_theory = run(["pipelines/theory.py", f"profile={args.profile}", f"experiments=[{','.join(with_theory)}]"])
    figures = []
    if args.only:  # the figures whose every source was swept
        from attnrepro.report.figure_spec import specs

        figures = ["--figures", *(s.name for s in specs() if set(s.sources) <= set(names))]
    print("\n=== aggregate ===", flush=True)
    rc_agg = run(["pipelines/aggregate.py", "--profile", args.profile, *figures])
    print("\n=== figures and report ===", flush=True)
    rc_fig = run(["pipelines/figures.py", "--profile", args.profile, *figures])
    print(f"\nreproduce-figures finished in {time.perf_counter() - start:.1f}s")
    if failed_sweeps:
        print(f"sweeps that did not finish: {failed_sweeps} (their recorded jobs are in the report)")
    if rc_theory:
        print("some theory curves failed: their reasons are in outputs/theory/ and the report")
    return 1 if (failed_sweeps or rc_theory or rc_agg or rc_fig) else 0


if __name__ == "__main__":
    sys.exit(main())
