"""MariaDB's TIMESTAMP values, which a merge compares by the instant each holds.

MariaDB (and MySQL) store a ``TIMESTAMP`` as a UTC instant and order, group and match it
by that instant, but hand it out as a local time of the session's time zone, without the
offset. Where that zone leaves daylight saving time an hour of local times repeats:
02:30 before the change and 02:30 after are two instants (two GROUP BY keys, ordered by
the instant) read as one naive ``datetime``. A merge comparing the values it reads would
make them one key and order the repeated hour's rows otherwise than one table does.

So each source sends ``UNIX_TIMESTAMP(x)`` beside such a value (:func:`instant_key`), and
the merge orders, groups and matches (DISTINCT, ``count(DISTINCT)``) by that number, as it
does with strings' weights (:mod:`~snowshard.sharding.collation`). ``MIN(x)``/``MAX(x)``
are sent as ``FROM_UNIXTIME(MIN(UNIX_TIMESTAMP(x)))`` and picked by
``MIN(UNIX_TIMESTAMP(x))`` (:func:`instant_extreme`): MariaDB's own grouped MIN/MAX of a
TIMESTAMP in that hour is not always the least or greatest instant (it compared local
times, over one table and over the UNION ALL of a database's tables). A value compared
after the merge (HAVING, CASE) is refused (:func:`check_instant_compared`); arithmetic on
it is (:mod:`~snowshard.sharding.temporal`).

SQLAlchemy's ``DateTime`` is a ``DATETIME`` there, a local time stored as written, which
Python compares as MariaDB does. What makes an expression a TIMESTAMP is MariaDB's type for
it, not SQLAlchemy's (:func:`is_instant`): ``type_coerce()`` changes no SQL, and
``GREATEST``, ``LEAST``, ``IFNULL``, ``COALESCE``, ``CASE``, ``MIN`` and ``MAX`` give a
TIMESTAMP only when every value they choose from is one (a DATETIME among them makes theirs
a DATETIME), ``NULLIF`` its first argument's type.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import TIMESTAMP, Numeric, func
from sqlalchemy.sql.functions import FunctionElement

from snowshard.sharding.analysis import describe
from snowshard.sharding.dialect_types import type_for, typed_as
from snowshard.sharding.errors import UnsupportedShardQuery

__all__ = ["check_instant_compared", "instant_extreme", "instant_key", "is_instant"]

_LOCAL_TIME_DIALECTS = frozenset({"mysql", "mariadb"})
"""Dialects whose TIMESTAMP is read as a session-local time without its offset."""


def is_instant(element: Any, dialect: str) -> bool:
    """Whether ``element`` is a TIMESTAMP that ``dialect`` reads as a local time: as the
    database types it, which SQLAlchemy's type of a ``type_coerce()``, an untyped
    ``GREATEST()`` or a ``COALESCE()`` of a TIMESTAMP and a DATETIME does not say."""
    if dialect not in _LOCAL_TIME_DIALECTS:
        return False
    return typed_as(element, lambda type_: isinstance(type_for(type_, dialect), TIMESTAMP))


def instant_key(element: Any, dialect: str) -> Any:
    """``UNIX_TIMESTAMP(element)`` (NULL for NULL) where ``element`` is such a TIMESTAMP:
    what a source sends for the merge to compare the instant; None for anything else."""
    if not is_instant(element, dialect):
        return None
    return func.unix_timestamp(element, type_=Numeric(asdecimal=True))


def instant_extreme(aggregate: Any, dialect: str) -> tuple[Any, Any] | None:
    """For ``MIN(x)``/``MAX(x)`` of such a TIMESTAMP (``aggregate`` bare): what a source
    sends for its value, ``FROM_UNIXTIME(MIN(UNIX_TIMESTAMP(x)))``, the local time of the
    least instant, and what the merge picks it by, ``MIN(UNIX_TIMESTAMP(x))``. None for
    any other expression."""
    if not isinstance(aggregate, FunctionElement):
        return None
    name = str(aggregate.name).lower()
    arguments = list(aggregate.clauses)
    if name not in ("min", "max") or len(arguments) != 1 or not is_instant(arguments[0], dialect):
        return None
    weight = getattr(func, name)(func.unix_timestamp(arguments[0]), type_=Numeric(asdecimal=True))
    return func.from_unixtime(weight, type_=arguments[0].type), weight


def check_instant_compared(what: str, element: Any, dialect: str) -> None:
    """Refuse comparing such a TIMESTAMP in Python after the merge (HAVING, CASE, ``<``,
    arithmetic): the merge holds its local time only, which names two instants in the hour
    a daylight-saving change repeats."""
    if is_instant(element, dialect):
        raise UnsupportedShardQuery(
            f"{what} {describe(element)} across shards: {dialect} compares a TIMESTAMP by "
            "its UTC instant but hands out the session's local time, which repeats in the "
            "hour daylight saving time ends, so the merge cannot compare what it reads; "
            f"compare UNIX_TIMESTAMP({describe(element)}) (func.unix_timestamp), declare the "
            "column DateTime (DATETIME), or route the query to one shard (a shard key in "
            "WHERE)"
        )
