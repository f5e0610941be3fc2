"""Lightning wrapper: full-batch training of a replicated problem, each replica on its own.

Every parameter and data tensor has the replica axis first and the objective is the sum of the
replicas' objectives, so the gradient of a replica's parameters is its own objective's. SGD and Adam act
element-wise, and L-BFGS is lit.lbfgs.ReplicaLBFGS (one history, step and line search per replica):
a seed follows the trajectory it follows alone, under every optimiser. A Lightning step is one L-BFGS
step, or the SGD or Adam steps up to the next check; the data live in the problem (buffers, moved with the
module), so the loader only ticks.

Stopping, per replica. A replica *converged* when its relative gradient ||grad L|| ||theta|| / |L_0|
(every parameter's entries of that replica, L_0 its objective at the first step; scale-free, so one
tolerance serves every n and d, and finite where L -> 0) is at most ``tol_grad``; it *stalled* when the
relative change of its objective since the previous check is below ``tol``. Either counts only once its
objective has fallen below L_0 by more than ``tol_move`` (relative): a start on a flat plateau (paper A's
near-uniform attention, whose gradient is O(1/d^2)) is not convergence. A replica that meets either test
with its objective risen above L_0 by more than ``tol_move`` (a blown-up step: a saturated softmax has a
zero gradient) *diverged*. A replica that converged, stalled or diverged is frozen where the test was
made (the gradient and the parameters of the test are one point) and never moves again: it leaves the
batch, and training goes on with the others only (lit.compaction); training stops once every replica is
frozen, else at ``steps``. SGD and Adam are checked at every ``log_every``-th step,
before it is taken; L-BFGS (up to 20 iterations a step) after every step for the gradient, at logged
steps for the objective's change. With tol = tol_grad = 0 every step runs (a fixed-step protocol).
jobs.fit records each seed's stop reason and its relative gradient recomputed at the final parameters.
"""

from __future__ import annotations

import math

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, IterableDataset

from attnrepro.lit.compaction import narrow_optimizer, replica_count, take
from attnrepro.lit.lbfgs import ReplicaLBFGS


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

# L-BFGS's own absolute test on the objective's and the step's change (torch's tolerance_change = 1e-9) is
# off: the objective's scale is the problem's (a sum over n samples), and near the minimum of a small one
# g.d fell below 1e-9 above tol_grad, so a seed spent its step cap without moving (d = 20, n = 64, lambda =
# 0.01: 200 steps stuck at 2.07e-5 > tol_grad 2e-5; 14 steps with the test off). The stopping tests of this
# module decide; a step that is no descent direction (g.d >= 0) still ends the step.
OPTIMIZERS = {
    "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr),
    "adam": lambda params, lr: torch.optim.Adam(params, lr=lr),
    "lbfgs": lambda params, lr, f_noise=0.0: ReplicaLBFGS(params, lr=lr, history_size=LBFGS_HISTORY,
                                                         tolerance_change=0.0, f_noise=f_noise),
}

CONVERGED, STALLED, DIVERGED = "converged", "objective stalled", "diverged"


def release_caches(problem: torch.nn.Module) -> None:
    """Call release_caches() of every submodule that has one (paper A's chunk buffers: a problem that training
    has left, or training has ended, need not hold them)."""
    for module in problem.modules():
        if callable(getattr(module, "release_caches", None)):
            module.release_caches()


