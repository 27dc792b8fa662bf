"""The type an expression has on one dialect, known by name before any connection exists.

A merge plans a statement for the dialect of the databases it reads (``"postgresql"``,
``"mysql"``...), and must see the type each value has there: a ``with_variant()`` type
picks its variant, a ``TypeDecorator`` its implementation for that dialect.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy.dialects import registry
from sqlalchemy.engine import Dialect
from sqlalchemy.engine.default import DefaultDialect
from sqlalchemy.types import TypeDecorator

from snowshard._compat import variant_for

__all__ = ["dialect_named", "type_for"]


@cache
def dialect_named(name: str) -> Dialect:
    """A dialect object of ``name`` for reading types (its driver is never imported)."""
    try:
        found: Dialect = registry.load(name)()
    except Exception:  # noqa: BLE001 - an unknown name: types as SQLAlchemy's defaults
        found = DefaultDialect()
    return found


def type_for(type_: Any, dialect: str) -> Any:
    """``type_`` as ``dialect`` has it: its variant there, a TypeDecorator's implementation."""
    type_ = variant_for(type_, dialect)
    while isinstance(type_, TypeDecorator):
        type_ = variant_for(type_.load_dialect_impl(dialect_named(dialect)), dialect)
    return type_
