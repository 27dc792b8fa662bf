"""Import the ID core and fail if any third-party package was loaded with it.

Usage: ``python .ci/core_check.py [--bare-venv]``

Imports every module listed in ``.ci/core_modules.txt`` and exits 1, naming the culprits,
when a top-level module that is neither ``snowshard`` nor part of the standard library
appeared in ``sys.modules`` meanwhile (or when SQLAlchemy, Alembic, click, rich or redis is
loaded at all). ``--bare-venv`` also requires that those packages are not installed, so a
green run proves the core works without them. ``.ci/run`` runs it in the venv without
SQLAlchemy; ``tests/test_import_graph.py`` runs it in the test venv.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

CORE_MODULES_FILE = Path(__file__).resolve().parent / "core_modules.txt"
NAMED = ("sqlalchemy", "alembic", "click", "rich", "redis")
"""The extras' packages that must never come with the core (checked by name too)."""


def core_modules() -> list[str]:
    """The module names listed in ``.ci/core_modules.txt``."""
    lines = (line.split("#", 1)[0].strip() for line in CORE_MODULES_FILE.read_text().splitlines())
    return [line for line in lines if line]


def third_party(names: set[str]) -> list[str]:
    """The top-level names among ``names`` that are neither stdlib nor snowshard."""
    tops = {name.partition(".")[0] for name in names}
    allowed = set(sys.stdlib_module_names) | {"snowshard"}
    return sorted(top for top in tops if top not in allowed)


def main(argv: list[str]) -> int:
    failures: list[str] = []
    if "--bare-venv" in argv:
        installed = [name for name in NAMED if importlib.util.find_spec(name) is not None]
        if installed:
            failures.append(f"installed here, but this venv must not have them: {installed}")
    before = set(sys.modules)
    modules = core_modules()
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as error:
            failures.append(f"import {name}: {type(error).__name__}: {error}")
    loaded = third_party(set(sys.modules) - before)
    if loaded:
        failures.append(f"importing the core loaded third-party modules: {loaded}")
    named = sorted(name for name in NAMED if name in sys.modules)
    if named:
        failures.append(f"an extra's package is in sys.modules: {named}")
    for failure in failures:
        print(f"FAIL {failure}")
    if failures:
        return 1
    print(f"ok   {len(modules)} core modules import with the standard library only")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
