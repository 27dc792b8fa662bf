"""SQL a SELECT carries beside its clauses, and whether a merge across shards can keep it.

``prefix_with()``, ``suffix_with()`` and SQLAlchemy 2.1's syntax extensions
(``select.ext()``) place SQL that SQLAlchemy does not interpret. Each source of a merged
SELECT (:mod:`~snowshard.sharding.merge`) would apply it to its own rows only: a
``DISTINCT`` prefix would then keep one row per source, a ``LIMIT 2`` suffix two rows per
source. So, across shards, :func:`check_modifiers` refuses them before any SQL runs, except:

* prefixes that change how MySQL/MariaDB read rows, not which rows
  (:data:`HARMLESS_PREFIXES`), and any prefix or suffix given for another dialect (not
  rendered);
* PostgreSQL's DISTINCT ON, which the merge itself reproduces.

A statement that reads one shard, or one database's tables as one UNION ALL, runs whole
and keeps them all.

An UPDATE or DELETE on several shards runs once per shard: a LIMIT on it (MySQL's
``mysql_limit``, or 2.1's ``ext(mysql.limit(n))``) would change ``n`` rows per shard, so
:func:`check_dml_modifiers` refuses it, and any other syntax extension, before any SQL.
"""

from __future__ import annotations

from typing import Any

from snowshard._compat import prefixes_of, suffixes_of, syntax_extensions_of
from snowshard.sharding.errors import UnsupportedShardQuery

__all__ = ["HARMLESS_PREFIXES", "check_dml_modifiers", "check_modifiers"]

HARMLESS_PREFIXES = frozenset(
    {
        "HIGH_PRIORITY",
        "STRAIGHT_JOIN",
        "SQL_SMALL_RESULT",
        "SQL_BIG_RESULT",
        "SQL_BUFFER_RESULT",
        "SQL_CACHE",
        "SQL_NO_CACHE",
    }
)
"""MySQL/MariaDB SELECT modifiers that leave the rows as they are (a prefix made of them
only is kept across shards)."""


def _rendered(target: str | None, dialect: str) -> bool:
    """Whether a prefix or suffix given for dialect ``target`` is rendered on ``dialect``
    (as SQLAlchemy's compiler decides it)."""
    return target in (None, "*") or target == dialect


def check_modifiers(statement: Any, dialect: str) -> None:
    """Refuse, for a SELECT merged across shards on ``dialect``, prefixes, suffixes and
    syntax extensions a merge cannot keep (module docstring)."""
    for text, target in prefixes_of(statement):
        if _rendered(target, dialect) and not set(text.upper().split()) <= HARMLESS_PREFIXES:
            raise UnsupportedShardQuery(
                f"prefix_with({text!r}) across shards: each source would apply it to its "
                "own rows only; use select().distinct() for DISTINCT, route the query to "
                "one shard, or leave the prefix out (kept: "
                f"{', '.join(sorted(HARMLESS_PREFIXES))})"
            )
    for text, target in suffixes_of(statement):
        if _rendered(target, dialect):
            raise UnsupportedShardQuery(
                f"suffix_with({text!r}) across shards: each source would apply it to its "
                "own rows only; use limit() for LIMIT and with_for_update() for locking, "
                "route the query to one shard, or leave the suffix out"
            )
    if syntax_extensions_of(statement):
        raise UnsupportedShardQuery(
            "a syntax extension (select.ext(...)) across shards: what it does to the rows "
            "is unknown to the merge; route the query to one shard, or leave the extension "
            "out"
        )


_DML_LIMITS = ("mysql_limit", "mariadb_limit")
"""The UPDATE/DELETE LIMIT keywords of the MySQL/MariaDB dialects (dialect names "mysql"
and "mariadb" render either)."""


def check_dml_modifiers(statement: Any, dialect: str) -> None:
    """Refuse, for an UPDATE or DELETE run on several shards of ``dialect``, a LIMIT or a
    syntax extension (module docstring)."""
    kwargs = statement.dialect_kwargs
    limit = next((kwargs[k] for k in _DML_LIMITS if kwargs.get(k) is not None), None)
    if limit is not None and dialect in ("mysql", "mariadb"):
        raise UnsupportedShardQuery(
            f"an UPDATE or DELETE with LIMIT {limit} across shards would change up to "
            f"{limit} rows in each shard; narrow its WHERE to one shard (a shard key), or "
            "select the rows' keys first and change those"
        )
    if syntax_extensions_of(statement):
        raise UnsupportedShardQuery(
            "an UPDATE or DELETE with a syntax extension (.ext(...), e.g. a LIMIT) across "
            "shards: each shard would apply it to its own rows; narrow its WHERE to one "
            "shard, or leave the extension out"
        )
