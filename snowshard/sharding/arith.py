"""Division and CAST computed in Python exactly as PostgreSQL, MariaDB/MySQL and SQLite do.

A merged aggregate expression (:mod:`~snowshard.sharding.evaluate`) is computed from the
merged values the database driver returns (``int``, ``Decimal``, ``float``), following
the SQL SQLAlchemy renders for the session's dialect:

* ``a / b`` (true division): PostgreSQL runs ``a / CAST(b AS NUMERIC)``, a NUMERIC
  division whose result scale is PostgreSQL's (at least 16 significant digits, never
  less than either operand's scale, rounded half away from zero); MariaDB/MySQL runs
  ``a / b``, a DECIMAL with the scale of ``a`` plus the session's
  ``div_precision_increment`` (4 by default; at most 38), NULL when ``b`` is 0: rounded
  half away from zero, or truncated where the server computes no more digits than it
  shows (:func:`mysql_quotient`); ``AVG`` divides its SUM by its COUNT the same way;
  SQLite runs ``a / (b + 0.0)``, a floating-point division, NULL when ``b`` is 0;
* ``a // b``: on PostgreSQL and SQLite, integers run ``a / b`` (integer division that
  truncates toward zero; PostgreSQL divides NUMERIC values as above); MariaDB/MySQL runs
  ``FLOOR(a / b)`` of the DECIMAL division;
* ``COALESCE(a, b, ...)`` has the common type of its arguments on PostgreSQL and
  MariaDB/MySQL: ``COALESCE(SUM(x), 0)`` is a NUMERIC/DECIMAL 0 (of the sum's scale on
  MariaDB) where the sum is NULL, not the integer 0; SQLite returns the value as it is;
* ``CAST(x AS INTEGER)``: PostgreSQL rounds NUMERIC half away from zero and
  double precision half to even; MariaDB/MySQL rounds half away from zero; SQLite truncates
  toward zero. ``CAST(x AS FLOAT)`` is a float on PostgreSQL and SQLite. Other target
  types are refused.

Any float operand makes the division a floating-point one, as on each database. Division
by zero on PostgreSQL raises :class:`MergedDivisionByZero`, as the database would.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, ROUND_FLOOR, ROUND_HALF_UP, Context, Decimal
from typing import Any, Optional

from sqlalchemy import types as sqltypes
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import (
    BinaryExpression,
    BindParameter,
    Cast,
    ColumnClause,
    Grouping,
    Label,
)
from sqlalchemy.sql.functions import FunctionElement

from snowshard.sharding.errors import ShardingError

__all__ = [
    "DIALECTS",
    "DIV_PRECISION_INCREMENT",
    "EXACT",
    "Division",
    "MergedDivisionByZero",
    "cast_function",
    "coalesce_function",
    "division_function",
    "integer_average",
    "integer_sum",
    "mysql_quotient",
    "numeric_average",
    "raw_average",
    "scale_of",
]

DIALECTS = frozenset({"postgresql", "mysql", "mariadb", "sqlite"})
"""Dialects whose division and CAST the merge reproduces."""

_PG_MIN_SIG_DIGITS = 16
_PG_MAX_SCALE = 1000
EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)
"""Decimal arithmetic without rounding, as NUMERIC/DECIMAL add and multiply: Python's
default context keeps 28 digits, and would round a merged SUM of large NUMERICs."""
DIV_PRECISION_INCREMENT = 4
"""MariaDB's and MySQL's default ``div_precision_increment``."""
_MYSQL_MAX_SCALE = 38
_DIGITS_PER_WORD = 9

Refuse = Callable[[Any, str], Exception]


class MergedDivisionByZero(ShardingError, ZeroDivisionError):
    """A division by zero in an expression over merged aggregates, on a database (PostgreSQL)
    that raises an error for it instead of returning NULL."""


def _scale(value: Decimal) -> int:
    exponent = value.as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0


def _unscaled(value: Any, scale: int) -> int:
    """``value * 10**scale`` as an exact integer (``value`` has at most ``scale`` decimals)."""
    return int(EXACT.scaleb(Decimal(value), scale))


def _shifted(integer: int, scale: int) -> Decimal:
    """``integer * 10**-scale``, exactly, with ``scale`` decimals."""
    return EXACT.scaleb(Decimal(integer), -scale)


def _round_half_away(numerator: int, denominator: int) -> int:
    quotient, remainder = divmod(abs(numerator), abs(denominator))
    if 2 * remainder >= abs(denominator):
        quotient += 1
    return quotient if (numerator < 0) == (denominator < 0) else -quotient


def _integer_terms(a: Decimal, b: Decimal, scale: int) -> tuple[int, int]:
    """Integers whose quotient is ``a / b * 10**scale``."""
    digits = max(_scale(a), _scale(b))
    return _unscaled(a, digits) * 10**scale, _unscaled(b, digits)


def _decimal_quotient(a: Any, b: Any, scale: int) -> Decimal:
    """``a / b`` rounded half away from zero to ``scale`` decimals, computed exactly."""
    numerator, denominator = _integer_terms(Decimal(a), Decimal(b), scale)
    return _shifted(_round_half_away(numerator, denominator), scale)


def _words(digits: int) -> int:
    """The decimal digits of the 9-digit words that hold ``digits`` digits."""
    return -(-digits // _DIGITS_PER_WORD) * _DIGITS_PER_WORD


def mysql_quotient(a: Any, b: Any, increment: int = DIV_PRECISION_INCREMENT) -> Decimal | None:
    """``a / b`` of DECIMALs as MariaDB and MySQL compute it (NULL for ``b`` 0), under
    ``div_precision_increment`` ``increment``.

    The result shows the scale of ``a`` plus ``increment``, at most 38. The server divides
    in words of 9 digits, computing as many fraction digits as the words of both
    operands' fractions plus those of the increment they leave over; it rounds that
    quotient, truncated, half away from zero to the scale shown. Where it computed no more
    digits than it shows (integers under an increment of 0 or 9, a scale of 5 under the
    default 4) the quotient is therefore truncated: ``5 / 2`` is 2 under 0, and
    ``0.00002 / 3`` is 0.000006666 under 4."""
    if b == 0:
        return None
    a, b = Decimal(a), Decimal(b)
    scale_a, scale_b = _scale(a), _scale(b)
    shown = min(scale_a + increment, _MYSQL_MAX_SCALE)
    words_a, words_b = _words(scale_a), _words(scale_b)
    left = max(0, increment - (words_a - scale_a) - (words_b - scale_b))
    computed = _words(words_a + words_b + left)
    if computed > shown:
        return _decimal_quotient(a, b, shown)
    numerator, denominator = _integer_terms(a, b, computed)
    quotient = abs(numerator) // abs(denominator)  # truncated toward zero
    if (numerator < 0) != (denominator < 0):
        quotient = -quotient
    return _shifted(quotient * 10 ** (shown - computed), shown)


def _pg_weight(value: Decimal) -> tuple[int, int]:
    """PostgreSQL's weight and first base-10000 digit of a NUMERIC value."""
    if value == 0:
        return 0, 0
    magnitude = abs(value)
    weight = magnitude.adjusted() // 4
    return weight, int(EXACT.scaleb(magnitude, -4 * weight))


