"""MariaDB's single-precision FLOAT, which a merge compares by the exact value each holds.

MariaDB (and MySQL) store a ``FLOAT`` (SQLAlchemy's ``Float`` there, ``FLOAT(p)`` with
p <= 24, ``FLOAT(M, D)``) as a 32-bit float and compare, group and order by that value,
but hand it out with six significant digits: 0.1 and 0.10000001 are two values read as
one (``0.1``), and a FLOAT holding 0.1 is greater than the literal 0.1 (its 32-bit value
is 0.10000000149...). A merge comparing what it reads would make them one GROUP BY key
or DISTINCT value, order them by its tiebreaker, and compare them otherwise than MariaDB.

So each source sends ``x + 0E0`` beside such a value (:func:`float_key`): the same value
as a DOUBLE, which MariaDB hands out with every digit, and the merge groups, matches and
orders by it, as it does with strings' weights (:mod:`~snowshard.sharding.collation`),
and picks MIN/MAX by the key of each source's own. A value compared after the merge
(HAVING, CASE, DISTINCT of grouped rows) is refused (:func:`check_float_compared`).

What makes an expression such a FLOAT is MariaDB's type for it (:func:`is_single_float`):
a column, a CAST, and MIN, MAX, CASE, COALESCE, GREATEST or LEAST of those only; SUM,
AVG and arithmetic give a DOUBLE, read with every digit.

PostgreSQL's ``real`` (SQLAlchemy's ``REAL``, ``Float(p)`` with p <= 24) is handed out
with the shortest digits that tell it from every other ``real``, so the values read group
and order as PostgreSQL's do; but compared with a ``double precision`` or ``numeric``
value, PostgreSQL compares the 32-bit value (a ``real`` holding 0.1 is greater than 0.1),
the merge the digits read. A merge comparing such a value with anything but another such
value is refused (:func:`check_real_compared`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import REAL, Double, Float, literal_column, type_coerce
from sqlalchemy.sql.elements import Cast, ColumnClause

from snowshard.sharding.analysis import describe
from snowshard.sharding.dialect_types import chooses_only, type_for
from snowshard.sharding.errors import UnsupportedShardQuery

__all__ = ["check_float_compared", "check_real_compared", "float_key", "is_single_float"]

_DIALECTS = frozenset({"mysql", "mariadb"})
"""Dialects that hand out a FLOAT with six significant digits."""


def _single(type_: Any, dialect: str) -> bool:
    """Whether ``type_`` is 32-bit on ``dialect``: MariaDB/MySQL's FLOAT (DOUBLE and REAL
    are 64-bit there), PostgreSQL's ``real``."""
    if not isinstance(type_, Float) or isinstance(type_, Double):
        return False
    if isinstance(type_, REAL):
        return dialect == "postgresql"
    precision = type_.precision
    if dialect == "postgresql":
        return precision is not None and precision <= 24  # Float() is double precision
    return precision is None or getattr(type_, "scale", None) is not None or precision <= 24


def is_single_float(element: Any, dialect: str) -> bool:
    """Whether ``dialect`` gives ``element`` a 32-bit floating-point type: MariaDB/MySQL's
    FLOAT, PostgreSQL's ``real`` (module docstring)."""
    if dialect not in _DIALECTS and dialect != "postgresql":
        return False

    def single(plain: Any) -> bool:  # a column or CAST: SUM, AVG, arithmetic are doubles
        is_column = isinstance(plain, ColumnClause) and not plain.is_literal
        if isinstance(plain, Cast) or is_column:
            return _single(type_for(plain.type, dialect), dialect)
        return False

    return chooses_only(element, single)


def float_key(element: Any, dialect: str) -> Any:
    """``element + 0E0`` (a DOUBLE of the same value, NULL for NULL) where ``element`` is
    such a FLOAT on MariaDB/MySQL: what a source sends for the merge to compare it; None
    otherwise (PostgreSQL's ``real`` values read order and match as PostgreSQL's do)."""
    if dialect not in _DIALECTS or not is_single_float(element, dialect):
        return None
    return type_coerce(element + literal_column("0E0", Double()), Double())


def check_float_compared(what: str, element: Any, dialect: str) -> None:
    """Refuse comparing such a FLOAT in Python after the merge (HAVING, CASE, DISTINCT
    of grouped rows) on MariaDB/MySQL: the merge holds it with six significant digits."""
    if dialect in _DIALECTS and is_single_float(element, dialect):
        raise UnsupportedShardQuery(
            f"{what} {describe(element)} across shards: {dialect} compares a FLOAT by its "
            "32-bit value but hands it out with six significant digits, so the merge cannot "
            "compare what it reads; compare what MariaDB types DOUBLE instead (MAX(x + 0.0) "
            "for MAX(x), or a column declared Double), or route the query to one shard (a "
            "shard key in WHERE)"
        )


def check_real_compared(element: Any, sides: Sequence[Any], dialect: str) -> None:
    """Refuse ``element``, a comparison after the merge of ``sides`` (a CASE's value and
    its WHEN values), on PostgreSQL if it compares a ``real`` with anything but a
    ``real``: PostgreSQL compares the 32-bit value, the merge the digits it read."""
    if dialect != "postgresql":
        return
    single = [is_single_float(side, dialect) for side in sides]
    if any(single) and not all(single):
        raise UnsupportedShardQuery(
            f"comparison {describe(element)} across shards: PostgreSQL compares a real by "
            "its 32-bit value (one holding 0.1 is greater than 0.1), the merge by the digits "
            "it reads; compare MAX(CAST(x AS DOUBLE PRECISION)) (cast(x, Double) inside the "
            "aggregate), declare the column Double, or route the query to one shard (a shard "
            "key in WHERE)"
        )
