"""Lightning wrapper: full-batch training of a replicated problem.

The replicas' losses are summed before backward, so for element-wise
optimisers (SGD, Adam) each replica follows exactly the trajectory it would
follow alone. One optimiser step per Lightning step; the data live in the
problem (buffers), so the loader only ticks.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, IterableDataset


class Divergence(RuntimeError):
    """A non-finite loss or gradient: the job stops and is recorded as failed."""


class _Ticks(IterableDataset):
    def __iter__(self):
        while True:
            yield 0


class TickDataModule(pl.LightningDataModule):
    """Endless batches of nothing: one per optimiser step."""

    def train_dataloader(self):
        return DataLoader(_Ticks(), batch_size=None)


class ReplicaModule(pl.LightningModule):
    def __init__(self, problem: torch.nn.Module, optimizer: str, lr: float, steps: int, log_every: int):
        super().__init__()
        self.automatic_optimization = False
        self.problem, self.optimizer_name, self.lr = problem, optimizer, lr
        self.steps, self.log_every = steps, log_every
        self.curves: dict[str, list] = {"step": []}

    def configure_optimizers(self):
        params = list(self.problem.parameters())
        if self.optimizer_name == "sgd":
            return torch.optim.SGD(params, lr=self.lr)
        if self.optimizer_name == "adam":
            return torch.optim.Adam(params, lr=self.lr)
        raise ValueError(f"unknown optimizer {self.optimizer_name!r}")

    def _log_curves(self, step: int) -> None:
        """Append the problem's metrics (one value per replica) at `step`; stop on non-finite ones."""
        metrics = self.problem.evaluate()
        self.curves["step"].append(step)
        for name, v in metrics.items():
            self.curves.setdefault(name, []).append(v.detach().cpu().tolist())
        bad = [name for name, v in metrics.items() if not bool(torch.isfinite(v).all())]
        if bad:
            raise Divergence(f"non-finite {', '.join(bad)} after step {step}")

    def on_train_start(self) -> None:
        self._log_curves(0)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        opt.zero_grad()
        loss = self.problem.accumulate(self.manual_backward)
        step = self.global_step  # steps taken before this one
        if not bool(torch.isfinite(loss).all()):
            bad = torch.nonzero(~torch.isfinite(loss)).flatten().tolist()
            raise Divergence(f"non-finite training loss at step {step} in replicas {bad}")
        for p in self.problem.parameters():
            if p.grad is not None and not bool(torch.isfinite(p.grad).all()):
                raise Divergence(f"non-finite gradient at step {step}")
        opt.step()
        done = step + 1
        if done % self.log_every == 0 or done == self.steps:
            self._log_curves(done)
