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

from sqlalchemy import Boolean, Float, Numeric, type_coerce
from sqlalchemy.dialects import sqlite
from sqlalchemy.sql.elements import Label
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import NullType

from snowshard._compat import LabelReference
from snowshard.sharding.analysis import aggregate_function, distinct_arguments
from snowshard.sharding.arith import scale_of
from snowshard.sharding.decorated import reads_stored, stored_reader, stored_type
from snowshard.sharding.dialect_types import dialect_named

__all__ = [
    "converter",
    "is_numeric",
    "is_raw_sum",
    "numeric_reader",
    "raw_helper",
    "read_as",
    "shown_as",
    "typed_distinct",
    "unlabelled",
]


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
    if not distinct_arguments(plain):
        return output
    return read_as(output, plain.type, dialect)


_READS_NUMERIC = ("postgresql", "mysql", "mariadb")


def numeric_reader(type_: Any, dialect: str) -> Callable[[Any], Any] | None:
    """What SQLAlchemy's numeric type ``type_`` does to a value PostgreSQL or MariaDB computes
    for it: a float the database computed (a float bound value in the expression) read as
    a Decimal of the type's scale (``Numeric``, PostgreSQL), a Decimal or an integer read
    as a float (``Float``). None for other types and dialects."""
    if not isinstance(type_, (Float, Numeric)) or dialect not in _READS_NUMERIC:
        return None
    if not type_.asdecimal:
        return lambda value: float(value) if isinstance(value, (int, Decimal)) else value
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


def is_raw_sum(element: Any, dialect: str = "") -> bool:
    """Whether ``element`` is a ``SUM`` whose sources send it raw (:func:`raw_helper`): one of
    a numeric type that SQLAlchemy converts, rounding (a SQLite REAL or a PostgreSQL float8
    read as a Decimal of the type's scale) or losing digits (a NUMERIC read as a float),
    of a TypeDecorator with values of its own (:func:`.decorated.reads_stored`: the
    stored values are added), or a ``Boolean`` (SQLite and MariaDB add the 0s and 1s, and
    SQLAlchemy reads the total as a bool); with a FILTER too."""
    function = aggregate_function(element)
    if not (isinstance(function, FunctionElement) and str(function.name).lower() == "sum"):
        return False
    if distinct_arguments(function):  # merged from its distinct values (typed_distinct)
        return False
    if isinstance(function.type, (Float, Numeric, Boolean)):
        return True
    return reads_stored(function.type, dialect) is not None


def is_numeric(element: Any) -> bool:
    """Whether ``element`` has a numeric type SQLAlchemy converts (``Numeric``, ``Float``)."""
    return isinstance(getattr(element, "type", None), (Float, Numeric))


_RAW_VALUES = (None, "count_distinct")
"""Helper kinds sent raw when numeric: GROUP BY keys, values counted once each."""


def raw_helper(helper: Any, kind: str | None, dialect: str = "") -> Any:
    """A merge helper as the sources send it: a ``SUM`` of :func:`is_raw_sum`, and a
    numeric GROUP BY key (``kind`` None), untyped, so that each arrives as the driver
    returns it; so are the values of ``count(DISTINCT x)`` that the sources group by. The
    merge adds raw sums (rounding each source's sum to the type's scale first would add
    rounding errors: 3.375 + 2.75 read as 3.38 + 2.75 = 6.13, where one table's 6.125
    reads as 6.12), and groups and counts distinct raw values (SQLite tells REALs 0.001
    and 0.002 apart, which a ``Numeric(10, 2)`` reads as 0.00 both)."""
    summed = kind == "sum" and is_raw_sum(helper, dialect)
    if summed or (kind in _RAW_VALUES and is_numeric(helper)):
        return type_coerce(helper, NullType())
    return helper


def converter(type_: Any, dialect: str) -> Callable[[Any], Any] | None:
    """What SQLAlchemy's ``type_`` does to a value the database computed for it on
    ``dialect``: on SQLite the type's result processor, elsewhere :func:`numeric_reader`;
    None where it leaves the value as it is; a Boolean's result processor on every
    dialect; for a TypeDecorator read from stored values (:func:`.decorated.reads_stored`),
    what its implementation's type does, then the decorator
    (:func:`.decorated.stored_reader`)."""
    decorator = reads_stored(type_, dialect)
    if decorator is not None:
        inner = converter(stored_type(decorator, dialect), dialect)
        return stored_reader(decorator, dialect, inner)
    if dialect == "sqlite" or isinstance(type_, Boolean):
        found = sqlite.dialect() if dialect == "sqlite" else dialect_named(dialect)
        processor: Callable[[Any], Any] | None = type_.dialect_impl(found).result_processor(
            found, None
        )
        return processor
    return numeric_reader(type_, dialect)


def read_as(output: Callable[[Any], Any], type_: Any, dialect: str) -> Callable[[Any], Any]:
    """``output`` (a merged raw value) then what SQLAlchemy's ``type_`` does to it on
    ``dialect`` (:func:`converter`)."""
    convert = converter(type_, dialect)
    if convert is None:
        return output
    final = convert

    def read(values: Any) -> Any:
        value = output(values)
        return value if value is None else final(value)

    return read
