"""The session that routes sharded models: :class:`ShardedSession`.

::

    engine = create_engine("sqlite:///shop.db")
    with ShardedSession(engine) as session:            # all tables in one database
        session.add(Order(user_id=1820, amount=5))     # -> orders_12 (Gene(16))
        session.commit()
        session.scalars(select(Order).where(Order.user_id == 1820)).all()   # reads orders_12

    ShardedSession(bind=main, databases={"a": engine_a, "b": engine_b}, twophase=True)

``ShardedSession`` is a plain :class:`~sqlalchemy.orm.Session` with three additions:

* :meth:`~ShardedSession.get_bind` sends each physical table to the engine of the database
  holding it (``databases[key]``; tables of the default database and unsharded models go
  to ``bind``, as usual);
* :meth:`~ShardedSession.get` / ``get_one`` on a model keyed by its ID load from the one
  physical class (and identity map) the ID names;
* two session events, registered on the class: ``before_flush`` checks every new or
  changed sharded row (:mod:`~snowshard.sharding.flush`), and ``do_orm_execute`` routes
  statements naming a logical model (:mod:`~snowshard.sharding.execute`).

One session holds one transaction per database, so writes to many tables of a database
commit or roll back together. Across databases, ``twophase=True`` prepares every database
before committing any (PostgreSQL needs ``max_prepared_transactions > 0``); without it a
commit that fails in one database after another committed leaves the first committed.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, Optional, TypeVar, Union

from sqlalchemy import Engine, Table, event, inspect
from sqlalchemy.engine import Connection
from sqlalchemy.exc import NoResultFound
from sqlalchemy.orm import Mapper, Session
from sqlalchemy.sql.elements import ClauseElement
from sqlalchemy.sql.visitors import iterate

from snowshard.sharding.bulk import BIND_KEY, bulk_database
from snowshard.sharding import driver_errors
from snowshard.sharding.errors import UnknownDatabase
from snowshard.sharding.execute import route_execute
from snowshard.sharding.flush import check_flush
from snowshard.sharding.twophase import CommitCoordinator, TwoPhase
from snowshard.sharding.commit_errors import TwoPhaseConfigError
from snowshard.sharding.execute import DIRECT_MAPPER
from snowshard.sharding.model import model_of_class
from snowshard.sharding.reference import is_reference
from snowshard.spec import DEFAULT_DATABASE, ShardConfigError

__all__ = ["ShardedSession"]

_O = TypeVar("_O")
_Bind = Union[Engine, Connection]
_AnyBind = Any  # an Engine or Connection; or their asyncio wrappers, for AsyncShardedSession


def _sync(bind: _AnyBind) -> _Bind:
    """The sync engine or connection behind ``bind``.

    An ``AsyncEngine`` can only exist once ``sqlalchemy.ext.asyncio`` is imported, so that
    module (which needs greenlet, part of the ``async`` extra) is looked up, never imported.
    """
    aio = sys.modules.get("sqlalchemy.ext.asyncio")
    if aio is not None:
        if isinstance(bind, aio.AsyncEngine):
            engine: Engine = bind.sync_engine
            return engine
        if isinstance(bind, aio.AsyncConnection):
            connection: Connection = bind.sync_connection
            return connection
    sync: _Bind = bind
    return sync


class ShardedSession(Session):
    """A :class:`~sqlalchemy.orm.Session` that routes sharded models (module docstring).

    :param bind: engine of unsharded models and of sharded tables in the default
        database (all of them, for single-database sharding).
    :param databases: database key (as in ``Shards(databases=...)``) -> engine.
        ``AsyncEngine`` values are accepted, for :class:`AsyncShardedSession`.
    :param twophase: True, or a :class:`~snowshard.sharding.twophase.TwoPhase`, for the
        recoverable two-phase commit of :mod:`~snowshard.sharding.twophase`.
    :param kw: everything else :class:`~sqlalchemy.orm.Session` takes (
        ``binds``, ``expire_on_commit``, ...).
    """

    def __init__(
        self,
        bind: Optional[_AnyBind] = None,
        *,
        databases: Optional[Mapping[str, _AnyBind]] = None,
        twophase: Union[bool, TwoPhase] = False,
        **kw: Any,
    ) -> None:
        if databases is not None and (
            not isinstance(databases, Mapping) or not all(isinstance(k, str) for k in databases)
        ):
            raise ShardConfigError(
                f"databases must map database keys (str) to engines, got {databases!r}"
            )
        if not isinstance(twophase, (bool, TwoPhase)):
            raise TwoPhaseConfigError(
                f"twophase must be True, False or a TwoPhase(...), got {twophase!r}"
            )
        super().__init__(bind=_sync(bind) if bind is not None else None, **kw)
        self.databases: dict[str, _Bind] = {k: _sync(v) for k, v in (databases or {}).items()}
        self.commits = CommitCoordinator(self, twophase)
        """Commits the databases (:mod:`~snowshard.sharding.twophase`)."""
        self._flush_connections: Optional[dict[type, Connection]] = None
        named = {DEFAULT_DATABASE: self.bind} if self.bind is not None else {}
        driver_errors.install(self, {**named, **self.databases})

    def commit(self) -> None:
        """:meth:`Session.commit`; a failure names its database (:mod:`~.twophase`)."""
        self.commits.commit(super().commit)

    def flush(self, objects: Optional[Sequence[Any]] = None) -> None:
        """:meth:`Session.flush`; with several databases, each row goes to its own."""
        if not self.databases:
            super().flush(objects)
            return
        self._flush_connections = {}
        try:
            super().flush(objects)
        finally:
            self._flush_connections = None

    @property
    def connection_callable(self) -> Any:  # type: ignore[override]
        """During a flush over several databases: the connection for each row.

        The unit of work asks for one connection per *base* mapper, which for physical
        classes is the logical one; this SQLAlchemy hook lets each row choose its own.
        It stays None outside flushes, so ORM bulk statements keep working.
        """
        return None if self._flush_connections is None else self._connection_for_row

    def _connection_for_row(
        self, mapper: Any = None, instance: Any = None, **kw: Any
    ) -> Connection:
        assert self._flush_connections is not None
        kind = type(instance)
        connection = self._flush_connections.get(kind)
        if connection is None:
            entry = model_of_class(kind)
            arguments: dict[str, Any] = {"mapper": mapper}
            if entry is not None and entry[1] is not None:
                arguments = {BIND_KEY: entry[0].database_of(entry[1])}
            connection = self.connection(bind_arguments=arguments)
            self._flush_connections[kind] = connection
        return connection

    def engine_for(self, database: str) -> _Bind:
        """The engine (or connection) serving ``database``."""
        found = self.databases.get(database)
        if found is not None:
            return found
        if self.bind is not None and (database == DEFAULT_DATABASE or not self.databases):
            return self.bind
        raise UnknownDatabase(
            f"sharded tables live in database {database!r}, but this session has no engine "
            f"for it; pass databases={{{database!r}: engine, ...}} to ShardedSession"
        )

    def get_bind(
        self,
        mapper: Optional[Any] = None,
        *,
        clause: Optional[ClauseElement] = None,
        bind: Optional[_Bind] = None,
        **kw: Any,
    ) -> _Bind:
        """The engine for a statement: its shard's database first, else Session's rules."""
        if bind is not None:
            return bind
        if not self.databases:  # one database: Session's own rules (bind, binds)
            return super().get_bind(mapper, clause=clause, **kw)
        database: Optional[str] = kw.get(BIND_KEY)
        if database is None and mapper is not None:
            inspected = inspect(mapper)
            database = _database_of_mapper(inspected)
            if database is not None or is_reference(getattr(inspected, "local_table", None)):
                # an ORM bulk statement asks for its base (logical) mapper's connection
                database = bulk_database(self) or database
        if database is None and clause is not None and self.databases:
            database = _database_of_clause(clause)
        if database is not None:
            return self.engine_for(database)
        return super().get_bind(mapper, clause=clause, bind=bind, **kw)

    def _shard_of_ident(self, entity: Any, ident: Any) -> Optional[int]:
        """The shard an identity names, for a logical model keyed by its ID (else None)."""
        entry = model_of_class(entity)
        if entry is None or entry[1] is not None:
            return None
        model = entry[0]
        key = model.id_key
        if key is None or key not in model.keys:
            return None
        value = ident
        if isinstance(ident, (tuple, list)):
            value = ident[0] if len(ident) == 1 else None
        elif isinstance(ident, Mapping):
            value = ident.get(key)
        return None if value is None else model.shard_of(key, value)

    def get(self, entity: Any, ident: Any, **kw: Any) -> Any:
        """:meth:`Session.get`; a model keyed by its ID reads the one table the ID names."""
        shard = self._shard_of_ident(entity, ident)
        if shard is None:
            return super().get(entity, ident, **kw)
        model = entity.__snowshard__
        options = {**(kw.pop("execution_options", None) or {}), DIRECT_MAPPER: model.mappers[shard]}
        return super().get(model.classes[shard], ident, execution_options=options, **kw)

    def get_one(self, entity: Any, ident: Any, **kw: Any) -> Any:
        """:meth:`Session.get_one`, routed like :meth:`get`."""
        found = self.get(entity, ident, **kw)
        if found is None:
            raise NoResultFound("No row was found when one was required")
        return found


def _database_of_mapper(mapper: Any) -> Optional[str]:
    if not isinstance(mapper, Mapper):
        return None
    entry = model_of_class(mapper.class_)
    if entry is None:
        return None
    model, shard = entry
    return model.database_of(shard if shard is not None else 0)


def _database_of_clause(clause: ClauseElement) -> Optional[str]:
    for element in iterate(clause):
        # physical tables carry their ShardInfo in Table.info (not hasattr(element, "c"):
        # that reads Select.c, deprecated since SQLAlchemy 2.0 and an error under -W error)
        shard_info = element.info.get("snowshard") if isinstance(element, Table) else None
        if shard_info is not None:
            database: str = shard_info.spec.database_of(shard_info.shard)
            return database
    return None


event.listen(ShardedSession, "do_orm_execute", route_execute)
event.listen(ShardedSession, "before_flush", check_flush)

