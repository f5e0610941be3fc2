"""The software environment of a training process: the package versions its records name, and full fp32
matmuls on CUDA (no TF32), set before it trains."""

from __future__ import annotations

import platform


def versions() -> dict:
    """{python and each package a record names: its version} (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("attnrepro", "torch", "pytorch-lightning", "hydra-core", "omegaconf", "numpy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def full_fp32_matmuls() -> None:
    """fp32 matmuls in full fp32 on CUDA, never TF32 (10-bit mantissa, ~1e-3 relative rounding): the
    ridgeless recovery of paper B reaches estimation errors of 1e-8. No effect on CPU."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
