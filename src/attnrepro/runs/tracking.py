"""Experiment tracking beside the record: a CSV of curves always, W&B with logger=wandb.

W&B is optional: offline (run files under <outputs>/wandb, upload later with
`make sync-wandb`) unless an API key is configured, online then. One W&B run
per job, grouped by sweep, finished after the job.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from omegaconf import DictConfig


def _curve_rows(record: dict):
    """Long format: (step, seed, metric, value)."""
    curves = record.get("curves") or {}
    steps = curves.get("step", [])
    for name, series in curves.items():
        if name == "step":
            continue
        for step, values in zip(steps, series):
            for seed, v in enumerate(values):
                yield step, seed, name, v


class CsvTracker:
    def __init__(self, folder: Path):
        self.folder = folder

    def finish(self, record: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / ".curves.csv.tmp"
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "seed", "metric", "value"])
            w.writerows(_curve_rows(record))
        os.replace(tmp, self.folder / "curves.csv")


def wandb_mode(requested: str) -> str:
    """'auto' -> online when an API key is configured (env or netrc), else offline."""
    if requested != "auto":
        return requested
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    netrc = Path.home() / ".netrc"
    if netrc.exists() and "api.wandb.ai" in netrc.read_text(errors="ignore"):
        return "online"
    return "offline"


def sweep_group(cfg: DictConfig) -> str:
    try:
        from hydra.core.hydra_config import HydraConfig

        return f"{cfg.experiment}-{Path(HydraConfig.get().sweep.dir).name}"
    except Exception:
        return str(cfg.experiment)


class WandbTracker(CsvTracker):
    def __init__(self, cfg: DictConfig, key: str, folder: Path):
        super().__init__(folder)
        import wandb

        from .keys import semantic_config

        wandb_dir = Path(cfg.paths.outputs) / "wandb"
        wandb_dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=cfg.logger.project, group=sweep_group(cfg), job_type="train", name=key,
            config={**semantic_config(cfg), "experiment": cfg.experiment, "key": key},
            dir=str(wandb_dir), mode=wandb_mode(cfg.logger.mode), reinit="finish_previous",
        )

    def finish(self, record: dict) -> None:
        super().finish(record)
        curves = record.get("curves") or {}
        for i, step in enumerate(curves.get("step", [])):
            row = {}
            for name, series in curves.items():
                if name != "step":
                    vals = series[i]
                    row[f"{name}/mean"] = sum(vals) / len(vals)
                    row.update({f"{name}/seed{s}": v for s, v in enumerate(vals)})
            self.run.log(row, step=step)
        self.run.summary["status"] = record["status"]
        if record.get("reason"):
            self.run.summary["reason"] = record["reason"]
        for name, vals in (record.get("metrics") or {}).items():
            self.run.summary[f"final/{name}/mean"] = sum(vals) / len(vals)
        self.run.finish()


def make_tracker(cfg: DictConfig, key: str, folder: Path):
    if cfg.logger.name == "wandb":
        return WandbTracker(cfg, key, folder)
    if cfg.logger.name == "csv":
        return CsvTracker(folder)
    raise ValueError(f"logger.name must be csv or wandb, got {cfg.logger.name!r}")
