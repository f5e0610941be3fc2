"""`make gpu-check`: one prepared, time-boxed slice of the paper profile on one device; writes its
timings and claims to <outputs>/gpu_check/ (default outputs/gpu_check/).

    python pipelines/gpu_check.py [--size paper|small] [--budget-s 360] [--seeds 4]

The slice (--size paper, the default when CUDA is available): tied_error_vs_alpha at d = 400 and
tied_scaling_laws at d = 400 (their paper grids of lambda, Delta, gamma and alpha), xor_phase_dm's
paper grid (d up to 16384), all with trainer.accelerator=auto; --seeds seeds per job (the paper
profile has 8). --size small (the default without CUDA) is the same slice at d = 100 for paper B and
xor_phase_dm's quick grid (d up to 4096): the check's dry run on a CPU.

First a preflight: `attnrepro reproduce profile=smoke` (every experiment, tiny, on the device:
accelerator=auto) into <outputs>/smoke; if any of its jobs fails, the check stops there and prints the
failures' reasons, so that a device bug costs a minute of device time, not the whole slice
(--no-preflight skips it).

Each sweep gets a share of --budget-s and is stopped at its deadline; what finished is kept (the
records are those of the pipeline, so a rerun resumes). Then the paper-profile theory curves (the
rest of the budget), `aggregate all_records=true` and the figures of the slice (at least 3 minutes
each, past the budget if need be). Written: gpu_check.json (device, torch,
matmul precision, per sweep its wall time, jobs finished and seconds per job, the theory and
figure stages, the claims that hold) and the claims of the slice's figures (claims.csv).

Precision: fp32 matmuls run in full fp32 (no TF32), set by the job runner (jobs.training, with
jobs.environment.full_fp32_matmuls): the ridgeless recovery reaches estimation errors of 1e-8, below TF32's
~1e-3 relative rounding.
Needs only the package on PYTHONPATH (src/) with hydra-core and omegaconf; never the network. On a GPU
machine without a registry (the first run, 2026-12-04, BENCHMARKS.md): carry hydra-core 1.3.8, omegaconf
2.3.1 and antlr4-python3-runtime 4.9.3 as wheels (`pip download --no-deps --only-binary=:all:
--python-version 3.12 ...` for the first two, `pip wheel --no-deps antlr4-python3-runtime==4.9.3` for the
third), install them with `pip install --no-index --no-deps --target /tmp/site` and put /tmp/site on
PYTHONPATH. The default budget, 360 s, about 100 s of aggregate and figures and the preflight (48 s on 2
CPU cores; not yet timed on a GPU) fit one 10-minute command; --budget-s 270 leaves a margin.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLICE = ("tied_error_vs_alpha", "tied_scaling_laws", "xor_phase_dm")
FIGURES = ("tied_error_vs_alpha", "tied_bayes_gap", "tied_error_decomposition", "tied_scaling_laws", "xor_phase_dm")
SHARES = {"tied_error_vs_alpha": 0.45, "tied_scaling_laws": 0.3, "xor_phase_dm": 0.15}  # the rest: theory, figures


def sweeps(size: str, seeds: int) -> dict[str, list[str]]:
    """The overrides of each sweep of the slice (on top of profile=paper)."""
    d = 400 if size == "paper" else 100
    phase = [] if size == "paper" else ["task.d=64,256,1024,4096"]
    return {"tied_error_vs_alpha": [f"task.d={d}", f"n_seeds={seeds}"],
            "tied_scaling_laws": [f"task.d={d}", f"n_seeds={seeds}"],
            "xor_phase_dm": [*phase, f"n_seeds={max(seeds, 8)}"]}


def _env() -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _run(cmd: list[str], timeout: float, log) -> tuple[int | None, float]:
    """(exit status, or None when stopped at the deadline; wall seconds); output to log."""
    t = time.perf_counter()
    with open(log, "a") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=out, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
    return rc, time.perf_counter() - t


def _records(outputs: Path, experiment: str) -> list[dict]:
    out = []
    for path in sorted((outputs / "runs" / experiment).glob("*/record.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out


def preflight(py: list[str], outputs: Path, log: Path, report: dict, timeout: float = 240.0) -> bool:
    """`attnrepro reproduce profile=smoke` on the device; True when it exits 0. Its jobs' count, failures
    (with their reasons) and devices go into report['preflight']."""
    folder = outputs / "smoke"
    print(f"[gpu-check] preflight: reproduce profile=smoke into {folder} (at most {timeout:.0f}s) ...", flush=True)
    rc, wall = _run([*py, "reproduce", "profile=smoke", f"outputs={folder}"], timeout, log)
    records = [r for path in sorted((folder / "runs").glob("*")) for r in _records(folder, path.name)]
    failed = [r for r in records if r.get("status") == "failed"]
    report["preflight"] = {
        "exit": rc, "wall_s": wall, "jobs": len(records), "failed": len(failed),
        "devices": sorted({r.get("timings", {}).get("device", "?") for r in records if r.get("status") == "complete"}),
        "failures": [{"experiment": r.get("experiment"), "overrides": r.get("overrides"), "reason": r.get("reason"),
                      "traceback": r.get("traceback")} for r in failed[:5]]}
    print(f"[gpu-check]   {len(records)} jobs, {len(failed)} failed, exit {rc}, {wall:.0f}s", flush=True)
    for r in failed[:5]:
        print(f"[gpu-check]   failed {r.get('experiment')}: {r.get('reason')}", flush=True)
    return rc == 0


def main() -> int:
    import torch

    cuda = torch.cuda.is_available()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=("paper", "small"), default="paper" if cuda else "small")
    ap.add_argument("--budget-s", type=float, default=360.0,
                    help="wall-clock budget of the sweeps and theory (aggregate and figures come after)")
    ap.add_argument("--seeds", type=int, default=4, help="seeds per job of paper B's sweeps")
    ap.add_argument("--no-preflight", dest="preflight", action="store_false",
                    help="skip the smoke reproduction that runs first")
    ap.add_argument("--outputs", default=os.environ.get("ATTNREPRO_OUTPUTS", str(ROOT / "outputs")))
    args = ap.parse_args()
    outputs = Path(args.outputs) / "gpu_check" / args.size
    outputs.mkdir(parents=True, exist_ok=True)
    log = outputs / "log.txt"
    start = time.perf_counter()
    py = [sys.executable, "-m", "attnrepro"]
    device = torch.cuda.get_device_name(0) if cuda else f"cpu ({os.cpu_count()} cores)"
    print(f"[gpu-check] size {args.size} on {device}, budget {args.budget_s:.0f}s, outputs {outputs}, log {log}",
          flush=True)
    report: dict = {"size": args.size, "device": device, "torch": torch.__version__, "cuda": cuda,
                    "tf32": False, "seeds": args.seeds, "budget_s": args.budget_s, "sweeps": {}}
    if args.preflight and not preflight(py, outputs, log, report):
        (outputs / "gpu_check.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report["preflight"], indent=1))
        return 1
    budget_start = time.perf_counter()  # the budget is the slice's: the preflight is not in it
    for name, overrides in sweeps(args.size, args.seeds).items():
        budget = SHARES[name] * args.budget_s
        print(f"[gpu-check] sweep {name} {' '.join(overrides)} (at most {budget:.0f}s) ...", flush=True)
        rc, wall = _run([*py, "train", "-m", f"experiment={name}", "profile=paper", f"paths.outputs={outputs}",
                         "trainer.accelerator=auto", *overrides], budget, log)
        records = _records(outputs, name)
        done = [r for r in records if r.get("status") == "complete"]
        train_s = [r["timings"]["train_s"] for r in done if "train_s" in r.get("timings", {})]
        report["sweeps"][name] = {
            "overrides": overrides, "wall_s": wall, "stopped_at_deadline": rc is None, "exit": rc,
            "jobs_complete": len(done), "jobs_failed": sum(r.get("status") == "failed" for r in records),
            "train_s_per_job": sum(train_s) / len(train_s) if train_s else None,
            "devices": sorted({r["timings"].get("device", "?") for r in done})}
        print(f"[gpu-check]   {len(done)} jobs complete in {wall:.0f}s"
              + (" (stopped at its deadline; a rerun resumes)" if rc is None else ""), flush=True)
    left = args.budget_s - (time.perf_counter() - budget_start)
    workers = max(1, min(8, (os.cpu_count() or 2) - 1))
    stages = [("theory", [*py, "theory", "profile=paper", f"paths.outputs={outputs}", f"workers={workers}",
                          "experiments=[tied_error_vs_alpha]"]),
              ("aggregate", [*py, "aggregate", "profile=paper", f"outputs={outputs}", "all_records=true",
                             f"figures={','.join(FIGURES)}"]),
              ("figures", [*py, "figures", "profile=paper", f"outputs={outputs}", f"figures={','.join(FIGURES)}"])]
    for stage, cmd in stages:
        # aggregate and figures always get their few minutes: without them there are no claims
        budget = left * 0.6 if stage == "theory" else max(180.0, left * 0.2)
        print(f"[gpu-check] {stage} (at most {budget:.0f}s) ...", flush=True)
        rc, wall = _run(cmd, budget, log)
        report[stage] = {"wall_s": wall, "exit": rc, "stopped_at_deadline": rc is None}
    claims_file = outputs / "report" / "claims.csv"
    rows = []
    if claims_file.exists():
        with open(claims_file) as f:
            rows = [r for r in csv.DictReader(f) if r.get("figure") in FIGURES]
        with open(outputs / "claims.csv", "w", newline="") as f:
            if rows:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
    report["claims"] = {"total": len(rows), "hold": sum(r.get("holds") == "True" for r in rows),
                        "fail": [r["id"] for r in rows if r.get("holds") == "False"]}
    report["wall_s"] = time.perf_counter() - start
    (outputs / "gpu_check.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "claims"}, indent=1))
    print(f"[gpu-check] claims: {report['claims']['hold']} of {report['claims']['total']} hold; "
          f"written {outputs / 'gpu_check.json'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
