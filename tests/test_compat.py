"""Private SQLAlchemy and Alembic names are used in ``snowshard/_compat.py`` and nowhere else.

The one private redis-py name lives in ``snowshard/workers/_redis_compat.py`` (the Redis
lease and issuer do not import SQLAlchemy), which imports neither package.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMPAT = ROOT / "snowshard" / "_compat.py"
REDIS_COMPAT = ROOT / "snowshard" / "workers" / "_redis_compat.py"
CHECKED = sorted(
    path
    for folder in ("snowshard", "migrations", "examples", "benchmarks")
    for path in (ROOT / folder).rglob("*.py")
    if path not in (COMPAT, REDIS_COMPAT)
)
FOREIGN = ("sqlalchemy", "alembic")
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_private_names() -> set[str]:
    """Every ``_name`` snowshard defines: functions, classes, names, ``self._x`` attributes."""
    names: set[str] = set()
    for path in (ROOT / "snowshard").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return {name for name in names if _private(name)}


OWN = _own_private_names()


def _violations(source: str, name: str) -> Iterator[str]:
    for node in ast.walk(ast.parse(source, name)):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top in FOREIGN:
                if any(_private(part) for part in node.module.split(".")):
                    yield f"{where}: imports private module {node.module}"
                for alias in node.names:
                    if _private(alias.name):
                        yield f"{where}: imports private {node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in FOREIGN and any(_private(part) for part in parts):
                    yield f"{where}: imports private module {alias.name}"
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if node.attr not in OWN and node.attr not in NAMEDTUPLE_API:
                yield f"{where}: uses private attribute .{node.attr}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and node.args[1].value not in OWN
        ):
            yield f"{where}: uses private attribute {node.args[1].value!r} by name"


@pytest.mark.parametrize("path", CHECKED, ids=[str(p.relative_to(ROOT)) for p in CHECKED])
def test_no_private_sqlalchemy_or_alembic_name_outside_compat(path: Path) -> None:
    """The module reaches no private SQLAlchemy/Alembic name (those live in _compat)."""
    assert list(_violations(path.read_text(), str(path.relative_to(ROOT)))) == []


def test_checker_catches_a_private_attribute() -> None:
    """The checker flags ``statement._limit`` and ``from sqlalchemy.sql import _typing``."""
    source = "from sqlalchemy.sql import _typing\ndef f(statement):\n    return statement._limit\n"
    found = list(_violations(source, "probe.py"))
    assert len(found) == 2
    assert "private attribute ._limit" in found[1]


def test_checker_catches_a_private_attribute_read_by_name() -> None:
    """The checker flags ``getattr(s, "_limit", None)`` and ``hasattr(s, "_with_options")``."""
    source = 'def f(s):\n    return getattr(s, "_limit", None), hasattr(s, "_with_options")\n'
    found = list(_violations(source, "probe.py"))
    assert [f.split(": ", 1)[1] for f in found] == [
        "uses private attribute '_limit' by name",
        "uses private attribute '_with_options' by name",
    ]


@pytest.mark.parametrize("path", [COMPAT, REDIS_COMPAT], ids=["_compat", "_redis_compat"])
def test_every_compat_helper_names_the_versions_that_need_it(path: Path) -> None:
    """Each public helper in a compat module has a docstring naming the versions it is for."""
    tree = ast.parse(path.read_text())
    helpers = [
        node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not _private(node.name)
    ]
    assert helpers
    for node in helpers:
        doc = ast.get_docstring(node) or ""
        assert "version" in doc or "Alembic 1." in doc, node.name


def test_the_redis_compat_module_imports_no_sqlalchemy_or_alembic() -> None:
    """_redis_compat holds private redis-py names only: it imports no SQLAlchemy or Alembic."""
    tree = ast.parse(REDIS_COMPAT.read_text())
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0] for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not imported & set(FOREIGN)

