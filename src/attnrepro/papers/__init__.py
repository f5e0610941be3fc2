"""The papers: one package each, holding its config schemas, task, models, problem, theory curves
and figures. A paper package's ``__init__`` declares, without importing anything:

  PROBLEMS {task.name: module}  the task's problem module: build(task, model, train, gens) -> (problem, derived)
  SOLVERS {model.family: module}  optional: models solved, not trained: the module's fit(cfg) -> record fields
  CONFIG  "config"               the config schemas module: SCHEMAS, checks(cfg, need), RESOLVERS
  FIGURES (module, ...)          figure modules; importing one registers its FigureSpec
  THEORY  module or None         the theory curves: CURVES (jobs.theory runs them)
  THEORY_SETTINGS module         optional: its SETTINGS, a dataclass whose fields join conf/theory.yaml's top
                                 level (config.theory.theory_config), the settings its curves read
  COMMANDS {command: module}     optional: `attnrepro <command>` runs the module's main(argv) -> int, its
                                 docstring the help (cli.py)
  TESTS   (path, ...)            its numerical tests, paths relative to the repository's tests/ (the
                                 in-tree papers' are in IN_TREE_TESTS below; a package's own TESTS wins), or,
                                 for a paper installed from outside, relative to its own package folder

A problem is data + model + objective + metrics, in plain torch, replicated over seeds, with the
interface lit.replica.ReplicaModule uses:
  accumulate(backward) -> (R,) training loss; calls backward(loss.sum()) (maybe per chunk)
  evaluate() -> {name: (R,) tensor}, the metrics logged along training and at the end
  arrays() -> {name: tensor}, per-replica arrays saved in the record ({} when none: jobs.fit calls it)

``packages()`` checks every package against this contract when it loads them, and
``config_modules()`` every config module, raising one PaperContractError that names the package
and what it lacks; ``check_registry()`` also checks that each declared test file exists and holds a
test (tests/test_registry.py; skipped in an installed wheel, which has no tests/).

A paper registers in one of two ways (docs/adding_a_paper.md): a package here, named in PACKAGES, or any
installed package that names itself in the entry point group ENTRY_POINT_GROUP ("attnrepro.papers"; the
value is the package's module name), with no edit of attnrepro. Such an outside paper keeps its Hydra
options and experiments in <package>/conf/ (added to Hydra's search path: hydra_plugins.attnrepro_papers),
its reference claims in <package>/reference/claims_<profile>.csv, and its tests in its own folder.
`attnrepro new-paper NAME` writes one. This module imports no other attnrepro module but
attnrepro.locations (paths only; it is no provenance root).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import re
from pathlib import Path
from types import ModuleType

from attnrepro.locations import CONF_DIR, TESTS_DIR  # conf/; the repository's tests/ (None in an installed wheel)

PACKAGES = ("sparse_xor", "tied_attention")
ENTRY_POINT_GROUP = "attnrepro.papers"  # installed papers: entry point value = the paper package's module name

# The numerical tests of the in-tree papers (paths relative to tests/), kept here so that their
# packages stay as they are; a new paper declares TESTS in its own __init__, which takes precedence.
IN_TREE_TESTS = {
    "sparse_xor": ("test_sparse_xor.py", "test_kparity.py", "test_standard_form.py", "test_sample_trained.py"),
    "tied_attention": ("test_tied_attention.py", "test_psd_exact_fit.py", "test_state_evolution.py",
                       "test_direct_state_evolution.py"),
}


class PaperContractError(TypeError):
    """A paper package (or its config module) lacks what the pipeline reads from it."""


def _names(v) -> bool:
    return isinstance(v, (tuple, list)) and all(isinstance(x, str) and x for x in v)


def _name_map(v) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(m, str) and k and m for k, m in v.items())


def _test_paths(v) -> bool:
    return (_names(v) and len(v) > 0
            and all(p.endswith(".py") and not p.startswith("/") and ".." not in Path(p).parts for p in v))


# attribute -> (what it must be, its test, whether it must be there)
CONTRACT = {
    "PROBLEMS": ("a dict {task.name: the name of its problem module}", _name_map, True),
    "SOLVERS": ("a dict {model.family: module name}", _name_map, False),
    "CONFIG": ('"config" (jobs.grid hashes <package>/config.py for its cache)', lambda v: v == "config", True),
    "FIGURES": ("a tuple of figure module names", _names, True),
    "THEORY": ("a module name or None", lambda v: v is None or isinstance(v, str) and bool(v), True),
    "TESTS": ("a non-empty tuple of test files, relative to tests/ (an installed paper: to its package folder)",
              _test_paths, True),
    "THEORY_SETTINGS": ("a module name (its SETTINGS: the paper's entries of conf/theory.yaml)",
                        lambda v: isinstance(v, str) and bool(v), False),
    "COMMANDS": ("a dict {command name: module name} (the module's main(argv) -> int)", _name_map, False),
}
CONFIG_CONTRACT = {
    "SCHEMAS": ("a dict {group: {schema name: dataclass}}",
                lambda v: isinstance(v, dict) and all(isinstance(e, dict) for e in v.values()), True),
    "checks": ("a function checks(cfg, need)", callable, True),
    "RESOLVERS": ("a dict {resolver name: function}", lambda v: isinstance(v, dict), True),
}
THEORY_SETTINGS_CONTRACT = {
    "SETTINGS": ("a dataclass whose fields are the paper's entries of conf/theory.yaml (with defaults)",
                 lambda v: isinstance(v, type) and dataclasses.is_dataclass(v), True),
}


def _short(package: ModuleType) -> str:
    return package.__name__.rpartition(".")[2]


def is_external(package: ModuleType) -> bool:
    """Whether the paper was registered through an entry point (not a package of attnrepro.papers)."""
    return not package.__name__.startswith(f"{__name__}.")


def package_dir(package: ModuleType) -> Path:
    """The folder of a paper package (its conf/, reference/ and tests, for an installed paper)."""
    return Path(package.__file__).resolve().parent


def tests_of(package: ModuleType):
    """The package's declared numerical tests: its TESTS, else its IN_TREE_TESTS entry (None: none)."""
    return getattr(package, "TESTS", None if is_external(package) else IN_TREE_TESTS.get(_short(package)))


