"""Lightning wrapper: full-batch training of a replicated problem.

The replicas' losses are summed before backward, so for element-wise
optimisers (SGD, Adam) each replica follows exactly the trajectory it would
follow alone. L-BFGS sees the replicas as one problem (its line search and
history are shared), so use it with one seed per job when that matters.
One optimiser step per Lightning step; the data live in the problem
(buffers, moved with the module), so the loader only ticks.

Convergence (per replica, at logged steps; with L-BFGS, whose every step is up to 20 iterations
with their line searches, the gradient test runs at every step). A replica *converged* when its
relative gradient norm ||grad L|| ||theta|| / |L_0| (every parameter's entries
of that replica, L_0 its objective at the first step; scale-free, so one
tolerance serves every n and d, and finite where L -> 0) is at most
``tol_grad``; it *stalled* when the relative change of its objective since the
previous log is below ``tol``. Neither counts while the replica's objective is still within
``tol_move`` (relative) of L_0: a start on a flat plateau (paper A's near-uniform attention, whose
gradient is O(1/d^2)) is not convergence. Training stops once every replica has converged
or stalled; with tol = tol_grad = 0 it runs all steps. (The check at a logged
step pairs that step's gradient, taken before the optimiser moved, with the
parameters after it: it only decides when to stop.) jobs.fit records, per seed,
the relative gradient recomputed at the final parameters and whether it meets
tol_grad.
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


# L-BFGS keeps 10 curvature pairs (SciPy's L-BFGS-B default): with torch's default of 100 the two-loop
# recursion (~200 vector operations an iteration) was 2/3 of a paper-B step at n = 100, d = 100
# (12.6 against 4.4 s for one tied_scaling_laws job, 56 against 60 steps, test errors equal to 3e-4).
LBFGS_HISTORY = 10

OPTIMIZERS = {
    "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr),
    "adam": lambda params, lr: torch.optim.Adam(params, lr=lr),
    "lbfgs": lambda params, lr: torch.optim.LBFGS(params, lr=lr, line_search_fn="strong_wolfe",
                                                  history_size=LBFGS_HISTORY),
}


class ReplicaModule(pl.LightningModule):
    def __init__(self, problem: torch.nn.Module, optimizer: str, lr: float, steps: int, log_every: int,
                 tol: float = 0.0, tol_grad: float = 0.0, tol_move: float = 0.0):
        super().__init__()
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {optimizer!r}")
        self.automatic_optimization = False
        self.problem, self.optimizer_name, self.lr = problem, optimizer, lr
        self.steps, self.log_every, self.tol, self.tol_grad, self.tol_move = steps, log_every, tol, tol_grad, tol_move
        self.curves: dict[str, list] = {"step": []}
        self.converged_step: list[float] | None = None  # per replica: first logged step within tol_grad (nan: never)
        self.stalled_step: list[float] | None = None    # per replica: first logged step whose change is < tol
        self._last_objective: torch.Tensor | None = None
        self.initial_objective: torch.Tensor | None = None

    def configure_optimizers(self):
        return OPTIMIZERS[self.optimizer_name](list(self.problem.parameters()), self.lr)

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

    def _objective(self, step: int) -> torch.Tensor:
        """Gradients of the summed objective; the (R,) objective, checked finite."""
        loss = self.problem.accumulate(self.manual_backward)
        if not bool(torch.isfinite(loss).all()):
            bad = torch.nonzero(~torch.isfinite(loss)).flatten().tolist()
            raise Divergence(f"non-finite training loss at step {step} in replicas {bad}")
        for p in self.problem.parameters():
            if p.grad is not None and not bool(torch.isfinite(p.grad).all()):
                raise Divergence(f"non-finite gradient at step {step}")
        if self.initial_objective is None:
            self.initial_objective = loss.detach()
        return loss

    def relative_gradient(self) -> torch.Tensor:
        """Per replica ||grad L|| ||theta|| / |L_0| from the gradients in p.grad (every parameter has the
        replica axis first; L_0: the objective at the first step)."""
        params = [p for p in self.problem.parameters() if p.grad is not None]
        g = torch.stack([p.grad.flatten(1).pow(2).sum(1) for p in params]).sum(0).sqrt()
        w = torch.stack([p.detach().flatten(1).pow(2).sum(1) for p in params]).sum(0).sqrt()
        return (g * w / self.initial_objective.abs().clamp_min(1e-30)).to(torch.float64)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        step = self.global_step  # steps taken before this one
        if self.optimizer_name == "lbfgs":
            holder = {}

            def closure():
                opt.zero_grad()
                holder["loss"] = self._objective(step)
                return holder["loss"].sum()

            opt.step(closure=closure)
            loss = holder["loss"]
        else:
            opt.zero_grad()
            loss = self._objective(step)
            opt.step()
        done = step + 1
        logged = done % self.log_every == 0 or done == self.steps
        if logged:
            self._log_curves(done)
        if logged or (self.optimizer_name == "lbfgs" and self.tol_grad > 0):
            # p.grad still holds this step's gradient (it is zeroed at the next step's start)
            grad = self.relative_gradient() if self.tol_grad > 0 else None
            self._check_convergence(done, loss.detach(), grad, stall=logged)
            if self.trainer.should_stop and not logged:
                self._log_curves(done)  # the curves end where training did

    def moved(self, objective: torch.Tensor) -> torch.Tensor:
        """Per replica: |L - L_0| / |L_0| > tol_move (strict: with tol_move = 0 the objective must have
        changed at all, so a replica whose objective stays exactly L_0 never converges or stalls)."""
        L0 = self.initial_objective
        return (objective - L0).abs() / L0.abs().clamp_min(1e-30) > self.tol_move

    def _check_convergence(self, step: int, objective: torch.Tensor, grad_rel: torch.Tensor | None,
                           stall: bool = True) -> None:
        """Mark the replicas that converged (grad_rel <= tol_grad) or, when `stall` (a logged step),
        stalled (objective change since the previous logged step below tol); stop when all have."""
        if self.tol <= 0 and self.tol_grad <= 0:
            return
        n = objective.shape[0]
        if self.converged_step is None:
            self.converged_step, self.stalled_step = [float("nan")] * n, [float("nan")] * n
        stalled = torch.zeros_like(objective, dtype=torch.bool)
        if stall and self.tol > 0 and self._last_objective is not None:
            change = (self._last_objective - objective).abs() / self._last_objective.abs().clamp_min(1e-30)
            stalled = change < self.tol
        converged = grad_rel <= self.tol_grad if grad_rel is not None else torch.zeros_like(stalled)
        moved = self.moved(objective)
        converged, stalled = converged & moved, stalled & moved
        if stall:
            self._last_objective = objective
        for r in range(n):  # the first time each happens (nan != nan)
            if bool(converged[r]) and self.converged_step[r] != self.converged_step[r]:
                self.converged_step[r] = float(step)
            if bool(stalled[r]) and self.stalled_step[r] != self.stalled_step[r]:
                self.stalled_step[r] = float(step)
        if all(c == c or s == s for c, s in zip(self.converged_step, self.stalled_step, strict=True)):
            self.trainer.should_stop = True
