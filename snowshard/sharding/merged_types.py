"""What SQLAlchemy's types do to values a merge computes in Python.

A merged aggregate is computed from the values the sources return, as the database would
compute it for one table (:mod:`~snowshard.sharding.arith`); SQLAlchemy then hands that
value out through the column's type, as it does for the column of one table. The helpers
here give a merged value that last step: a float for a type read as floats
(``type_=Float``), a Decimal of the type's scale for a ``Numeric`` the database computed
as a float, on SQLite the type's own result processor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from sqlalchemy import Float, Numeric
from sqlalchemy.dialects import sqlite
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import Label, UnaryExpression
from sqlalchemy.sql.functions import FunctionElement

from snowshard._compat import LabelReference
from snowshard.sharding.arith import scale_of

__all__ = ["numeric_reader", "shown_as", "typed_distinct", "unlabelled"]


def unlabelled(element: Any) -> Any:
    """``element`` without its labels."""
    while isinstance(element, (Label, LabelReference)):
        element = element.element
    return element


def typed_distinct(
    output: Callable[[Any], Any], column: Any, dialect: str
) -> Callable[[Any], Any]:
    """``output``, or for a column that is ``sum``/``avg(DISTINCT x)`` itself, ``output``
    then what SQLAlchemy does to the database's value for the column's type: the merge
    computes that value from the distinct values as the database types it (an integer,
    NUMERIC, DECIMAL or SQLite's REAL), and several such columns of one ``x`` share it
    whatever their types. A type read as floats (``type_=Float``) gives a float; on SQLite
    the type's own result processor runs, as for any column there."""
    plain = unlabelled(column)
    if not (isinstance(plain, FunctionElement) and str(plain.name).lower() in ("sum", "avg")):
        return output
    if not any(
        isinstance(a, UnaryExpression) and a.operator is operators.distinct_op
        for a in plain.clauses
    ):
        return output
    type_ = plain.type
    convert: Callable[[Any], Any] | None = None
    if dialect == "sqlite":
        found = sqlite.dialect()
        convert = type_.dialect_impl(found).result_processor(found, None)
    elif isinstance(type_, (Float, Numeric)) and not type_.asdecimal:  # 2.1: no subclass
        convert = float
    if convert is None:
        return output
    final = convert

    def typed(values: Any) -> Any:
        value = output(values)
        return value if value is None else final(value)

    return typed


_READS_NUMERIC = ("postgresql", "mysql", "mariadb")


def numeric_reader(type_: Any, dialect: str) -> Callable[[Any], Any] | None:
    """What SQLAlchemy's numeric type ``type_`` does to a value PostgreSQL or MariaDB computes
    for it: a float the database computed (a float bound value in the expression) read as
    a Decimal of the type's scale (``Numeric``, PostgreSQL), a Decimal read as a float
    (``Float``). None for other types and dialects."""
    if not isinstance(type_, (Float, Numeric)) or dialect not in _READS_NUMERIC:
        return None
    if not type_.asdecimal:
        return lambda value: float(value) if isinstance(value, Decimal) else value
    if dialect != "postgresql":
        return None
    scale = next((s for s in (type_.decimal_return_scale, type_.scale) if s is not None), 10)
    return lambda value: Decimal(f"{value:.{scale}f}") if isinstance(value, float) else value


def shown_as(value: Any, partial: Iterable[Any]) -> Any:
    """A merged AVG column as SQLAlchemy hands out the sources' own AVGs (``partial``): a
    float where those are floats (an AVG typed ``Float``), a Decimal of their scale where
    those are Decimals made from floats (an AVG typed ``Numeric`` over REAL values)."""
    shown = [v for v in partial if v is not None]
    if value is None or not shown:
        return value
    if isinstance(shown[0], float) and isinstance(value, Decimal):
        return float(value)
    if isinstance(shown[0], Decimal) and isinstance(value, float):
        scale = max(scale_of(v) for v in shown if isinstance(v, Decimal))
        return Decimal(f"{value:.{scale}f}")
    return value