def _problems(module: ModuleType, contract: dict, values: dict) -> list[str]:
    """'missing A (what), B (what)' and 'C must be what, got value' for a module against a contract;
    values: attribute values found elsewhere (TESTS of the in-tree papers)."""
    missing, wrong = [], []
    for attr, (what, ok, required) in contract.items():
        if attr not in values and not hasattr(module, attr):
            if required:
                missing.append(f"{attr} ({what})")
            continue
        value = values[attr] if attr in values else getattr(module, attr)
        if not ok(value):
            wrong.append(f"{attr} must be {what}, got {value!r}")
    return ([f"missing {', '.join(missing)}"] if missing else []) + wrong


def contract_errors(package: ModuleType) -> list[str]:
    """What a paper package's __init__ lacks or gets wrong (empty: it meets the contract)."""
    declared = tests_of(package)
    return _problems(package, CONTRACT, {} if declared is None else {"TESTS": declared})


def _raise(errors: dict[str, list[str]], what: str = "paper package") -> None:
    if errors:
        raise PaperContractError("; ".join(f"{what} {name}: {', '.join(errs)} (docs/adding_a_paper.md)"
                                           for name, errs in errors.items()))


def _unique(packages: list[ModuleType], attr: str, what: str) -> dict[str, list[str]]:
    """Names declared by more than one package (problem_module and solver_module would take the first
    silently)."""
    owners: dict[str, list[str]] = {}
    for package in packages:
        for name in getattr(package, attr, {}):
            owners.setdefault(name, []).append(package.__name__)
    return {owners[name][-1]: [f"{what} {name!r} is declared by {' and '.join(owners[name])}"]
            for name in owners if len(owners[name]) > 1}


@functools.lru_cache(maxsize=None)
def _entry_points() -> tuple[tuple[str, str, str], ...]:
    """(distribution, entry point name, value) of every installed paper, in order of value, each value once
    (the same distribution found twice on sys.path counts once). Cached: refresh() after installing one."""
    from importlib.metadata import entry_points

    found = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        found.setdefault(ep.value.strip(), (dist.name if dist is not None else "?", ep.name, ep.value.strip()))
    return tuple(found[v] for v in sorted(found))


def refresh() -> None:
    """Forget the installed papers found so far (their entry points are read again on next use)."""
    _entry_points.cache_clear()


def external_modules() -> list[str]:
    """The module names of the papers installed from outside (entry points; nothing imported)."""
    return [value for _, _, value in _entry_points()]