def _by_zero(a: Any, b: Any, dialect: str) -> None:
    """What dividing ``a`` by a zero ``b`` gives: PostgreSQL raises, the others give NULL."""
    if dialect == "postgresql":
        raise MergedDivisionByZero(
            f"division by zero in a merged expression ({a} / {b}): PostgreSQL raises an "
            "error here; guard the divisor, e.g. with NULLIF(divisor, 0)"
        )
    return None


def _pg_numeric_divide(a: Decimal, b: Decimal) -> Decimal:
    if b == 0:
        _by_zero(a, b, "postgresql")
    if a.is_infinite() or b.is_infinite():  # PostgreSQL 14's numeric infinities
        if a.is_infinite() and b.is_infinite():
            return Decimal("NaN")
        if b.is_infinite():
            return Decimal(0)
        return a if b > 0 else -a
    weight_a, first_a = _pg_weight(a)
    weight_b, first_b = _pg_weight(b)
    weight = weight_a - weight_b - (1 if first_a <= first_b else 0)
    scale = max(_PG_MIN_SIG_DIGITS - weight * 4, _scale(a), _scale(b), 0)
    return _decimal_quotient(a, b, min(scale, _PG_MAX_SCALE))


def numeric_average(total: Any, count: int) -> Decimal:
    """PostgreSQL's AVG of integers or NUMERIC values whose sum is ``total``: their NUMERIC
    sum divided by their count, with the scale of a NUMERIC division."""
    return _pg_numeric_divide(Decimal(total), Decimal(count))


