"""Job configs as Hydra composes them, composed once per choice of config groups.

Hydra builds a job's config in two steps (ConfigLoaderImpl._load_configuration_impl): it composes the
configs its defaults list chooses (the config group overrides: experiment=..., profile=..., train=...),
then sets the value overrides (task.d=100, model.lam=0.001) on the result
(ConfigLoaderImpl._apply_overrides_to_config). A grid's jobs share a few group choices, so the first step
(0.1-0.4 s a job on 2 cores, more than a small job's training) is done once per choice set, and each job is a
copy of its result with its value overrides set by Hydra's own second step (a few ms).
tests/test_composer.py checks the configs against Hydra's full composition on random jobs of every experiment.
A job whose value overrides Hydra's second step refuses is composed in full, so that its error is Hydra's.
"""

from __future__ import annotations

import copy
from typing import Callable

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from omegaconf import DictConfig


class Composer:
    """compose(overrides) -> the job's config, equal to load(overrides); load composes in full (with Hydra,
    without the hydra node) and is_group(key) says whether a key names a config group."""

    def __init__(self, load: Callable[[list[str]], DictConfig], is_group: Callable[[str], bool]):
        self._load, self._is_group = load, is_group
        self._parser = OverridesParser.create()
        self._bases: dict[tuple[str, ...], DictConfig] = {}

    def __call__(self, overrides: list[str]) -> DictConfig:
        values, groups = [], []
        for o in self._parser.parse_overrides(list(overrides)):
            (values if self._is_value(o) else groups).append(o)
        groups = tuple(o.input_line for o in groups)
        if groups not in self._bases:
            self._bases[groups] = self._load(list(groups))
        cfg = copy.deepcopy(self._bases[groups])
        try:
            ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        except Exception:  # noqa: BLE001 (Hydra's full composition raises its own error for it)
            return self._load(list(overrides))
        return cfg

    def _is_value(self, o: Override) -> bool:
        """A plain `key=value` override of a config value (not a group choice, addition, deletion or sweep)."""
        return (o.type == OverrideType.CHANGE and o.package is None and not o.is_sweep_override()
                and not o.is_hydra_override() and not isinstance(o.value(), dict)
                and not self._is_group(o.key_or_group))
