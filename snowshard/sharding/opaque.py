"""PostgreSQL values whose Python form a merge cannot compare or add as PostgreSQL does.

A merge orders, matches and adds the values the driver hands out. For three PostgreSQL
types those are not what the database compares:

* ``money``: psycopg reads it as the server's locale text (``'$1,234.00'``), which sorts
  as text (``'$9.00'`` after ``'$10.50'``) and adds up as text (``SUM`` joined the
  sources' sums into ``'$2,514.00$2,509.00'``);
* ``inet`` and ``cidr``: :mod:`ipaddress` objects, which Python refuses to order across
  IPv4 and IPv6 and orders hosts and networks otherwise than PostgreSQL (network part,
  then prefix length);
* ``time with time zone``: PostgreSQL compares the UTC time, then the offset, so
  ``12:00+01`` and ``11:00+00`` are two values (two GROUP BY keys), which Python calls
  equal.

So a merge refuses, before any SQL, to order (ORDER BY, MIN/MAX, ``<``), match (GROUP BY,
DISTINCT, ``count(DISTINCT)``, ``=``) or add (SUM, AVG) them where Python would get it
wrong (:func:`check_opaque`, :func:`check_summed`). Matching money, inet and cidr is
exact (one text, one object per value). A statement that runs whole (one shard, or one
UNION ALL in one database) is compared by the database itself.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects.postgresql import CIDR, INET, MONEY
from sqlalchemy.types import Time

from snowshard.sharding.analysis import describe
from snowshard.sharding.dialect_types import sql_types
from snowshard.sharding.errors import UnsupportedShardQuery

__all__ = ["check_opaque", "check_summed"]

def _kind(element: Any, dialect: str) -> str | None:
    """Which of the module's types ``element`` may have on ``dialect`` (as the database
    types it: :func:`~.dialect_types.sql_types`), for a message."""
    if dialect != "postgresql":
        return None
    for type_ in sql_types(element, dialect):
        if isinstance(type_, MONEY):
            return "money"
        if isinstance(type_, (INET, CIDR)):
            return "inet"
        if isinstance(type_, Time) and type_.timezone:
            return "timetz"
    return None


_WHY = {
    "money": "psycopg reads money as locale text, which sorts and adds up as text",
    "inet": "Python orders IP addresses and networks otherwise (and not IPv4 against IPv6)",
    "timetz": "PostgreSQL tells 12:00+01 from 11:00+00, which Python calls equal",
}
_INSTEAD = {
    "money": "cast it to Numeric",
    "inet": "order by cast(..., String) where text order will do",
    "timetz": "compare cast(..., String) where text will do",
}


def check_opaque(what: str, element: Any, dialect: str, *, ordered: bool) -> None:
    """Refuse a merge ordering (``ordered``) or matching ``element`` in Python where it has
    one of the module's types: money, inet and cidr are refused for ordering only, time
    with time zone for both."""
    kind = _kind(element, dialect)
    if kind is None or (not ordered and kind != "timetz"):
        return
    raise UnsupportedShardQuery(
        f"{what} {describe(element)} across shards: {_WHY[kind]}; {_INSTEAD[kind]}, or route "
        "the query to one shard (a shard key in WHERE)"
    )


def check_summed(element: Any, arguments: Any, dialect: str) -> None:
    """Refuse SUM/AVG (``element``) of money across shards: the merge would add text."""
    for argument in arguments:
        if _kind(argument, dialect) == "money":
            raise UnsupportedShardQuery(
                f"{describe(element)} across shards: {_WHY['money']}; sum a cast to Numeric, "
                "or route the query to one shard (a shard key in WHERE)"
            )