def _decimal_sum(argument: Any, dialect: str) -> bool:
    """Whether ``dialect`` sums the integers ``argument`` into a DECIMAL: always on
    MariaDB/MySQL, a bigint's on PostgreSQL (smaller integers sum into a bigint), never on
    SQLite."""
    if dialect in ("mysql", "mariadb"):
        return True
    return dialect == "postgresql" and isinstance(
        getattr(argument, "type", None), sqltypes.BigInteger
    )


def integer_sum(total: int, argument: Any, dialect: str) -> Any:
    """``SUM`` of integers ``argument`` whose exact sum is ``total``, typed as ``dialect``
    types it (:func:`_decimal_sum`)."""
    return Decimal(total) if _decimal_sum(argument, dialect) else total


def integer_average(
    total: int, count: int, dialect: str, increment: int = DIV_PRECISION_INCREMENT
) -> Any:
    """``AVG`` of ``count`` integers summing to ``total``, as ``dialect`` computes it: a
    NUMERIC division on PostgreSQL, a DECIMAL division under ``div_precision_increment``
    ``increment`` on MariaDB/MySQL (:func:`mysql_quotient`), a float on SQLite."""
    if dialect == "postgresql":
        return numeric_average(total, count)
    if dialect in ("mysql", "mariadb"):
        return mysql_quotient(total, count, increment)
    return total / count


def raw_average(
    total: Any, count: int, dialect: str, increment: int = DIV_PRECISION_INCREMENT
) -> Any:
    """``AVG`` of ``count`` values whose ``SUM`` is ``total`` (as the driver returns a SUM:
    read with no SQLAlchemy type), as the driver returns that AVG: a float over floats and
    always on SQLite (whose AVG is REAL), else a NUMERIC division on PostgreSQL and a
    DECIMAL division under ``div_precision_increment`` ``increment`` on MariaDB/MySQL
    (:func:`mysql_quotient`)."""
    if isinstance(total, float) or dialect not in ("postgresql", "mysql", "mariadb"):
        return float(total) / count
    if dialect == "postgresql":
        return numeric_average(total, count)
    return mysql_quotient(total, count, increment)


def scale_of(value: Decimal) -> int:
    """The decimals of a Decimal (0 for an integer value, NaN and infinities)."""
    return _scale(value)


def _as_pg_numeric(value: Any) -> Decimal:
    if isinstance(value, float):
        return Decimal(format(value, ".15g"))  # float8 -> numeric keeps 15 digits
    return Decimal(value)


def _float_divide(a: Any, b: Any, dialect: str) -> Any:
    if b == 0:
        return _by_zero(a, b, dialect)
    return float(a) / float(b)


