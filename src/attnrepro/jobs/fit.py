"""Train one job's problem with Lightning and collect what the record keeps."""

from __future__ import annotations

import logging
import time
import warnings

import torch

from attnrepro.papers import builder
from attnrepro.seeding import replica_generators


def _quiet_lightning() -> None:
    for name in ("pytorch_lightning", "lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    for pattern in (".*does not have many workers.*", ".*IterableDataset.*__len__.*", ".*LeafSpec.*is deprecated.*"):
        warnings.filterwarnings("ignore", pattern)


def train(cfg, trainer_cfg):
    """Build the job's problem (all seeds as replicas) and train it. cfg: validated object config.

    Returns (problem, module, derived, timings)."""
    import pytorch_lightning as pl

    from attnrepro.lit.replica import ReplicaModule, TickDataModule

    _quiet_lightning()
    t0 = time.perf_counter()
    gens = replica_generators(cfg.seed, cfg.n_seeds)
    problem, derived = builder(cfg.task.name)(cfg.task, cfg.model, cfg.train, gens)
    module = ReplicaModule(problem, cfg.train.optimizer.value, derived["eta"], cfg.train.steps,
                           cfg.train.log_every, cfg.train.tol, cfg.train.tol_grad, cfg.train.tol_move)
    trainer = pl.Trainer(
        accelerator=trainer_cfg.accelerator, devices=trainer_cfg.devices, max_steps=cfg.train.steps,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    )
    t1 = time.perf_counter()
    trainer.fit(module, datamodule=TickDataModule())
    t2 = time.perf_counter()
    stopped = module.converged_step is not None and all(
        c == c or s == s for c, s in zip(module.converged_step, module.stalled_step, strict=True))
    if module.global_step < cfg.train.steps and not stopped:
        raise RuntimeError(f"training stopped after {module.global_step} of {cfg.train.steps} steps")
    timings = {"setup_s": t1 - t0, "train_s": t2 - t1, "steps": module.global_step,
               "device": str(next(problem.parameters()).device)}
    if module.converged_step is not None:
        derived = {**derived, "converged_step": module.converged_step, "stalled_step": module.stalled_step}
    if cfg.train.tol_grad > 0:
        derived = {**derived, **convergence(problem, module, cfg.train.tol_grad, cfg.train.steps)}
    return problem, module, derived, timings


def convergence(problem, module, tol_grad: float, steps: int) -> dict:
    """Per seed at the final parameters: the relative gradient ||grad L|| ||theta|| / |L_0|, whether it
    meets tol_grad with its objective moved from L_0 by more than tol_move (``converged``), and
    otherwise why it is not: "objective stalled", "did not move" (still within tol_move of L_0),
    "step cap", or "left the tolerance" (it had met it, and training went on for the other seeds)."""
    for p in problem.parameters():
        p.grad = None
    objective = problem.accumulate(lambda loss: loss.backward())
    grad = module.relative_gradient().tolist()
    moved = module.moved(objective).tolist()
    for p in problem.parameters():
        p.grad = None
    capped = module.global_step >= steps
    stop = ["did not move" if not mv else "converged" if g <= tol_grad else "objective stalled" if s == s
            else "step cap" if capped else "left the tolerance"
            for g, s, mv in zip(grad, module.stalled_step, moved, strict=True)]
    return {"grad_rel": grad, "converged": [g <= tol_grad and mv for g, mv in zip(grad, moved, strict=True)],
            "stop": stop}


def fit(cfg, trainer_cfg) -> dict:
    """Train, then evaluate: the derived quantities, metrics, curves, arrays and timings of a record."""
    problem, module, derived, timings = train(cfg, trainer_cfg)
    as_lists = lambda tensors: {k: v.detach().cpu().tolist() for k, v in tensors.items()}  # noqa: E731
    t = time.perf_counter()
    out = {"derived": derived, "metrics": as_lists(problem.evaluate()), "curves": module.curves,
           "arrays": as_lists(problem.arrays())}
    out["timings"] = {**timings, "eval_s": time.perf_counter() - t}
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out
