"""Beyond paper A: k-sparse parity learned by k attention heads on the exact population loss."""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor, nn

from attnrepro.papers.sparse_xor import kparity as K
from attnrepro.papers.sparse_xor.kheads import KHeadParityAttention, step_unit_k

Backward = Optional[Callable[[Tensor], None]]


def split_onto_support(gammas: Tensor, S: Tensor) -> Tensor:
    """1 where the heads split one-to-one onto S: every position of S has a head whose attention share
    |gamma_h,i| / sum_j |gamma_h,j| there is above 1/2 (a head has such a share on one position at
    most, so this is a bijection heads -> S); gammas (R, k, d), S (R, k) -> (R,) in {0, 1}."""
    shares = K.support_matrix(gammas.abs(), S) / gammas.abs().sum(-1, keepdim=True).clamp_min(1e-300)
    return ((shares > 0.5).any(-2).all(-1)).to(gammas.dtype)


class KParityProblem(nn.Module):
    """k heads on k-sparse parity; the population loss (kparity.population_loss_k) is the objective."""

    def __init__(self, model: KHeadParityAttention, S: Tensor, noise: float):
        super().__init__()
        self.model, self.noise = model, noise
        self.register_buffer("S", S)

    def accumulate(self, backward: Backward) -> Tensor:
        with torch.set_grad_enabled(backward is not None):
            loss = K.population_loss_k(self.model.heads(), self.S, self.noise)
            if backward is not None:
                backward(loss.sum())
        return loss.detach()

    @torch.no_grad()
    def evaluate(self) -> dict[str, Tensor]:
        gammas = self.model.heads()
        return {"loss": K.population_loss_k(gammas, self.S, self.noise),
                "parity_correlation": K.parity_correlation(gammas, self.S),
                "split": split_onto_support(gammas, self.S)}

    def arrays(self) -> dict[str, Tensor]:
        return {}


def build(task, model_cfg, train, gens) -> tuple[nn.Module, dict]:
    """The problem for (task, model, train) configs, and the derived quantities to record. Per replica:
    the support S first, then V and the queries (kheads.KHeadParityAttention.draw)."""
    if model_cfg.family != "k_head_attention":
        raise ValueError(f"model.family {model_cfg.family!r} does not fit task {task.name!r}")
    dtype = getattr(torch, train.dtype.value)
    S = torch.tensor([K.draw_support_k(g, task.d, task.k) for g in gens])
    m = model_cfg.width(task.d)
    norm = 1.0 if model_cfg.norm_c is None else model_cfg.norm_c * m**0.5
    model = KHeadParityAttention.draw(gens, task.d, m, task.k, model_cfg.attention.value, model_cfg.init.value,
                                      dtype, norm=norm)
    unit = step_unit_k(model_cfg.attention.value, task.d, m, task.k) if train.optimizer.value == "sgd" else 1.0
    return KParityProblem(model, S, task.noise), {"m": m, "lr": train.lr * unit, "n_params": task.k * m,
                                                 "S": S.tolist()}
