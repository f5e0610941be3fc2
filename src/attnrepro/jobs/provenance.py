"""Which code made a record: the commit, and a fingerprint of the modules its numbers depend on.

A job names the modules that compute it (its roots: a paper's problem, a theory curve's module, a
derived analysis). Their closure under ``import`` (static: every import statement of the module,
also those inside functions) over attnrepro's own modules and those of the papers installed from
outside (attnrepro.papers.external_modules: followed like attnrepro's), less the machinery that decides no
number (jobs/, config/, report/, stats/, commands/, figure modules, the papers' registries in their
``__init__``) unless named as a root, is
fingerprinted: sha256 over each module's name and syntax tree with docstrings removed. Editing
a comment, a docstring or the report changes no fingerprint; editing a problem, model or theory
function does, and the records it made are then stale.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import subprocess
from pathlib import Path
from typing import Iterable

from attnrepro.locations import CHECKOUT

SRC = Path(__file__).resolve().parents[2]  # the folder holding attnrepro: src/, or site-packages
PACKAGE = "attnrepro"
# modules that decide no number: never followed unless they are a job's root
NOT_FOLLOWED = ("attnrepro.jobs", "attnrepro.config", "attnrepro.report", "attnrepro.stats", "attnrepro.commands",
                "attnrepro.cli")


@functools.lru_cache(maxsize=None)
def _external() -> tuple[str, ...]:
    """The packages of the papers installed from outside (entry points), e.g. ("my_paper",)."""
    from attnrepro.papers import external_modules

    return tuple(external_modules())


def _followed_top(name: str) -> bool:
    """Whether a module is attnrepro's or belongs to a paper installed from outside."""
    return name.split(".")[0] == PACKAGE or any(name == p or name.startswith(f"{p}.") for p in _external())


def module_file(name: str) -> Path | None:
    """The source file of a module (package: its __init__.py); None when there is none. attnrepro's
    modules are found without importing them."""
    if name.split(".")[0] != PACKAGE:
        import importlib.util

        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None
    base = SRC.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _is_figure_module(name: str) -> bool:
    parts = name.split(".")
    if len(parts) > 3 and parts[1] == "papers" and parts[3].startswith("figure"):
        return True
    return any(name.startswith(f"{p}.") and name[len(p) + 1:].startswith("figure") for p in _external())


def _is_registry(name: str) -> bool:
    """attnrepro.papers and a paper package's __init__: lists of names (PACKAGES, PROBLEMS, FIGURES), no numbers."""
    parts = name.split(".")
    return parts[:2] == [PACKAGE, "papers"] and len(parts) <= 3 or name in _external()


def _imports(name: str, tree: ast.AST) -> set[str]:
    """The attnrepro modules (and installed papers' modules) a module's import statements name (relative ones
    resolved)."""
    package = name if module_file(name).name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`
    return {m for m in out if _followed_top(m) and module_file(m) is not None}


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


@functools.lru_cache(maxsize=None)
def _parsed(name: str) -> tuple[str, frozenset[str]]:
    """(canonical dump without docstrings, imported attnrepro modules) of one module."""
    tree = ast.parse(module_file(name).read_text())
    imports = frozenset(_imports(name, tree))
    return ast.dump(_strip_docstrings(tree), include_attributes=False), imports


def closure(roots: Iterable[str], skip: tuple[str, ...] = NOT_FOLLOWED) -> list[str]:
    """The roots and every attnrepro module they import, transitively, but for modules under ``skip``
    and figure modules that are no root (see the module docstring), sorted."""
    roots = list(roots)
    missing = [r for r in roots if module_file(r) is None]
    if missing:
        raise ValueError(f"no such module(s): {missing}")
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for dep in _parsed(name)[1]:
            followed = not skip or not dep.startswith(skip) and not _is_figure_module(dep) and not _is_registry(dep)
            if dep not in seen and (followed or dep in roots):
                todo.append(dep)
    return sorted(seen)


@functools.lru_cache(maxsize=None)
def fingerprint(roots: tuple[str, ...], skip: tuple[str, ...] = NOT_FOLLOWED) -> str:
    """sha256 (16 hex digits) over the name and docstring-free syntax tree of every module of the closure."""
    h = hashlib.sha256()
    for name in closure(roots, skip):
        h.update(name.encode())
        h.update(_parsed(name)[0].encode())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def commit() -> str | None:
    """The checkout's commit, with '+dirty' when src/ has uncommitted changes; None outside git, and in an
    installed wheel (whose site-packages may lie in some other repository)."""
    if CHECKOUT is None:
        return None
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=SRC, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--", str(SRC)], cwd=SRC, capture_output=True,
                               text=True, timeout=10).stdout.strip()
        return sha.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(roots: tuple[str, ...], skip: tuple[str, ...] = NOT_FOLLOWED) -> dict:
    """What a record says about the code that made it."""
    return {"commit": commit(), "fingerprint": fingerprint(tuple(roots), tuple(skip)), "roots": list(roots)}
