"""Train one job's problem with Lightning and collect what the record keeps."""

from __future__ import annotations

import logging
import time
import warnings

import torch

from ..tasks.sparse_xor import replica_generators

BUILDERS = {}  # task name -> build(task, model, train, gens) -> (problem, derived)


def builder(task_name: str):
    if not BUILDERS:
        from ..problems import sparse_xor

        BUILDERS["sparse_xor"] = sparse_xor.build
    if task_name not in BUILDERS:
        raise ValueError(f"no problem for task.name={task_name!r}; known: {sorted(BUILDERS)}")
    return BUILDERS[task_name]


def _as_lists(tensors: dict) -> dict:
    return {k: v.detach().cpu().tolist() for k, v in tensors.items()}


def fit(cfg, trainer_cfg) -> dict:
    """cfg: the validated object config. Returns derived, metrics, curves, arrays, timings."""
    import pytorch_lightning as pl

    from ..lit.replica import ReplicaModule, TickDataModule

    for name in ("pytorch_lightning", "lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*IterableDataset.*__len__.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*is deprecated.*")

    t0 = time.perf_counter()
    gens = replica_generators(cfg.seed, cfg.n_seeds)
    problem, derived = builder(cfg.task.name)(cfg.task, cfg.model, cfg.train, gens)
    module = ReplicaModule(problem, cfg.train.optimizer.value, derived["eta"], cfg.train.steps,
                           cfg.train.log_every)
    trainer = pl.Trainer(
        accelerator=trainer_cfg.accelerator, devices=trainer_cfg.devices, max_steps=cfg.train.steps,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    )
    t1 = time.perf_counter()
    trainer.fit(module, datamodule=TickDataModule())
    t2 = time.perf_counter()
    if module.global_step < cfg.train.steps:
        raise RuntimeError(f"training stopped after {module.global_step} of {cfg.train.steps} steps")
    metrics = _as_lists(problem.evaluate())
    out = {
        "derived": derived,
        "metrics": metrics,
        "curves": module.curves,
        "arrays": _as_lists(problem.arrays()),
        "timings": {"setup_s": t1 - t0, "train_s": t2 - t1, "eval_s": time.perf_counter() - t2,
                    "steps": cfg.train.steps, "device": str(next(problem.parameters()).device)},
    }
    del trainer, module, problem
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out
