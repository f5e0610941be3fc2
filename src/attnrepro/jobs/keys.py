"""A job's key: a hash of the parts of its resolved config that decide its numbers."""

from __future__ import annotations

import hashlib
import json

from omegaconf import DictConfig, OmegaConf

from attnrepro.config import SEMANTIC_KEYS


def semantic_config(cfg: DictConfig) -> dict:
    """task, model, train, seed, n_seeds, resolved, as plain JSON-able data."""
    return {k: OmegaConf.to_container(cfg[k], resolve=True, enum_to_str=True)
            if OmegaConf.is_config(cfg[k]) else cfg[k] for k in SEMANTIC_KEYS}


def job_key(cfg: DictConfig) -> str:
    blob = json.dumps(semantic_config(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
