"""Where the project's folders are: conf/ (the Hydra config tree), reference/ (the committed claims tables and
sweep_seconds.csv) and tests/.

From a source checkout (an editable install, `pip install -e .` or `make install`, or src/ on the path) they are
the repository's own folders: the folder two levels above this package holds pyproject.toml and conf/, and
edits there take effect at once. From a wheel (`pip install .`) they are the copies packaged inside it,
attnrepro/_data/conf and attnrepro/_data/reference (pyproject.toml, [tool.hatch.build.targets.wheel.force-include]);
such an install has no tests/ (TESTS_DIR is None) and its reference is read-only: refreshing it
(`attnrepro figures refresh_reference=true`) needs a source checkout. Hatchling puts the same copies into an
editable install too; they are not read while the checkout is there.

This module imports nothing from attnrepro.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def _checkout(root: Path) -> Path | None:
    """root when it is the source checkout this package runs from (pyproject.toml and conf/ there), else None."""
    return root if (root / "pyproject.toml").is_file() and (root / "conf" / "config.yaml").is_file() else None


CHECKOUT: Path | None = _checkout(PACKAGE_DIR.parents[1])  # the repository, or None in an installed wheel
DATA_DIR = CHECKOUT or PACKAGE_DIR / "_data"
CONF_DIR = DATA_DIR / "conf"
REFERENCE_DIR = DATA_DIR / "reference"
TESTS_DIR: Path | None = CHECKOUT / "tests" if CHECKOUT and (CHECKOUT / "tests").is_dir() else None