_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _load_external(dist: str, name: str, value: str) -> ModuleType:
    where = f"paper package {value} (entry point {name!r} of distribution {dist}, group {ENTRY_POINT_GROUP})"
    if not _MODULE_NAME.match(value):
        raise PaperContractError(f"{where}: the entry point's value must be a package's module name, "
                                 f"e.g. my_paper, not {value!r} (docs/adding_a_paper.md)")
    if value == __name__ or value.startswith(f"{__name__}."):
        raise PaperContractError(f"{where}: an in-tree paper is named in attnrepro.papers.PACKAGES, not by an "
                                 "entry point (docs/adding_a_paper.md)")
    try:
        return importlib.import_module(value)
    except Exception as e:  # noqa: BLE001 - any failure to import is the package's: one line naming it
        raise PaperContractError(f"{where}: cannot be imported: {type(e).__name__}: {e} "
                                 "(docs/adding_a_paper.md)") from e


def conf_files(folder: Path) -> list[str]:
    """The config files of a conf/ folder, relative to it (as Hydra names them: group/option.yaml)."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.yaml"))


def external_errors(package: ModuleType) -> list[str]:
    """What an installed paper lacks besides the __init__ contract: being a package with conf/experiment/*.yaml."""
    if not hasattr(package, "__path__") or not getattr(package, "__file__", None):
        return ["is a module, not a package with a folder (its conf/ and reference/ live in that folder)"]
    conf = package_dir(package) / "conf"
    if not any((conf / "experiment").glob("*.yaml")):
        return [f"missing conf/experiment/*.yaml in {package_dir(package)} (its experiments; the package data must "
                "be installed with it)"]
    return []


def _clashes(loaded: list[ModuleType]) -> dict[str, list[str]]:
    """Config files an installed paper shares with attnrepro's conf/ or another paper's (Hydra would read the
    first on the search path and silently ignore the other)."""
    owners: dict[str, list[str]] = {rel: ["attnrepro"] for rel in conf_files(CONF_DIR)}
    for package in loaded:
        if is_external(package):
            for rel in conf_files(package_dir(package) / "conf"):
                owners.setdefault(rel, []).append(package.__name__)
    out: dict[str, list[str]] = {}
    for rel, where in owners.items():
        if len(where) > 1:
            out.setdefault(where[-1], []).append(f"conf/{rel} is also in {' and '.join(where[:-1])}")
    return out


_checked: tuple[ModuleType, ...] = ()  # the packages last found to meet the contract (held: no id reuse)


def packages() -> list[ModuleType]:
    """The paper packages of PACKAGES, then those installed with an entry point (ENTRY_POINT_GROUP), checked
    against the contract (PaperContractError) when first loaded, and again whenever the list or a package
    object changes."""
    global _checked
    loaded = [importlib.import_module(f"{__name__}.{name}") for name in PACKAGES]
    loaded += [_load_external(*ep) for ep in _entry_points()]
    if len(loaded) != len(_checked) or any(a is not b for a, b in zip(loaded, _checked)):
        _raise({p.__name__: errs for p in loaded
                if (errs := contract_errors(p) + (external_errors(p) if is_external(p) else []))})
        _raise({**_unique(loaded, "PROBLEMS", "task.name"), **_unique(loaded, "SOLVERS", "model.family")})
        _raise(_clashes(loaded))
        _checked = tuple(loaded)
    return loaded


def external_packages() -> list[ModuleType]:
    """The papers installed from outside (checked, as packages())."""
    return [p for p in packages() if is_external(p)]


def conf_dirs() -> list[Path]:
    """attnrepro's conf/, then each installed paper's conf/ (Hydra's search path, in this order)."""
    return [CONF_DIR, *(package_dir(p) / "conf" for p in external_packages())]


def experiment_files() -> dict[str, Path]:
    """Every experiment's file, by name: conf/experiment/ of attnrepro and of each installed paper."""
    return {p.stem: p for folder in conf_dirs() for p in sorted((folder / "experiment").glob("*.yaml"))}


def reference_files(profile: str) -> list[Path]:
    """The installed papers' reference claims tables of a profile that exist (<package>/reference/)."""
    paths = [package_dir(p) / "reference" / f"claims_{profile}.csv" for p in external_packages()]
    return [p for p in paths if p.is_file()]


def owner(module: str) -> ModuleType | None:
    """The paper package a module belongs to (None: none)."""
    return next((p for p in packages() if module == p.__name__ or module.startswith(f"{p.__name__}.")), None)


def _familyless(models: dict) -> list[str]:
    """The model schemas without a field ``family: str = "<family>"`` (it was ``name`` before 2026-12-04)."""
    def family(cls) -> object:
        fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
        return fields["family"].default if "family" in fields else None

    return [f"model schema {schema} has no field `family: str = \"<its family>\"` (what build and SOLVERS dispatch "
            f"on; named `name` before record layout 2)" for schema, cls in models.items()
            if not isinstance(family(cls), str)]


def submodule(package: ModuleType, name: str) -> ModuleType:
    return importlib.import_module(f"{package.__name__}.{name}")


def solver_module(model_family: str) -> str | None:
    """The module that solves a model (a paper's SOLVERS), or None: the model is trained."""
    for package in packages():
        if model_family in getattr(package, "SOLVERS", {}):
            return f"{package.__name__}.{package.SOLVERS[model_family]}"
    return None


def problem_module(task_name: str) -> str:
    """The module whose build(task, model, train, gens) -> (problem, derived) makes a task's trained problem."""
    for package in packages():
        if task_name in package.PROBLEMS:
            return f"{package.__name__}.{package.PROBLEMS[task_name]}"
    raise ValueError(f"no problem for task.name={task_name!r}")


def builder(task_name: str):
    """The build(task, model, train, gens) -> (problem, derived) function of a task."""
    return importlib.import_module(problem_module(task_name)).build


def config_modules() -> list[ModuleType]:
    """Every paper's config module, each checked (SCHEMAS, checks, RESOLVERS; every model schema a dataclass
    with a str default ``family``, what build and SOLVERS dispatch on; a schema name per group declared by
    one paper only: Hydra's ConfigStore would keep the last silently)."""
    modules = [submodule(package, package.CONFIG) for package in packages()]
    errors = {m.__name__: errs for m in modules if (errs := _problems(m, CONFIG_CONTRACT, {}))}
    _raise(errors, "paper config module")
    _raise({m.__name__: errs for m in modules if (errs := _familyless(m.SCHEMAS.get("model", {})))},
           "paper config module")
    owners: dict[tuple[str, str], list[str]] = {}
    for m in modules:
        for group, entries in m.SCHEMAS.items():
            for name in entries:
                owners.setdefault((group, name), []).append(m.__name__)
    _raise({where[-1]: [f"schema {group}/{name} is declared by {' and '.join(where)}"]
            for (group, name), where in owners.items() if len(where) > 1}, "paper config module")
    return modules


def figure_modules() -> list[str]:
    return [f"{package.__name__}.{name}" for package in packages() for name in package.FIGURES]


def theory_curves() -> list:
    """Every paper's theory curves (papers without theory contribute none)."""
    return [curve for package in packages() if package.THEORY
            for curve in submodule(package, package.THEORY).CURVES]


def theory_settings_modules() -> list[ModuleType]:
    """Every paper's theory settings module (THEORY_SETTINGS; papers without declare none), each checked
    (SETTINGS a dataclass)."""
    modules = [submodule(p, p.THEORY_SETTINGS) for p in packages() if getattr(p, "THEORY_SETTINGS", None)]
    _raise({m.__name__: errs for m in modules if (errs := _problems(m, THEORY_SETTINGS_CONTRACT, {}))},
           "paper theory settings module")
    return modules


def declared_test_errors(package: ModuleType, tests_dir: Path | None = TESTS_DIR) -> list[str]:
    """The package's declared test files that do not exist under tests_dir (an installed paper: its own
    folder) or define no test function (none checked without a tests_dir: an installed wheel has no tests/)."""
    if is_external(package):
        tests_dir = package_dir(package)
    if tests_dir is None:
        return []
    errors = []
    for rel in tests_of(package) or ():
        path = Path(tests_dir) / rel
        if not path.is_file():
            errors.append(f"declared test {rel} does not exist in {tests_dir}")
        elif not re.search(r"^\s*(async\s+)?def test_", path.read_text(), re.M):
            errors.append(f"declared test {rel} has no `def test_`")
    return errors


def check_registry(tests_dir: Path | None = TESTS_DIR) -> None:
    """The whole contract: every package and config module (as packages() and config_modules()), and
    every declared test file under tests_dir; one PaperContractError naming each package at fault."""
    loaded = packages()
    config_modules()
    _raise({p.__name__: errs for p in loaded if (errs := declared_test_errors(p, tests_dir))})
