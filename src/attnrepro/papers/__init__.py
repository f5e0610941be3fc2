"""The papers: one package each, holding its config schemas, task, models, problem, theory curves
and figures. A paper package's ``__init__`` declares, without importing anything:

  TASKS   {task.name: module}   the module's build(task, model, train, gens) -> (problem, derived)
  SOLVERS {model.name: module}  models solved, not trained: the module's fit(cfg) -> record fields
  CONFIG  module                 the config schemas: SCHEMAS, checks(cfg, need), RESOLVERS
  FIGURES (module, ...)          figure modules; importing one registers its FigureSpec
  THEORY  module or None         the theory curves: CURVES (jobs.theory runs them)

A problem is data + model + objective + metrics, in plain torch, replicated over seeds, with the
interface lit.replica.ReplicaModule uses:
  accumulate(backward) -> (R,) training loss; calls backward(loss.sum()) (maybe per chunk)
  evaluate() -> {name: (R,) tensor}, the metrics logged along training and at the end
  arrays() -> {name: tensor}, optional per-replica arrays saved in the record

A third paper is one more package here, named in PACKAGES.
"""

from __future__ import annotations

import importlib
from types import ModuleType

PACKAGES = ("sparse_xor", "tied_attention")


def packages() -> list[ModuleType]:
    return [importlib.import_module(f"{__name__}.{name}") for name in PACKAGES]


def submodule(package: ModuleType, name: str) -> ModuleType:
    return importlib.import_module(f"{package.__name__}.{name}")


def compute_module(task_name: str, model_name: str) -> str:
    """The module that computes a job: the model's solver if it has one, else the task's problem."""
    for package in packages():
        if model_name in getattr(package, "SOLVERS", {}):
            return f"{package.__name__}.{package.SOLVERS[model_name]}"
    for package in packages():
        if task_name in package.TASKS:
            return f"{package.__name__}.{package.TASKS[task_name]}"
    raise ValueError(f"no problem for task.name={task_name!r}")


def builder(task_name: str):
    """The build(task, model, train, gens) -> (problem, derived) function of a task."""
    return importlib.import_module(compute_module(task_name, "")).build


def config_modules() -> list[ModuleType]:
    return [submodule(package, package.CONFIG) for package in packages()]


def figure_modules() -> list[str]:
    return [f"{package.__name__}.{name}" for package in packages() for name in package.FIGURES]


def theory_curves() -> list:
    """Every paper's theory curves (papers without theory contribute none)."""
    return [curve for package in packages() if package.THEORY
            for curve in submodule(package, package.THEORY).CURVES]
