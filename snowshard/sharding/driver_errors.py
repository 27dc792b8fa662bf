"""Driver errors of sharded work, named: which database, which physical tables, retry or not.

A :class:`~snowshard.sharding.ShardedSession` marks every connection it begins with the key
of its database (the execution option ``snowshard_database``: a key of
``ShardedSession(databases=...)``, or ``"default"`` for ``bind``), and watches each of its
engines with SQLAlchemy's ``handle_error`` event. When the driver raises on such a
connection (a constraint the database rejects, a connection killed or lost, a lock wait
timeout), the error reaches the caller as :class:`ShardOperationError`, chained to the
driver's exception, instead of a bare ``sqlalchemy.exc.DBAPIError`` that names no database.
Connections of plain sessions on the same engines carry no mark and are left alone.
A connection to a replica (:mod:`~snowshard.sharding.replicas`) is marked with its
database and ``snowshard_replica_of``, and its errors say "replica", with the replica's URL
(password masked): ``ShardOperationError.replica`` is True for them.

Retrying: a statement that fails inside a session's transaction commits nothing (commits
have their own errors, :mod:`~snowshard.sharding.commit_errors`), so after
``session.rollback()`` running the whole transaction again stores nothing twice; every
:class:`ShardOperationError` says so and has ``retry_safe=True``. Whether a retry can
*succeed* is another matter: a rejected constraint fails again, a lost connection usually
does not (``disconnect`` tells them apart).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Table, event
from sqlalchemy.engine import Connection, Engine, ExceptionContext
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.visitors import iterate

from snowshard.redaction import redact_sqlalchemy_url, scrub, url_secrets
from snowshard.sharding.errors import ShardingError
from snowshard.sharding.shard_map import FENCE_MARK, StaleShardMap

__all__ = [
    "DATABASE_OPTION",
    "REPLICA_OPTION",
    "DatabaseKeys",
    "ShardOperationError",
    "database_keys",
    "mark",
    "mark_begun",
    "watch",
]

DATABASE_OPTION = "snowshard_database"
"""Execution option naming the database key of a sharded session's connection."""

REPLICA_OPTION = "snowshard_replica_of"
"""Execution option marking a connection to a replica (the database key it copies)."""


class ShardOperationError(ShardingError):
    """The database refused or lost a statement of sharded work (module docstring).

    ``database`` is the database key, ``tables`` the physical tables the statement named
    (empty when SQLAlchemy did not compile it), ``disconnect`` whether the connection was
    lost, ``retry_safe`` whether running the transaction again stores nothing twice, and
    ``replica`` whether the statement ran on a replica of the database.
    """

    def __init__(
        self,
        message: str,
        *,
        database: str,
        tables: tuple[str, ...],
        disconnect: bool,
        retry_safe: bool = True,
        replica: bool = False,
    ) -> None:
        super().__init__(message)
        self.database = database
        self.tables = tables
        self.disconnect = disconnect
        self.retry_safe = retry_safe
        self.replica = replica


_watched: weakref.WeakSet[Engine] = weakref.WeakSet()
"""Engines :func:`watch` has listened on (weak: a collected engine leaves the set)."""


def watch(engine: Engine) -> None:
    """Name the driver errors of ``engine``'s marked connections (idempotent, cheap).

    A weak set remembers the engines already watched; ``event.contains`` is not asked,
    as SQLAlchemy's event registry is keyed by ``id()`` and may still hold the entry of a
    collected engine at the same address.
    """
    if engine not in _watched:
        event.listen(engine, "handle_error", _named)  # idempotent per engine
        _watched.add(engine)


def mark(connection: Connection, database: str, *, replica: bool = False) -> None:
    """Mark ``connection`` (checked out by a sharded session) as ``database``'s.

    ``replica``: the connection reads a replica of ``database``.
    """
    options = {DATABASE_OPTION: database}
    if replica:
        options[REPLICA_OPTION] = database
    connection.execution_options(**options)


DatabaseKeys = dict[int, tuple[str, bool]]
"""``id(engine)`` -> (database key, whether the engine is a replica's), of one session's
live engines (held by the session, so the ids cannot be reused meanwhile)."""


def database_keys(
    binds: Mapping[str, Engine | Connection],
    replicas: Mapping[str, Sequence[Engine]] | None = None,
) -> DatabaseKeys:
    """Watch every engine of a session and map each to its database key: ``binds`` maps
    database key -> engine, ``replicas`` database key -> its replica engines."""
    engines = {key: bind.engine for key, bind in binds.items()}
    keys: DatabaseKeys = {id(engine): (key, False) for key, engine in engines.items()}
    for key, copies in (replicas or {}).items():
        for engine in copies:
            keys[id(engine)] = (key, True)
            watch(engine)
    for engine in engines.values():
        watch(engine)
    return keys


def mark_begun(keys: DatabaseKeys, connection: Connection) -> None:
    """Mark a connection a sharded session just began with its database key (if known)."""
    found = keys.get(id(connection.engine))
    if found is not None:
        mark(connection, found[0], replica=found[1])


def _named(context: ExceptionContext) -> BaseException | None:
    error = context.sqlalchemy_exception
    if not isinstance(error, DBAPIError):
        return None  # snowshard's own errors and SQLAlchemy's non-driver ones pass through
    database, replica = _database_of(context)
    if database is None:
        return None
    tables = _tables_of(context)
    where = f"database {database!r}" + (f", table {', '.join(tables)}" if tables else "")
    if replica and context.engine is not None:
        where = f"replica {redact_sqlalchemy_url(context.engine.url)} of {where}"
    original = context.original_exception
    cause = f"{type(original).__module__}.{type(original).__name__}: {original}".strip()
    secrets = url_secrets(context.engine.url) if context.engine is not None else frozenset()
    if FENCE_MARK in str(original):
        return StaleShardMap(
            f"{where} refused a write: its tables were moved to another layout by a reshard "
            "(the shard map changed). Nothing of this transaction was committed: roll the "
            "session back, pick the model again (ShardMap.pick) and retry"
        )
    if context.is_disconnect:
        what = f"the connection to {where} was lost ({scrub(cause, secrets)})"
    else:
        what = f"{where} refused a statement: {scrub(cause, secrets)}"
    return ShardOperationError(
        f"{what}. Nothing of this transaction was committed: roll the session back; running "
        "the whole transaction again is safe (it stores nothing twice)",
        database=database,
        tables=tables,
        disconnect=bool(context.is_disconnect),
        replica=replica,
    )


def _database_of(context: ExceptionContext) -> tuple[str | None, bool]:
    """The database key of the failing connection, and whether it is a replica's."""
    options: Mapping[str, Any]
    if context.execution_context is not None:
        options = context.execution_context.execution_options
    elif context.connection is not None:
        options = context.connection.get_execution_options()
    else:
        return None, False
    database = options.get(DATABASE_OPTION)
    if not isinstance(database, str):
        return None, False
    return database, options.get(REPLICA_OPTION) == database


def _tables_of(context: ExceptionContext) -> tuple[str, ...]:
    compiled = context.execution_context.compiled if context.execution_context else None
    if compiled is None or compiled.statement is None:
        return ()
    named: list[str] = []
    physical: list[str] = []
    for element in iterate(compiled.statement):
        if isinstance(element, Table) and element.name not in named:
            named.append(element.name)
            if "snowshard" in element.info:
                physical.append(element.name)
    return tuple(physical or named)
