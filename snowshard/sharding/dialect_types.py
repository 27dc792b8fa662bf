"""The type an expression has on one dialect, known by name before any connection exists.

A merge plans a statement for the dialect of the databases it reads (``"postgresql"``,
``"mysql"``...), and must see the type each value has there: a ``with_variant()`` type
picks its variant, a ``TypeDecorator`` its implementation for that dialect.

The database compares a value by the type it gives the SQL, which SQLAlchemy's type does
not always say (:func:`sql_types`): ``type_coerce()`` renders its expression alone, and an
expression choosing one of several values (``CASE``, ``GREATEST``, ``COALESCE``,
``MIN``...), often untyped, has the type of the values it chooses from.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from sqlalchemy.dialects import registry
from sqlalchemy.engine import Dialect
from sqlalchemy.engine.default import DefaultDialect
from sqlalchemy.sql.elements import BindParameter, Case, Grouping, Label, Null, TypeCoerce
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.sql.selectable import ScalarSelect
from sqlalchemy.types import NullType, TypeDecorator

from snowshard._compat import LabelReference, variant_for

__all__ = [
    "chooses_only",
    "chosen_values",
    "dialect_named",
    "sql_expression",
    "sql_types",
    "type_for",
    "typed_as",
]

CHOOSING = frozenset({"greatest", "least", "ifnull", "coalesce"})
"""Functions whose value is one of their arguments'."""


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


def sql_expression(element: Any) -> Any:
    """``element`` without the labels, parentheses and ``type_coerce()`` around it: the SQL
    whose type the database gives the value."""
    while True:
        if isinstance(element, (Label, Grouping, LabelReference)):
            element = element.element
        elif isinstance(element, TypeCoerce):
            element = element.clause
        else:
            return element


def chosen_values(element: Any) -> list[Any] | None:
    """The values an expression whose value is one of them chooses from, NULLs left out: a
    CASE's results, the arguments of ``GREATEST``, ``LEAST``, ``COALESCE`` and ``IFNULL``,
    ``MIN(x)``'s and ``MAX(x)``'s ``x``, ``NULLIF(x, y)``'s ``x``, a scalar subquery's
    column; None for any other expression."""
    found: list[Any]
    if isinstance(element, Case):
        found = [result for _, result in element.whens] + [element.else_]
    elif isinstance(element, ScalarSelect):
        found = list(element.element.selected_columns)[:1]
    elif isinstance(element, FunctionElement):
        name = str(element.name).lower()
        arguments = list(element.clauses)
        if name in CHOOSING or (name in ("min", "max") and len(arguments) == 1):
            found = arguments
        elif name == "nullif":
            found = arguments[:1]
        else:
            return None
    else:
        return None
    return [value for value in found if not _null(value)]


def _null(element: Any) -> bool:
    """Whether ``element`` is a NULL (``null()``, ``None`` as a value, a CASE without ELSE)."""
    plain = sql_expression(element)
    return (
        plain is None
        or isinstance(plain, Null)
        or (isinstance(plain, BindParameter) and plain.value is None and plain.callable is None)
    )


def chooses_only(element: Any, accepts: Callable[[Any], bool]) -> bool:
    """Whether ``accepts`` takes ``element`` (its SQL: :func:`sql_expression`), or for an
    expression choosing among values (:func:`chosen_values`), every value it chooses from."""
    plain = sql_expression(element)
    chosen = chosen_values(plain)
    if chosen is not None:
        return bool(chosen) and all(chooses_only(value, accepts) for value in chosen)
    return accepts(plain)


def typed_as(element: Any, is_kind: Callable[[Any], bool]) -> bool:
    """Whether the database gives ``element``'s value a type ``is_kind`` accepts (it reads a
    declared SQLAlchemy type): for an expression choosing among values
    (:func:`chosen_values`), when every value it chooses from has one."""
    return chooses_only(element, lambda plain: is_kind(getattr(plain, "type", None)))


def sql_types(element: Any, dialect: str) -> list[Any]:
    """The types ``dialect`` may give the value of ``element`` (for checks refusing a type
    wherever it may be compared): its type there, a ``type_coerce()``'s expression's, and
    for an expression choosing among values (:func:`chosen_values`), theirs."""
    plain = sql_expression(element)
    own = type_for(getattr(plain, "type", None), dialect)
    chosen = chosen_values(plain)
    if chosen is None:
        return [own]
    found = [] if own is None or isinstance(own, NullType) else [own]
    return found + [type_ for value in chosen for type_ in sql_types(value, dialect)]
