"""PostgreSQL's NaN, compared, grouped and computed by a merge as PostgreSQL does.

PostgreSQL's ``real``, ``double precision`` and ``numeric`` hold ``NaN`` and treat it as a
value: ``NaN = NaN`` is true, NaN sorts after every other number (NULLs still come
after it), ``GROUP BY`` and ``DISTINCT`` make one group of all NaNs, ``max()`` of a set
holding one is NaN, and arithmetic on NaN gives NaN. Python's ``float('nan')`` and
``Decimal('NaN')`` are unequal to themselves, unordered (``Decimal``'s raise on ``<``)
and hashed per object, so a merge comparing them as they are would return more groups,
other orders and other extremes than one table.

On PostgreSQL the merge therefore puts :data:`NAN_FLOAT` or :data:`NAN_DECIMAL` (a
:class:`PostgresNaN`, which compares, hashes and computes as PostgreSQL's NaN) in place of
every NaN before it compares values (:func:`canonical`), and hands out the driver's own
kind of NaN (:func:`restore`). SQLite stores a NaN as NULL and MariaDB/MySQL refuse it, so
only PostgreSQL's merges need this. ``CAST`` of a NaN to an integer raises
:class:`MergedNaNCast`, as PostgreSQL refuses it for one table.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy.types import Float, Numeric, NullType

from snowshard.sharding.dialect_types import sql_types
from snowshard.sharding.errors import ShardingError

__all__ = [
    "NAN_DECIMAL",
    "NAN_FLOAT",
    "MergedNaNCast",
    "PostgresNaN",
    "canonical",
    "canonical_key",
    "may_hold_nan",
    "pg_computed",
    "restore",
]


class MergedNaNCast(ShardingError, ValueError):
    """A merged expression casts PostgreSQL's NaN (or an infinity) to an integer, which
    PostgreSQL refuses for one table too."""


def may_hold_nan(element: Any, dialect: str) -> bool:
    """Whether a merge ordering by ``element`` may meet NaNs: on PostgreSQL, where the
    database may give it a numeric type (:func:`~.dialect_types.sql_types`: behind
    ``type_coerce()``, an untyped ``GREATEST()``) or its type is unknown (an untyped
    ``abs()``)."""
    if dialect != "postgresql":
        return False
    return any(
        t is None or isinstance(t, (Float, Numeric, NullType)) for t in sql_types(element, dialect)
    )


def _is_nan(value: Any) -> bool:
    return isinstance(value, PostgresNaN) or (
        isinstance(value, (float, Decimal)) and value != value
    )


class PostgresNaN:
    """PostgreSQL's NaN: equal to any NaN, greater than every other number, absorbing in
    arithmetic. ``original`` is the NaN the driver returned (``float`` or ``Decimal``)."""

    __slots__ = ("original",)

    def __init__(self, original: Any) -> None:
        self.original = original

    def __repr__(self) -> str:
        return f"PostgresNaN({self.original!r})"

    def __hash__(self) -> int:
        return hash(PostgresNaN)

    def __eq__(self, other: object) -> bool:
        return _is_nan(other)

    def __ne__(self, other: object) -> bool:
        return not _is_nan(other)

    def __lt__(self, other: Any) -> bool:
        return False

    def __le__(self, other: Any) -> bool:
        return _is_nan(other)

    def __gt__(self, other: Any) -> bool:
        return not _is_nan(other)

    def __ge__(self, other: Any) -> bool:
        return True

    def _absorb(self, other: Any) -> PostgresNaN:
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _absorb
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = _absorb

    def __neg__(self) -> PostgresNaN:
        return self


NAN_FLOAT = PostgresNaN(float("nan"))
"""What a ``float`` NaN becomes in a merge on PostgreSQL."""

NAN_DECIMAL = PostgresNaN(Decimal("NaN"))
"""What a ``Decimal`` NaN becomes in a merge on PostgreSQL."""


def canonical(value: Any) -> Any:
    """``value``, or the :class:`PostgresNaN` of its kind if it is a NaN."""
    if isinstance(value, float):
        return NAN_FLOAT if value != value else value
    if isinstance(value, Decimal) and value.is_nan():
        return NAN_DECIMAL
    return value


def is_infinite(value: Any) -> bool:
    """Whether ``value`` is a float or Decimal infinity (PostgreSQL's numeric and float
    ``Infinity``)."""
    if isinstance(value, float):
        return value in (float("inf"), float("-inf"))
    return isinstance(value, Decimal) and value.is_infinite()


def pg_computed(function: Callable[..., Any], *operands: Any) -> Any:
    """``function(*operands)`` as PostgreSQL computes it: NaN (a :class:`PostgresNaN`)
    where it gives NaN, as for ``Infinity - Infinity`` or ``Infinity * 0``, which a float
    gives as ``nan`` and a Decimal refuses."""
    try:
        return canonical(function(*operands))
    except InvalidOperation:
        if not any(is_infinite(operand) for operand in operands):
            raise
        return NAN_DECIMAL


def canonical_key(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``read`` (a row's value, or tuple of values), NaNs made :class:`PostgresNaN`."""

    def key(row: Any) -> Any:
        found = read(row)
        if isinstance(found, tuple):
            return tuple(canonical(v) for v in found)
        return canonical(found)

    return key


def restore(value: Any) -> Any:
    """``value``, or the NaN the driver returned if it is a :class:`PostgresNaN`."""
    return value.original if isinstance(value, PostgresNaN) else value