class ReplicaModule(pl.LightningModule):
    narrowing = True  # off only to measure what it saves (pipelines/bench.py; L-BFGS then holds stopped replicas)
    step_gradient_test = True  # off only to measure what it saves: an L-BFGS step then runs its 20 iterations

    def __init__(self, problem: torch.nn.Module, optimizer: str, lr: float, steps: int, log_every: int,
                 tol: float = 0.0, tol_grad: float = 0.0, tol_move: float = 0.0,
                 initial_objective: torch.Tensor | None = None, f_noise: float = 0.0):
        """initial_objective: L_0 when training goes on from an earlier stage (else the objective at the
        first step); f_noise: L-BFGS's line search takes approximate Wolfe points, f within f_noise |f|
        (lit.lbfgs.strong_wolfe)."""
        super().__init__()
        if f_noise and optimizer != "lbfgs":
            raise ValueError(f"f_noise is a setting of L-BFGS's line search, not of {optimizer!r}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {optimizer!r}")
        if not self.narrowing and optimizer != "lbfgs":
            raise ValueError("narrowing can be off for L-BFGS only (its stopped replicas are held by the optimiser)")
        if (replicas := replica_count(problem)) is None:
            shapes = {n: tuple(t.shape) for n, t in (*problem.named_parameters(), *problem.named_buffers())}
            raise ValueError(f"{type(problem).__name__}: every parameter and buffer needs the replica axis first, "
                             f"of one length, or to be named in its module's shared_buffers (lit.compaction); "
                             f"shapes: {shapes}")
        self.automatic_optimization = False
        self.problem, self.optimizer_name, self.lr, self.f_noise = problem, optimizer, lr, f_noise
        self.steps, self.log_every, self.tol, self.tol_grad, self.tol_move = steps, log_every, tol, tol_grad, tol_move
        self.curves: dict[str, list] = {"step": []}
        self.stop: list[str | None] | None = None   # per replica: why it stopped (None: still training)
        self.stop_step: list[float] | None = None   # per replica: the step it stopped at (nan: never)
        self._last_objective: torch.Tensor | None = None
        # The replicas still training (indices into problem's) and the problem narrowed to them
        # (lit.compaction); kept out of the module's registered children: Lightning moves and counts `problem`
        self.rows = list(range(replicas))
        self.__dict__["training_problem"] = problem
        self._left: dict[int, dict[str, float]] = {}  # a stopped replica's metrics where it stopped
        # a buffer, so that it moves with the module: Lightning moves the module to the CPU when fit ends
        self.register_buffer("initial_objective", initial_objective, persistent=False)
        self.trained_on: str | None = None  # the device training ran on

    @property
    def checks(self) -> bool:
        """Whether any stopping test is on (else the protocol is a fixed number of steps)."""
        return self.tol > 0 or self.tol_grad > 0

    def configure_optimizers(self):
        extra = {"f_noise": self.f_noise} if self.f_noise else {}
        return OPTIMIZERS[self.optimizer_name](list(self.problem.parameters()), self.lr, **extra)

    def _log_curves(self, step: int) -> None:
        """Append every replica's metrics at `step` (a stopped one's as it stopped); stop on non-finite ones."""
        metrics = {name: v.detach().cpu().tolist() for name, v in self.training_problem.evaluate().items()}
        self.curves["step"].append(step)
        bad = [name for name, v in metrics.items() if not all(map(math.isfinite, v))]
        if bad:
            raise Divergence(f"non-finite {', '.join(bad)} after step {step}")
        at = {r: i for i, r in enumerate(self.rows)}
        n = len(self.rows) + len(self._left)
        for name, v in metrics.items():
            self.curves.setdefault(name, []).append([v[at[r]] if r in at else self._left[r][name] for r in range(n)])

    def _narrow(self) -> None:
        """Go on with the replicas that have not stopped only: the training problem and the optimiser's state
        narrowed to them, the stopped ones' parameters written back to `problem` and their metrics kept."""
        keep = [i for i, r in enumerate(self.rows) if self.stop[r] is None]
        if not self.narrowing or len(keep) == len(self.rows) or not keep:
            return
        left = [i for i, r in enumerate(self.rows) if self.stop[r] is not None]
        work = self.training_problem
        self._write_back()
        metrics = take(work, torch.tensor(left, device=self.device)).evaluate()
        for j, i in enumerate(left):
            self._left[self.rows[i]] = {name: float(v[j]) for name, v in metrics.items()}
        kept = torch.tensor(keep, device=self.device)
        narrowed = take(work, kept)
        narrow_optimizer(self.optimizers().optimizer, list(narrowed.parameters()), kept)
        self.__dict__["training_problem"] = narrowed
        self.rows = [self.rows[i] for i in keep]
        release_caches(work)  # training has left it (the first time: `problem`, kept for the write-back)

    @torch.no_grad()
    def _write_back(self) -> None:
        """problem's parameters of the training replicas, from the training problem."""
        if self.training_problem is self.problem:
            return
        rows = torch.tensor(self.rows, device=self.device)
        for p, q in zip(self.problem.parameters(), self.training_problem.parameters(), strict=True):
            p.index_copy_(0, rows, q)

    def on_train_start(self) -> None:
        self.trained_on = str(self.device)
        self._log_curves(0)

    def on_train_end(self) -> None:
        self._write_back()
        release_caches(self.training_problem)
        release_caches(self.problem)
        self.__dict__["training_problem"] = self.problem  # training state only: it would stay on the device
        self.rows = list(range(len(self.stop))) if self.stop is not None else self.rows
        self._last_objective = None

    def _objective(self, step: int, check_finite: bool = True) -> torch.Tensor:
        """Gradients of the training replicas' summed objective (p.grad, set afresh); their objectives, checked
        finite, and the gradients and parameters too with `check_finite` (else a non-finite gradient shows in
        the next objective, the parameters at the next check, or the logged metrics). On one device the backward
        pass is the tensor's own: there Lightning's manual_backward adds only its hooks (10% of a step of paper
        A's GD)."""
        problem = self.training_problem
        for p in problem.parameters():
            p.grad = None
        loss = problem.accumulate(torch.Tensor.backward if self.trainer.world_size == 1 else self.manual_backward)
        if not bool(torch.isfinite(loss).all()):
            bad = [self.rows[i] for i in torch.nonzero(~torch.isfinite(loss)).flatten().tolist()]
            raise Divergence(f"non-finite training loss at step {step} in replicas {bad}")
        for p in problem.parameters() if check_finite else ():
            if p.grad is not None and not bool(torch.isfinite(p.grad).all()):
                raise Divergence(f"non-finite gradient at step {step}")
            if not bool(torch.isfinite(p).all()):  # a non-finite gradient between checks, where the loss is finite
                raise Divergence(f"non-finite parameters at step {step}")
        if self.stop is None:
            self.initial_objective = (loss.detach() if self.initial_objective is None
                                      else self.initial_objective.to(loss.device))
            n = loss.shape[0]
            self.stop, self.stop_step = [None] * n, [float("nan")] * n
        return loss

    def relative_gradient(self) -> torch.Tensor:
        """Per training replica ||grad L|| ||theta|| / |L_0| from the gradients in p.grad (every parameter has
        the replica axis first; L_0: the objective at the first step)."""
        params = [p for p in self.training_problem.parameters() if p.grad is not None]
        g = torch.stack([p.grad.reshape(p.shape[0], -1).pow(2).sum(1) for p in params]).sum(0).sqrt()
        w = torch.stack([p.detach().reshape(p.shape[0], -1).pow(2).sum(1) for p in params]).sum(0).sqrt()
        L0 = self.initial_objective[self.rows]
        return (g * w / L0.abs().clamp_min(1e-30)).to(torch.float64)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        step = self.global_step  # steps taken before this one
        if self.optimizer_name == "lbfgs":
            def closure():
                return self._objective(step)

            if self.stop is not None:  # all of them while narrowing is on
                opt.optimizer.active = [self.stop[r] is None for r in self.rows]
            if self.step_gradient_test and self.tol_grad > 0 and self.initial_objective is not None:
                # a replica's step ends at the iteration its relative gradient meets tol_grad
                L0 = self.initial_objective[self.rows].abs()
                opt.optimizer.gradient_tol = (self.tol_grad * L0).tolist()
            objective = opt.step(closure=closure).to(self.initial_objective.device)
            done = step + 1
            logged = done % self.log_every == 0 or done == self.steps
            if logged:
                self._log_curves(done)
            if self.checks:  # p.grad: each replica's gradient at its new point
                self._check(done, objective, self.relative_gradient() if self.tol_grad > 0 else None, logged)
                if self.trainer.should_stop and not logged:
                    self._log_curves(done)  # the curves end where training did
                self._narrow()
            return
        # SGD and Adam: one Lightning step runs the optimiser steps up to the next check (log_every of them):
        # Lightning's hooks around a step cost more than a step of paper A's small problems
        end = min(step - step % self.log_every + self.log_every, self.steps)  # a logged step
        for k in range(step, end):
            logged = k % self.log_every == 0
            objective = self._objective(k, check_finite=logged).detach()
            if self.checks and k > 0 and logged:  # theta_k and its gradient
                self._check(k, objective, self.relative_gradient() if self.tol_grad > 0 else None, True)
                if self.trainer.should_stop:
                    return  # every replica stopped at theta_k: no step taken
                self._narrow()  # the stopped replicas leave with their parameters and gradients as tested
            self._sgd_step(opt) if self.optimizer_name == "sgd" else opt.step()
        self._log_curves(end)

    @torch.no_grad()
    def _sgd_step(self, opt) -> None:
        """opt.step() of plain SGD, theta <- theta - lr grad (torch's own update, add_ with alpha = -lr), without
        the wrappers around it (Lightning's closure and hooks, torch's profiler hook: 0.19 ms of a 0.93 ms GD
        step of paper A); Lightning counts the step as it counts opt.step(). Where this Lightning has no such
        counting hooks, opt.step(); where they do not count it, an error (training would never reach its step cap)."""
        before, after = getattr(opt, "_on_before_step", None), getattr(opt, "_on_after_step", None)
        if before is None or after is None:
            opt.step()
            return
        step = self.global_step
        before()
        group = opt.optimizer.param_groups[0]
        for p in group["params"]:
            if p.grad is not None:
                p.add_(p.grad, alpha=-group["lr"])
        after()
        if self.global_step != step + 1:
            raise RuntimeError(f"Lightning {pl.__version__} did not count a GD step taken by ReplicaModule._sgd_step "
                               f"(global step {step} -> {self.global_step})")

    def moved(self, objective: torch.Tensor) -> torch.Tensor:
        """Per training replica: (L_0 - L) / |L_0| > tol_move, the objective fell (strict: with tol_move = 0 it
        must have fallen at all)."""
        L0 = self.initial_objective[self.rows]
        return (L0 - objective) / L0.abs().clamp_min(1e-30) > self.tol_move

    def rose(self, objective: torch.Tensor) -> torch.Tensor:
        """Per training replica: (L - L_0) / |L_0| > tol_move, the objective rose above its start."""
        L0 = self.initial_objective[self.rows]
        return (objective - L0) / L0.abs().clamp_min(1e-30) > self.tol_move

    def _check(self, step: int, objective: torch.Tensor, grad_rel: torch.Tensor | None, stall: bool) -> None:
        """Stop the training replicas that converged (grad_rel <= tol_grad) or, when `stall`, stalled (objective
        change since the previous stall check below tol), with a fallen objective; those that met either
        test with a risen objective diverged. Stopped replicas are frozen here; training ends once all are."""
        if self._last_objective is None:
            self._last_objective = torch.full((len(self.stop),), math.nan, dtype=objective.dtype,
                                              device=objective.device)
        last = self._last_objective[self.rows]
        stalled = (last - objective).abs() / last.abs().clamp_min(1e-30) < self.tol
        stalled &= stall and self.tol > 0
        met = grad_rel.to(objective.device) <= self.tol_grad if grad_rel is not None else torch.zeros_like(stalled)
        if stall:
            self._last_objective[self.rows] = objective
        fell, rose = self.moved(objective), self.rose(objective)
        for i, r in enumerate(self.rows):
            if self.stop[r] is not None or not (bool(met[i]) or bool(stalled[i])):
                continue
            reason = (CONVERGED if bool(met[i]) else STALLED) if bool(fell[i]) else DIVERGED if bool(rose[i]) else None
            if reason is not None:  # else a flat start: go on
                self.stop[r], self.stop_step[r] = reason, float(step)
        if all(s is not None for s in self.stop):
            self.trainer.should_stop = True
