"""Training only the replicas still moving: a problem and its optimiser narrowed to some of their replicas.

A job's seeds are replicas of one batched problem (every parameter and buffer has the replica axis first),
and a seed that stopped (lit.replica) is frozen for good. Evaluating it with the others costs as much as
training it: in paper A's trained sweep a few slow seeds ran on for up to 13x the steps of the median one.
So once a replica stops, training goes on with a copy of the problem holding only the others (``take``) and
the optimiser's state narrowed to match (``narrow_optimizer``). Every operation acts on each replica on its
own, so a replica's numbers are those of the full batch up to how a smaller batch's products round (equal at
the tests' sizes, tests/test_runner.py; float32, or float64 at d = 200, can differ in the last digits; paper B's
gradient by hand is equal to the bit, d = 12 in tests/test_tied_attention.py and up to d = 200 checked by hand).
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn


def _rows(t: Tensor, rows: Tensor) -> Tensor:
    """t[rows], laid out as t is (the samples' position-major layout is what keeps their products wide)."""
    out = torch.empty_like(t.narrow(0, 0, len(rows)))
    return out.copy_(t.index_select(0, rows))


def shared(problem: nn.Module) -> set[int]:
    """The ids of the buffers without a replica axis: those a module names in its ``shared_buffers``
    (a structural constant, as paper A's attention mask)."""
    return {id(getattr(m, name)) for m in problem.modules() for name in getattr(m, "shared_buffers", ())}


def replica_count(problem: nn.Module) -> int | None:
    """R when every parameter and (not shared) buffer of the problem has a leading replica axis of one length
    R, else None (then the problem cannot be narrowed)."""
    common = shared(problem)
    shapes = [t.shape for t in (*problem.parameters(), *problem.buffers()) if id(t) not in common]
    lengths = {s[0] if len(s) else None for s in shapes}
    return lengths.pop() if len(lengths) == 1 and None not in lengths else None


def take(problem: nn.Module, rows: Tensor) -> nn.Module:
    """A copy of the problem holding replicas ``rows`` only (in that order): parameters (with their gradients)
    and buffers are t[rows], new tensors; shared buffers are the same tensors; everything else is copied."""
    common = shared(problem)
    memo = {}
    for p in problem.parameters():
        memo[id(p)] = q = nn.Parameter(_rows(p.detach(), rows), requires_grad=p.requires_grad)
        if p.grad is not None:
            q.grad = _rows(p.grad, rows)
    for b in problem.buffers():
        memo[id(b)] = b if id(b) in common else _rows(b, rows)
    return copy.deepcopy(problem, memo)


def narrow_optimizer(opt: torch.optim.Optimizer, params: list[nn.Parameter], keep: Tensor) -> None:
    """Point the optimiser at ``params`` (the narrowed problem's, in the same order as its own) and keep the
    rows ``keep`` of its per-parameter state (Adam's moments; SGD has none), in place. ReplicaLBFGS keeps
    its per-replica histories through its own ``narrow``."""
    if hasattr(opt, "narrow"):
        opt.narrow(params, keep.tolist())
        return
    (group,) = opt.param_groups
    R = group["params"][0].shape[0]
    state = {}
    for old, new in zip(group["params"], params, strict=True):
        kept = opt.state.pop(old, None)
        if kept:
            state[new] = {k: _rows(v, keep) if torch.is_tensor(v) and v.dim() and v.shape[0] == R else v
                          for k, v in kept.items()}
    group["params"] = list(params)
    opt.state.clear()
    opt.state.update(state)