def _divide(a: Any, b: Any, dialect: str, increment: int) -> Any:
    """``a / b`` as the database evaluates it for these operand values (``increment``:
    MariaDB's ``div_precision_increment``)."""
    if isinstance(a, float) or isinstance(b, float):
        return _float_divide(a, b, dialect)
    if dialect == "postgresql":
        if isinstance(a, int) and isinstance(b, int):
            return _truncate(a, b, dialect)
        return _pg_numeric_divide(Decimal(a), Decimal(b))
    if dialect in ("mysql", "mariadb"):
        return mysql_quotient(a, b, increment)
    return _truncate(a, b, dialect)  # sqlite: integers


def _truncate(a: int, b: int, dialect: str) -> Any:
    if b == 0:
        return _by_zero(a, b, dialect)
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _is_integer(type_: Any) -> bool:
    return isinstance(type_, sqltypes.Integer)


def _is_float(type_: Any) -> bool:
    return isinstance(type_, sqltypes.Float)


Division = Callable[[Any, Any, int], Any]
"""A merged division: of the left and right values and MariaDB's
``div_precision_increment`` (which other dialects ignore)."""


def division_function(element: Any, dialect: str, refuse: Refuse) -> Division:
    """The function of (left, right, increment) values that ``element`` (``a / b`` or
    ``a // b``) computes on ``dialect``; refuses what that dialect's SQL would compute
    otherwise."""
    right_type = element.right.type
    if element.operator is operators.truediv:
        if dialect == "postgresql":
            if isinstance(right_type, sqltypes.Numeric) and not _is_float(right_type) and (
                right_type.precision is not None or right_type.scale is not None
            ):
                raise refuse(element, "the divisor is cast to its NUMERIC(p, s) type")
            if _is_float(right_type):
                return lambda a, b, i: _divide(a, float(b), dialect, i)
            return lambda a, b, i: _divide(a, _as_pg_numeric(b), dialect, i)
        if dialect == "sqlite":
            return lambda a, b, i: _divide(a, float(b), dialect, i)
        return lambda a, b, i: _divide(a, b, dialect, i)
    # floor division
    if dialect in ("mysql", "mariadb"):

        def floor(a: Any, b: Any, increment: int) -> Any:
            quotient = _divide(a, b, dialect, increment)
            if quotient is None:
                return None
            if isinstance(quotient, float):
                return float(math.floor(quotient))
            return quotient.to_integral_value(rounding=ROUND_FLOOR)

        return floor
    if not (_is_integer(element.left.type) and _is_integer(right_type)):
        raise refuse(element, f"{dialect} computes FLOOR(a / b) for non-integer operands")
    return lambda a, b, i: _divide(a, b, dialect, i)


def cast_function(element: Any, dialect: str, refuse: Refuse) -> Callable[[Any], Any]:
    """The function of a value that ``CAST(value AS type)`` computes on ``dialect``."""
    target = element.type
    if _is_integer(target):
        if dialect == "sqlite":
            return lambda v: int(v)  # truncates toward zero
        if dialect == "postgresql":
            return lambda v: round(v) if isinstance(v, float) else _round_integer(v)
        return _round_integer
    if _is_float(target) and dialect in ("postgresql", "sqlite"):
        return lambda v: float(v)
    raise refuse(element, f"CAST to {target} is not merged on {dialect} (only to integers"
                 " everywhere, and to FLOAT on PostgreSQL and SQLite)")  # fmt: skip


def _round_integer(value: Any) -> int:
    """Half away from zero, as NUMERIC -> integer casts round."""
    if isinstance(value, int):
        return value
    exact = Decimal(value) if not isinstance(value, float) else Decimal(repr(value))
    return int(exact.to_integral_value(rounding=ROUND_HALF_UP))


Kind = tuple[str, Optional[int]]
"""A numeric SQL type as a merge needs it: ``("int" | "decimal" | "float", scale)``; the
scale (digits after the point) of a DECIMAL, None where unknown (or irrelevant)."""

_WIDTH = {"int": 0, "decimal": 1, "float": 2}


