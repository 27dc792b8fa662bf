"""Read replicas: a session reads a database from its replicas until it writes there.

::

    ShardedSession(bind, databases={"a": a, "b": b}, replicas={"a": [a_r1, a_r2]})
    ShardedSession(bind, replicas=Replicas({DEFAULT_DATABASE: main_r1}, retry_after=10))
    session.execute(select(Order).execution_options(replica=False))    # the primary

Each database key (``DEFAULT_DATABASE`` for the session's ``bind``) may list replica
engines (``AsyncEngine`` too). A replica is just another engine: the session's
:meth:`~snowshard.sharding.ShardedSession.get_bind` returns it instead of the primary's,
and SQLAlchemy's session transaction then holds one connection for it, like for any
engine. The rules, per database of a session:

* **Reads go to a replica**: a ``SELECT`` (``clause.is_select``, without ``FOR UPDATE``),
  including the per-database statements of a fan-out and connections asked for with
  ``session.connection(bind_arguments={"clause": select(...), ...})``.
* **Writes pin the primary**: once the session writes to a database in a transaction
  (flush, DML, bulk statements, any statement that is not a ``SELECT``; or
  ``session.connection()`` without a ``SELECT`` clause, whose caller may write through it),
  later reads of that database use the primary until the transaction ends (commit or
  rollback), so the session reads its own writes.
* **Reloads read the primary** once the session has written to the database: refreshing
  expired attributes after a commit (``ORMExecuteState.is_column_load``) never finds a
  lagging replica without the row the session just committed. Other reads after a commit
  go to a replica again and may not yet see it; read them with ``replica=False``.
* **Options**: ``execution_options(replica=True)`` reads a replica even after a write
  (knowingly stale; it never sends a statement that is not a ``SELECT`` to a replica);
  ``replica=False`` reads the primary without pinning it.
* **Choice**: round-robin over the database's healthy replicas, process-wide per primary
  engine, and sticky within a transaction: one transaction reads one replica of a database
  (one snapshot, one connection).
* **Down replicas**: a replica whose connection fails (refused, timed out, unknown
  database: any driver error while connecting) is skipped for ``retry_after`` seconds by
  every session of the process, with a :class:`ReplicaUnavailable` warning naming the
  database and the replica's URL (password masked); the read uses the next replica, else
  the primary. A replica that dies while pooled connections stay open is noticed only by
  ``create_engine(..., pool_pre_ping=True)``; otherwise the statement fails with a
  :class:`~snowshard.sharding.driver_errors.ShardOperationError` naming the replica.
* **Commits**: replica connections take no part in commit decisions (two-phase commit
  never prepares them); commit and rollback end their read-only transactions, and a
  replica that broke meanwhile is closed without an error.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.orm import ORMExecuteState, Session
from sqlalchemy.sql.selectable import ForUpdateArg

from snowshard.redaction import redact_sqlalchemy_url, scrub, url_secrets
from snowshard.spec import ShardConfigError

__all__ = [
    "DEFAULT_RETRY_AFTER",
    "PREFER_KEY",
    "REPLICA_OPTION",
    "ReplicaRouter",
    "ReplicaUnavailable",
    "Replicas",
    "is_read",
    "prefer_from_options",
]

REPLICA_OPTION = "replica"
"""Execution option: True reads a replica, False the primary (module docstring)."""

PREFER_KEY = "snowshard_replica"
"""``bind_arguments`` key carrying the ``replica`` option (or ``"reload"``) to ``get_bind``.

