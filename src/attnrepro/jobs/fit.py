"""Train one job's problem with Lightning and collect what the record keeps."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import warnings

import torch

from attnrepro.papers import builder
from attnrepro.seeding import replica_generators


def _quiet_lightning() -> None:
    for name in ("pytorch_lightning", "lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    for pattern in (".*does not have many workers.*", ".*IterableDataset.*__len__.*", ".*LeafSpec.*is deprecated.*",
                    ".*The `srun` command is available.*"):
        warnings.filterwarnings("ignore", pattern)


COARSE_F_NOISE = 1e-6
"""The first (float32) stage's L-BFGS takes approximate Wolfe points with f known to 1e-6 |f| (Hager and
Zhang's default; float32 rounds a paper-B objective to about 5e-8 of itself, while its gradient is exact to
1e-6 of tol_grad's scale): without it the stage's line search stalled near a relative gradient of 1e-4."""


def train(cfg, trainer_cfg):
    """Build the job's problem (all seeds as replicas) and train it. cfg: validated object config.
    With train.coarse_dtype, L-BFGS runs first on the same problem in that dtype (built from the same
    generators: the data are drawn in float64 and cast), then on in train.dtype from where it ended, with a
    fresh L-BFGS memory (carrying the float32 curvature pairs over saved 1 of 55 steps at d = 100).

    Returns (problem, module, derived, fitted, timings): derived, build()'s quantities of the problem
    (n, m, p ...); fitted, how it was fitted: the learning rate ``lr`` (build()'s derived["lr"]) and, with a
    stopping test, each seed's stop reason, step and relative gradient (convergence())."""
    _quiet_lightning()
    t0 = time.perf_counter()
    tc = cfg.train
    build = builder(cfg.task.name)
    problem, derived = build(cfg.task, cfg.model, tc, replica_generators(cfg.seed, cfg.n_seeds))
    if "lr" not in derived:
        raise ValueError(f"build() of task {cfg.task.name} returned no derived['lr'], the learning rate "
                         "(docs/adding_a_paper.md; named 'eta' before record layout 2)")
    lr = derived["lr"]
    derived, fitted = {k: v for k, v in derived.items() if k != "lr"}, {"lr": lr}

    if tc.coarse_dtype is None:
        t1 = time.perf_counter()
        module = fit_replicas(problem, tc, lr, tc.tol, tc.tol_grad, trainer_cfg)
        steps = module.global_step
    else:
        coarse, _ = build(cfg.task, cfg.model, dataclasses.replace(tc, dtype=tc.coarse_dtype),
                          replica_generators(cfg.seed, cfg.n_seeds))
        L0 = problem.accumulate(None)  # both stages measure their gradient against L_0 in dtype
        t1 = time.perf_counter()
        first = fit_replicas(coarse, tc, lr, tc.coarse_tol, tc.coarse_tol_grad, trainer_cfg, L0, COARSE_F_NOISE)
        with torch.no_grad():
            for p, q in zip(problem.parameters(), first.problem.parameters(), strict=True):
                p.copy_(q)
        module = fit_replicas(problem, tc, lr, tc.tol, tc.tol_grad, trainer_cfg, L0)
        # per seed: the step its first stage ended at (frozen there, or at the stage's last step)
        ended = [float(first.global_step) if math.isnan(s) else s for s in first.stop_step]
        module.stop_step = [s + e for s, e in zip(module.stop_step, ended, strict=True)]
        module.curves = _join(first.curves, module.curves, first.global_step)
        steps = first.global_step + module.global_step
        fitted.update(coarse_stop=first.stop, coarse_stop_step=ended)
    t2 = time.perf_counter()
    timings = {"setup_s": t1 - t0, "train_s": t2 - t1, "steps": steps, "device": module.trained_on}
    if tc.coarse_dtype is not None:
        timings["coarse_steps"] = first.global_step
    if module.checks:
        fitted.update(convergence(problem, module, tc.tol_grad))
    return problem, module, derived, fitted, timings


def fit_replicas(problem, tc, lr: float, tol: float, tol_grad: float, trainer_cfg, initial_objective=None,
                 f_noise: float = 0.0):
    """Train `problem`'s replicas from their current parameters with train config tc's optimizer, steps and
    log_every, to tol / tol_grad (relative to initial_objective, when given), L-BFGS's line search taking
    approximate Wolfe points with f_noise (lit.lbfgs); the ReplicaModule, trained."""
    import pytorch_lightning as pl

    from attnrepro.lit.replica import ReplicaModule, TickDataModule

    module = ReplicaModule(problem, tc.optimizer.value, lr, tc.steps, tc.log_every, tol, tol_grad, tc.tol_move,
                           initial_objective=initial_objective, f_noise=f_noise)
    trainer = pl.Trainer(
        accelerator=trainer_cfg.accelerator, devices=trainer_cfg.devices, max_steps=tc.steps,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    )
    trainer.fit(module, datamodule=TickDataModule())
    # Lightning moves the module (the problem and its L_0) to the CPU when fit ends: the evaluation and
    # convergence() run there
    stopped = module.stop is not None and all(r is not None for r in module.stop)
    if module.global_step < tc.steps and not stopped:
        raise RuntimeError(f"training stopped after {module.global_step} of {tc.steps} steps")
    return module


def _join(first: dict, second: dict, offset: int) -> dict:
    """Two stages' curves as one: the second's steps shifted by the first's count, its step-0 point (the
    first's last) dropped."""
    keep = [i for i, s in enumerate(second["step"]) if s > 0]
    return {name: first[name] + ([second["step"][i] + offset for i in keep] if name == "step"
                                 else [second[name][i] for i in keep]) for name in first}


def convergence(problem, module, tol_grad: float) -> dict:
    """Per seed at the final parameters: its stop reason, the step it stopped at, the relative gradient
    ||grad L|| ||theta|| / |L_0| recomputed there and whether it ``converged`` (stopped on tol_grad with its
    objective fallen, and the recomputed gradient meets tol_grad). The reasons: "converged", "objective
    stalled", "diverged" (a test met with the objective risen above L_0, or the objective ends above
    L_0), "did not move" (still within tol_move of L_0) and "step cap"."""
    from attnrepro.lit.replica import CONVERGED, DIVERGED

    for p in problem.parameters():
        p.grad = None
    objective = problem.accumulate(torch.Tensor.backward)  # as in training (by hand where a problem has that route)
    grad = module.relative_gradient().tolist() if tol_grad > 0 else [float("nan")] * objective.shape[0]
    rose, fell = module.rose(objective.detach()).tolist(), module.moved(objective.detach()).tolist()
    for p in problem.parameters():
        p.grad = None
    stop = [reason if reason is not None else DIVERGED if up else "step cap" if down else "did not move"
            for reason, up, down in zip(module.stop, rose, fell, strict=True)]
    stop = [f"{CONVERGED}, but {g:.3g} > tol_grad at the final parameters" if s == CONVERGED and not g <= tol_grad
            else s for s, g in zip(stop, grad, strict=True)]
    out = {"stop": stop, "stop_step": module.stop_step,
           "objective_start": module.initial_objective.tolist(), "objective_end": objective.detach().tolist()}
    if tol_grad > 0:
        out.update(grad_rel=grad, converged=[s == CONVERGED for s in stop])
    return out


def fit(cfg, trainer_cfg) -> dict:
    """Train, then evaluate: the derived quantities, how they were fitted, metrics, curves, arrays and timings
    of a record."""
    problem, module, derived, fitted, timings = train(cfg, trainer_cfg)
    as_lists = lambda tensors: {k: v.detach().cpu().tolist() for k, v in tensors.items()}  # noqa: E731
    t = time.perf_counter()
    out = {"derived": derived, "fit": fitted, "metrics": as_lists(problem.evaluate()), "curves": module.curves,
           "arrays": as_lists(problem.arrays())}
    out["timings"] = {**timings, "eval_s": time.perf_counter() - t}
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out