def _kind_of_type(type_: Any) -> Kind | None:
    if isinstance(type_, sqltypes.Integer):
        return "int", 0
    if isinstance(type_, sqltypes.Float):
        return "float", None
    if isinstance(type_, sqltypes.Numeric):
        return "decimal", type_.scale
    return None


def _wider(kinds: list[Kind | None]) -> Kind | None:
    """The common type of ``kinds`` (float over decimal over int; the largest scale)."""
    if not kinds or any(k is None for k in kinds):
        return None
    known = [k for k in kinds if k is not None]
    widest = max(_WIDTH[k[0]] for k in known)
    name = next(n for n, w in _WIDTH.items() if w == widest)
    scales = [k[1] for k in known if k[0] == "decimal"]
    scale = None if not scales or None in scales else max(s for s in scales if s is not None)
    return name, scale


def numeric_kind(element: Any, dialect: str) -> Kind | None:
    """The numeric type ``element`` has on ``dialect`` (PostgreSQL or MariaDB/MySQL), None
    where it is not a number or not known here."""
    plain = element
    while isinstance(plain, (Label, Grouping)):
        plain = plain.element
    value = plain.effective_value if isinstance(plain, BindParameter) else None
    if value is not None and not isinstance(value, bool):
        if isinstance(value, int):
            return "int", 0
        if isinstance(value, float):
            return "float", None
        if isinstance(value, Decimal):
            return "decimal", _scale(value)
    if isinstance(plain, FunctionElement):
        name = str(plain.name).lower()
        arguments = [numeric_kind(a, dialect) for a in plain.clauses]
        if name == "count":
            return "int", 0
        if name in ("min", "max") and len(arguments) == 1:
            return arguments[0]
        if name in ("sum", "avg") and len(arguments) == 1 and arguments[0] is not None:
            kind, scale = arguments[0]
            if kind == "float":
                return "float", None
            if name == "avg":
                mysql = dialect in ("mysql", "mariadb")
                return "decimal", (None if scale is None or not mysql else scale + 4)
            if kind == "int" and not _decimal_sum(next(iter(plain.clauses)), dialect):
                return "int", 0
            return "decimal", scale
        if name == "coalesce":
            return _wider(arguments)
        return None
    if isinstance(plain, BinaryExpression) and plain.operator in (
        operators.add, operators.sub, operators.mul,
    ):  # fmt: skip
        return _wider([numeric_kind(plain.left, dialect), numeric_kind(plain.right, dialect)])
    if isinstance(plain, (ColumnClause, Cast)):
        return _kind_of_type(plain.type)
    return None


def coalesce_function(
    element: Any, dialect: str, refuse: Refuse
) -> Callable[[Any], Any]:
    """What becomes of the value ``COALESCE(...)`` picks on ``dialect``: converted to the
    arguments' common type (an integer 0 after a NULL DECIMAL sum is a DECIMAL 0) on
    PostgreSQL and MariaDB/MySQL, as it is on SQLite and where the types are not known."""
    if dialect not in ("postgresql", "mysql", "mariadb"):
        return lambda value: value
    common = _wider([numeric_kind(a, dialect) for a in element.clauses])
    if common is None or common[0] == "int":
        return lambda value: value
    if common[0] == "float":
        return lambda value: float(value) if isinstance(value, (int, Decimal)) else value
    scale = common[1]
    if dialect == "postgresql":  # a NUMERIC value keeps its own scale: 0 is 0
        return lambda value: Decimal(value) if isinstance(value, int) else value
    if scale is None:
        raise refuse(element, f"the scale of its DECIMAL result on {dialect} is not known "
                     "(give each argument a Numeric(p, s) type)")  # fmt: skip
    step = Decimal(1).scaleb(-scale)
    return lambda value: (
        Decimal(value).quantize(step) if isinstance(value, (int, Decimal)) else value
    )
