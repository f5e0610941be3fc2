"""Per-replica randomness: replica r of a job with seed s draws everything from seed s + r."""

from __future__ import annotations

import torch


def replica_generators(seed: int, n_seeds: int) -> list[torch.Generator]:
    """One CPU generator per replica r, seeded seed + r, so a seed gives the same
    numbers whether it runs alone or beside others."""
    return [torch.Generator().manual_seed(seed + r) for r in range(n_seeds)]
