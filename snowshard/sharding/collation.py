"""Whether a merge may compare strings in Python: the collation a database compares them by.

A merge across shards (:mod:`~snowshard.sharding.merge`) sorts rows by their ORDER BY
values, takes MIN/MAX of per-source values, groups rows by their GROUP BY keys, removes
DISTINCT duplicates and computes comparisons, all in Python. Python compares strings by
code point and calls two strings equal only when they are the same string. A database
compares them by a *collation*: MariaDB's default ``utf8mb4_general_ci`` orders ``alpha``
before ``Banana`` and calls ``apple`` equal to ``APPLE``; PostgreSQL's ``en_US.UTF-8`` or
ICU collations order by language rules. A merge done in Python under such a collation
returns a plausible, wrong order or grouping, so it is refused
(:class:`~snowshard.sharding.errors.UnsupportedShardQuery`, before any SQL runs) unless the
collation is known, from the statement alone, to agree with Python:

* its expression says ``.collate(name)``, else its column type says ``String(collation=name)``
  (a type's dialect variant counts), else the database's default applies, which snowshard
  cannot see without asking the server, except SQLite's (``BINARY``);
* ordering (ORDER BY, MIN/MAX, ``<``/``>`` in HAVING or CASE) agrees on SQLite's ``BINARY``,
  PostgreSQL's ``C``, ``POSIX``, ``C.UTF-8`` / ``pg_c_utf8`` and ``ucs_basic``, and MariaDB
  and MySQL's ``binary``, ``*_nopad_bin`` and MySQL 8's ``*_0900_bin`` (the other ``*_bin``
  collations ignore trailing spaces);
* equality (GROUP BY keys, DISTINCT, ``=``/``IN``) agrees with those too, and on
  PostgreSQL also with the database default, ``default`` and the predefined ICU
  collations (``*-x-icu``), which are deterministic (equal only when the bytes are); a
  collation the user created may not be, and is refused;
* enums order by their declared order on PostgreSQL and MariaDB: ORDER BY and MIN/MAX of a
  native enum are refused there.

A statement that runs whole (one shard, or one ``UNION ALL`` in one database) is compared by
the database itself and never reaches these checks.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Enum, String
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import BinaryExpression, CollationClause
from sqlalchemy.types import NullType, TypeDecorator

from snowshard._compat import variant_for
from snowshard.sharding.analysis import describe, walk
from snowshard.sharding.errors import UnsupportedShardQuery
from snowshard.sharding.evaluate import bare

__all__ = ["ORDERING", "EQUALITY", "check_strings", "collation_of", "compares_like_python"]

ORDERING = "ordering"
"""What a merge does with ORDER BY values, MIN/MAX and ``<``, ``>``: order them."""

EQUALITY = "equality"
"""What a merge does with GROUP BY keys, DISTINCT rows and ``=``, ``IN``: match them."""

_POSTGRES_CODE_POINT = frozenset({"c", "posix", "c.utf-8", "c.utf8", "pg_c_utf8", "ucs_basic"})
_ADVICE = {
    "postgresql": 'add .collate("C") to the expression or declare the column '
    'String(..., collation="C")',
    "mysql": 'add .collate("utf8mb4_nopad_bin") to the expression or declare the column '
    'String(..., collation="utf8mb4_nopad_bin")',
    "sqlite": "compare with SQLite's default BINARY collation (drop the COLLATE)",
}
_ADVICE["mariadb"] = _ADVICE["mysql"]


def _type_for(type_: Any, dialect: str) -> Any:
    type_ = variant_for(type_, dialect)
    while isinstance(type_, TypeDecorator):
        type_ = variant_for(type_.impl, dialect)
    return type_


def collation_of(element: Any, dialect: str) -> tuple[bool, str | None, Any]:
    """``(is_string, collation, type)`` of an expression on ``dialect``.

    ``collation`` is the name ``.collate()`` or the column type gives, None for the
    database's default; ``type`` the expression's type for that dialect. An expression of
    no known type (an unknown function) over a string is taken for a string.
    """
    plain = bare(element)
    if isinstance(plain, BinaryExpression) and plain.operator is operators.collate:
        right = bare(plain.right)
        if isinstance(right, CollationClause):
            return True, right.collation, _type_for(plain.left.type, dialect)
    type_ = _type_for(getattr(plain, "type", None), dialect)
    if isinstance(type_, String):
        return True, type_.collation, type_
    if type_ is None or isinstance(type_, NullType):
        # a function SQLAlchemy does not know (lower(), trim()...) has no type: it is taken
        # for a string when it has a string argument, compared by their collation (the
        # first that Python does not reproduce, when they differ)
        found = [collation_of(p, dialect) for p in walk(plain) if p is not plain]
        strings = [f for f in found if f[0]]
        for one in strings:
            if not compares_like_python(one[1], dialect, ORDERING):
                return one
        if strings:
            return strings[0]
    return False, None, type_


def _postgres_deterministic(name: str) -> bool:
    """Whether a PostgreSQL collation is known to be deterministic: the C ones, ``default``
    and ICU's predefined ``*-x-icu`` (a collation created by the user may not be)."""
    return name in _POSTGRES_CODE_POINT or name == "default" or name.endswith("-x-icu")


def compares_like_python(collation: str | None, dialect: str, need: str) -> bool:
    """Whether ``dialect`` compares strings under ``collation`` (None: the database's
    default) as Python does, for ``need`` (:data:`ORDERING` or :data:`EQUALITY`)."""
    name = None if collation is None else collation.strip('"`').lower()
    if dialect == "sqlite":
        return name is None or name == "binary"
    if dialect == "postgresql":
        if need == EQUALITY:
            return name is None or _postgres_deterministic(name)
        return name in _POSTGRES_CODE_POINT
    if dialect in ("mysql", "mariadb"):
        return name is not None and (
            name == "binary" or name.endswith("_nopad_bin") or name.endswith("_0900_bin")
        )
    return False


def _native_enum(type_: Any, dialect: str) -> bool:
    return isinstance(type_, Enum) and type_.native_enum and dialect != "sqlite"


def check_strings(element: Any, dialect: str, need: str, what: str) -> None:
    """Refuse merging ``element`` in Python when its strings compare otherwise there.

    ``what`` names the merge step for the message (``"ORDER BY"``, ``"GROUP BY"``...).
    """
    is_string, collation, type_ = collation_of(element, dialect)
    if not is_string:
        return
    if need == ORDERING and _native_enum(type_, dialect):
        raise UnsupportedShardQuery(
            f"{what} {describe(element)} across shards: {dialect} orders this enum by its "
            "declared order, which a merge cannot reproduce; order by a column or expression "
            "whose order Python can reproduce, or route the query to one shard (a shard key "
            "in WHERE)"
        )
    if compares_like_python(collation, dialect, need):
        return
    where = (
        f"the collation {collation!r}" if collation is not None
        else f"the database's default collation, which snowshard cannot see before the "
        f"query runs"
    )  # fmt: skip
    verb = "orders" if need == ORDERING else "matches"
    raise UnsupportedShardQuery(
        f"{what} {describe(element)} across shards: the merge {verb} strings as Python "
        f"does (by code point, equal only when identical), but {dialect} compares them by "
        f"{where}, which may differ (case, accents), so the merged answer could differ "
        f"from one table's; {_ADVICE.get(dialect, 'route the query to one shard')}, or "
        "route the query to one shard (a shard key in WHERE); if the expression is not a "
        "string, give it its type (func.length(x, type_=Integer))"
    )