Set by :func:`prefer_from_options` from the statement's execution options, so it travels
with the bind arguments of every statement a routed statement runs. Code that asks for a
connection itself may pass it: ``session.connection(bind_arguments={..., PREFER_KEY: False})``.
"""

DEFAULT_RETRY_AFTER = 30.0
"""Seconds a replica that could not be reached is skipped."""

_RELOAD = "reload"

_lock = threading.Lock()
"""Guards the two records below (held for a dictionary operation or two)."""


def _new_lock_after_fork() -> None:
    # a thread of the parent may have held it at the fork; that thread does not exist here
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_after_fork)

_down_until: weakref.WeakKeyDictionary[Engine, float] = weakref.WeakKeyDictionary()
"""Replica engine -> clock reading until which it is skipped (process-wide)."""
_turns: weakref.WeakKeyDictionary[Engine, int] = weakref.WeakKeyDictionary()
"""Primary engine -> reads it handed to replicas so far (round-robin, process-wide)."""


class ReplicaUnavailable(UserWarning):
    """A replica could not be reached: the read went to another replica or the primary."""


def _sync_engine(value: Any) -> Engine | None:
    if isinstance(value, Engine):
        return value
    sync = getattr(value, "sync_engine", None)  # an AsyncEngine
    return sync if isinstance(sync, Engine) else None


class Replicas:
    """The replicas of a session's databases, and how long a down one is skipped.

    :param engines: database key -> a replica engine or a sequence of them
        (``AsyncEngine`` accepted); ``snowshard.spec.DEFAULT_DATABASE`` for ``bind``.
    :param retry_after: seconds (> 0) a replica that could not be reached is skipped.
    :param clock: monotonic seconds (for tests: a fake clock).
    """

    def __init__(
        self,
        engines: Mapping[str, Any],
        *,
        retry_after: float = DEFAULT_RETRY_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(engines, Mapping):
            raise ShardConfigError(
                f"replicas must map database keys (str) to replica engines, got "
                f"{type(engines).__name__}; pass e.g. replicas={{'a': [engine_a_replica]}}"
            )
        if isinstance(retry_after, bool) or not isinstance(retry_after, (int, float)) or not (
            retry_after > 0
        ):
            raise ShardConfigError(
                f"Replicas(retry_after={retry_after!r}): give the seconds a replica that "
                f"could not be reached is skipped, a number > 0 (default {DEFAULT_RETRY_AFTER:g})"
            )
        self.engines: dict[str, tuple[Engine, ...]] = {
            key: _engines_of(key, value) for key, value in engines.items()
        }
        """Database key -> its replica engines (sync)."""
        self.retry_after = float(retry_after)
        self.clock = clock

    @classmethod
    def of(cls, value: Replicas | Mapping[str, Any] | None) -> Replicas | None:
        """``value`` as :class:`Replicas` (a mapping gets the defaults); None stays None."""
        if value is None or isinstance(value, Replicas):
            return value
        return cls(value)

    def check(self, primaries: Mapping[str, Any]) -> None:
        """Refuse keys naming no database of the session and replicas that are primaries."""
        engines = {id(getattr(bind, "engine", bind)) for bind in primaries.values()}
        for key, replicas in self.engines.items():
            primary = primaries.get(key)
            if primary is None:
                raise ShardConfigError(
                    f"replicas={{{key!r}: ...}} names no database of this session (it has "
                    f"{sorted(primaries)}); use one of those keys (the bind's is 'default')"
                )
            dialect = getattr(primary, "dialect", None)
            for replica in replicas:
                where = f"replica {redact_sqlalchemy_url(replica.url)} of database {key!r}"
                if id(replica) in engines:
                    raise ShardConfigError(
                        f"{where} is also a primary engine of this session; a replica needs "
                        f"an engine of its own (create_engine(replica_url))"
                    )
                if dialect is not None and replica.dialect.name != dialect.name:
                    raise ShardConfigError(
                        f"{where} is {replica.dialect.name}, but its primary is "
                        f"{dialect.name}; a replica must be a copy of its primary's server"
                    )


def _engines_of(key: Any, value: Any) -> tuple[Engine, ...]:
    if not isinstance(key, str):
        raise ShardConfigError(
            f"replicas: database keys are str, got {key!r}; use the keys of "
            f"ShardedSession(databases=...), or 'default' for bind"
        )
    single = _sync_engine(value)
    items = [value] if single is not None else value
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        items = [items]
    found = tuple(_sync_engine(item) for item in items)
    if not found or any(engine is None for engine in found):
        raise ShardConfigError(
            f"replicas[{key!r}] must be an engine or a non-empty list of engines "
            f"(create_engine / create_async_engine), got {value!r}"
        )
    return tuple(e for e in found if e is not None)


def is_read(clause: Any) -> bool:
    """Whether ``clause`` only reads: a SELECT without ``FOR UPDATE`` / ``FOR SHARE``."""
    if clause is None or not getattr(clause, "is_select", False):
        return False
    return not any(isinstance(child, ForUpdateArg) for child in clause.get_children())


def prefer_from_options(state: ORMExecuteState) -> None:
    """Part of the session's ``do_orm_execute`` listener, before routing: the ``replica``
    option into bind arguments.

    Reloads of expired attributes (``state.is_column_load``) are marked too (module
    docstring). Sessions without replicas are left alone.
    """
    if getattr(state.session, "replica_router", None) is None:
        return
    option = state.execution_options.get(REPLICA_OPTION)
    if option is not None:
        if not isinstance(option, bool):
            raise ShardConfigError(
                f"execution option replica={option!r}: give True (read a replica) or False "
                f"(read the primary)"
            )
        state.bind_arguments[PREFER_KEY] = option
    elif (
        state.is_orm_statement  # is_column_load fails on text() before SQLAlchemy 2.0.x
        and state.is_column_load
        and PREFER_KEY not in state.bind_arguments
    ):
        state.bind_arguments[PREFER_KEY] = _RELOAD


class ReplicaRouter:
    """One session's replica choices (module docstring); made by the session itself.

    :param session: the session.
    :param replicas: the replicas of its databases.
    :param primaries: database key -> primary engine or connection (every key of
        ``replicas`` among them).
    """

    def __init__(self, session: Session, replicas: Replicas, primaries: Mapping[str, Any]) -> None:
        replicas.check(primaries)
        self.replicas = replicas
        self.primaries = {key: primaries[key] for key in replicas.engines}
        self.written: set[str] = set()
        """Databases written in the current transaction: their reads use the primary."""
        self.ever_written: set[str] = set()
        """Databases this session has written to: reloads read their primary."""
        self.chosen: dict[str, Engine] = {}
        """Database -> the replica the current transaction reads."""
        self.connections: list[Connection] = []
        """Replica connections of the current transaction."""
        self._replica_keys: dict[int, str] = {
            id(engine): key for key, engines in replicas.engines.items() for engine in engines
        }
        self._primary_keys: dict[int, list[str]] = {}
        for key, primary in self.primaries.items():
            self._primary_keys.setdefault(id(primary.engine), []).append(key)
        self._aliases = {id(bind): key for key, bind in self.primaries.items()}
        """Primary bind -> the key of its replicas: a ``bind`` that is also ``databases["a"]``
        reads a's replicas for unsharded tables, unless ``default`` has replicas itself."""
        self._executing = self._make_listener()
        """``before_execute`` listener of primary connections (one function, so a savepoint
        that begins the connection again adds no second one)."""

    # ----------------------------------------------------------------- queries

    def replica_key(self, connection: Connection) -> str | None:
        """The database whose replica ``connection`` reads, or None for other connections."""
        return self._replica_keys.get(id(connection.engine))

    # ----------------------------------------------------------------- routing

    def route(
        self,
        session: Session,
        database: str,
        primary: Any,
        clause: Any,
        prefer: Any,
    ) -> Any:
        """The bind of a statement on ``database`` whose primary bind is ``primary``."""
        if database not in self.primaries or prefer is False or not is_read(clause):
            return primary  # replica=True never sends a write (or an unknown statement) there
        if prefer is None and database in self.written:
            return primary
        if prefer == _RELOAD and database in self.ever_written:
            return primary
        chosen = self.chosen.get(database)
        if chosen is not None:
            return chosen
        for replica in self._candidates(database, primary):
            if self._connect(session, database, replica):
                self.chosen[database] = replica
                return replica
        return primary

    def key_of(self, database: str, primary: Any) -> str:
        """The key whose replicas serve ``database`` (another key with the same primary bind,
        when ``database`` has no replicas of its own)."""
        if database in self.primaries:
            return database
        return self._aliases.get(id(primary), database)

    def note_request(self, database: str | None, clause: Any) -> None:
        """``session.connection()`` asked for ``database`` without a read: pin its primary."""
        if database in self.primaries and not is_read(clause):
            self._wrote(database)

    def _candidates(self, database: str, primary: Any) -> Iterator[Engine]:
        engines = self.replicas.engines[database]
        key: Engine = primary.engine
        now = self.replicas.clock()
        with _lock:
            healthy = [e for e in engines if _down_until.get(e, now) <= now]
            turn = _turns.get(key, 0)
            _turns[key] = turn + 1
        if not healthy:
            return iter(())
        start = turn % len(healthy)
        return iter(healthy[start:] + healthy[:start])

    def _connect(self, session: Session, database: str, replica: Engine) -> bool:
        """Begin the replica's connection in the session's transaction; False if it is down."""
        try:
            Session.connection(session, bind_arguments={"bind": replica})
        except DBAPIError as error:
            with _lock:
                _down_until[replica] = self.replicas.clock() + self.replicas.retry_after
            cause = scrub(
                " ".join(f"{type(error.orig).__name__}: {error.orig}".split()),
                url_secrets(replica.url),
            )
            warnings.warn(
                f"replica {redact_sqlalchemy_url(replica.url)} of database {database!r} is "
                f"unavailable ({cause}); reading from another replica or the primary, and "
                f"skipping this replica for {self.replicas.retry_after:g} s",
                ReplicaUnavailable,
                stacklevel=2,
            )
            return False
        return True

    # ----------------------------------------------------------------- transactions

    def began(self, transaction: Any, connection: Connection) -> None:
        """The session began ``connection`` (its ``after_begin``)."""
        if self.replica_key(connection) is not None:
            self.connections.append(connection)
            return
        if id(connection.engine) in self._primary_keys:
            event.listen(connection, "before_execute", self._executing)  # once per connection

    def _make_listener(self) -> Callable[..., None]:
        def executing(connection: Connection, clause: Any, *args: Any) -> None:
            if not is_read(clause):
                for key in self._primary_keys.get(id(connection.engine), ()):
                    self._wrote(key)

        return executing

    def _wrote(self, database: str) -> None:
        self.written.add(database)
        self.ever_written.add(database)

    def ended(self, transaction: Any) -> None:
        """A transaction of the session ended (its ``after_transaction_end``)."""
        if transaction.parent is None:
            self.written.clear()
            self.chosen.clear()
            self.connections.clear()

    def settle(self) -> None:
        """End the replicas' read-only transactions before SQLAlchemy does; never raises.

        A replica connection that broke since its last statement is invalidated, so the
        session's rollback or close skips it instead of raising.
        """
        for connection in self.connections:
            if connection.invalidated or connection.closed:
                continue
            try:
                connection.connection.rollback()
            except (connection.dialect.loaded_dbapi.Error, SQLAlchemyError):
                try:
                    connection.invalidate()
                except SQLAlchemyError:
                    pass
