"""The session that routes sharded models: :class:`ShardedSession`.

::

    engine = create_engine("sqlite:///shop.db")
    with ShardedSession(engine) as session:            # all tables in one database
        session.add(Order(user_id=1820, amount=5))     # -> orders_12 (Gene(16))
        session.commit()
        session.scalars(select(Order).where(Order.user_id == 1820)).all()   # reads orders_12

    ShardedSession(bind=main, databases={"a": engine_a, "b": engine_b}, twophase=True)

``ShardedSession`` is a plain :class:`~sqlalchemy.orm.Session` with these additions:

* :meth:`~ShardedSession.get_bind` sends each physical table to the engine of the database
  holding it (``databases[key]``; tables of the default database and unsharded models go
  to ``bind``, as usual);
* :meth:`~ShardedSession.get` / ``get_one`` on a model keyed by its ID load from the one
  physical class (and identity map) the ID names;
* two session events, registered on the class: ``before_flush`` checks every new or
  changed sharded row (:mod:`~snowshard.sharding.flush`), and ``do_orm_execute`` routes
  statements naming a logical model (:mod:`~snowshard.sharding.execute`); reads it would
  only hand back as one physical statement (a known keyed read, ``get``) are resolved
  before SQLAlchemy runs the hooks and run without them (:meth:`route_first`), unless the
  session has listeners of its own;
* with ``replicas={key: [engine, ...]}``, reads of a database the transaction has not
  written to go to one of its replicas (:mod:`~snowshard.sharding.replicas`): ``get_bind``
  returns the replica's engine, and ``connection()`` with a SELECT ``clause`` its connection.

One session holds one transaction per database, so writes to many tables of a database
commit or roll back together. Across databases, ``twophase=True`` prepares every database
before committing any (PostgreSQL needs ``max_prepared_transactions > 0``); without it a
commit that fails in one database after another committed leaves the first committed.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, Table, event, insert, inspect, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import NoResultFound
from sqlalchemy.orm import Mapper, ORMExecuteState
from sqlalchemy.sql.elements import ClauseElement
from sqlalchemy.sql.visitors import iterate

from snowshard._compat import RoutingSession, only_orm_hook
from snowshard.sharding import driver_errors
from snowshard.sharding.bulk import BIND_KEY, bulk_database
from snowshard.sharding.collation import check_string_keys
from snowshard.sharding.commit_errors import TwoPhaseConfigError
from snowshard.sharding.criteria import check_loader_criteria, inert
from snowshard.sharding.declare import logical_model
from snowshard.sharding.errors import UnknownDatabase, UnsupportedShardQuery
from snowshard.sharding.execute import DIRECT_MAPPER, route_execute, route_first
from snowshard.sharding.flush import check_flush
from snowshard.sharding.listeners import check_listeners
from snowshard.sharding.logical_guard import guard
from snowshard.sharding.model import ShardedModel, model_of_class, model_of_mapper
from snowshard.sharding.reference import is_reference
from snowshard.sharding.replicas import (
    PREFER_KEY,
    ReplicaRouter,
    Replicas,
    prefer_from_options,
)
from snowshard.sharding.rewrite import Target, criteria_options
from snowshard.sharding.server_settings import SettingsCheck
from snowshard.sharding.twophase import CommitCoordinator, TwoPhase
from snowshard.spec import DEFAULT_DATABASE, ShardConfigError

__all__ = ["ShardedSession"]

_Bind = Engine | Connection
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


class ShardedSession(RoutingSession):
    """A :class:`~sqlalchemy.orm.Session` that routes sharded models (module docstring).

    :param bind: engine of unsharded models and of sharded tables in the default
        database (all of them, for single-database sharding).
    :param databases: database key (as in ``Shards(databases=...)``) -> engine.
        ``AsyncEngine`` values are accepted, for :class:`AsyncShardedSession`.
    :param twophase: True, or a :class:`~snowshard.sharding.twophase.TwoPhase`, for the
        recoverable two-phase commit of :mod:`~snowshard.sharding.twophase`.
    :param replicas: database key -> replica engine(s), or a
        :class:`~snowshard.sharding.replicas.Replicas`: reads outside a write transaction go
        to a replica (:mod:`~snowshard.sharding.replicas`).
    :param max_concurrency: the most databases one statement queries at once (an int
        >= 1; default 8); the fan-out reads it.
    :param subqueries_first: run a subquery that a statement cannot read where it runs
        first, as a query of its own (:mod:`~snowshard.sharding.pulled`), for every
        statement that does not set the execution option ``subqueries_first`` itself.
    :param kw: everything else :class:`~sqlalchemy.orm.Session` takes (
        ``binds``, ``expire_on_commit``, ...).
    """

    def __init__(
        self,
        bind: _AnyBind | None = None,
        *,
        databases: Mapping[str, _AnyBind] | None = None,
        twophase: bool | TwoPhase = False,
        replicas: Replicas | Mapping[str, Any] | None = None,
        max_concurrency: int = 8,
        subqueries_first: bool = False,
        **kw: Any,
    ) -> None:
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or (
            max_concurrency < 1
        ):
            raise ShardConfigError(
                f"max_concurrency must be an int >= 1 (the most databases one statement "
                f"queries at once), got {max_concurrency!r}; pass e.g. max_concurrency=8"
            )
        if not isinstance(subqueries_first, bool):
            raise ShardConfigError(
                f"subqueries_first must be True or False, got {subqueries_first!r}"
            )
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
        self.max_concurrency: int = max_concurrency
        """The most databases one statement queries at once."""
        self.subqueries_first: bool = subqueries_first
        """Whether statements run their subqueries first unless they say otherwise."""
        named = {DEFAULT_DATABASE: self.bind} if self.bind is not None else {}
        primaries = {**named, **self.databases}
        config = Replicas.of(replicas)
        self.replica_router: ReplicaRouter | None = (
            None if config is None else ReplicaRouter(self, config, primaries)
        )
        """Routes reads to replicas (:mod:`~snowshard.sharding.replicas`); None without."""
        self.commits = CommitCoordinator(self, twophase)
        """Commits the databases (:mod:`~snowshard.sharding.twophase`)."""
        self._flush_connections: dict[type, Connection] | None = None
        copies = config.engines if config is not None else {}
        self._database_keys = driver_errors.database_keys(primaries, copies)
        self.settings = SettingsCheck()
        """The server settings of each database the session used, kept equal."""
        guard([b.engine for b in primaries.values()] + [e for c in copies.values() for e in c])

    def route_first(
        self,
        statement: Any,
        params: Any,
        execution_options: Any,
        bind_arguments: dict[str, Any] | None,
    ) -> tuple[Any, Any, dict[str, Any]] | None:
        """A read resolved before the ``do_orm_execute`` hooks (:func:`~.execute.route_first`),
        when this session's own hook is its only one."""
        if not only_orm_hook(self):
            return None
        return route_first(self, statement, params, execution_options, bind_arguments)

    def connection(
        self,
        bind_arguments: dict[str, Any] | None = None,
        execution_options: Any | None = None,
    ) -> Connection:
        """:meth:`Session.connection`; with replicas, a SELECT ``clause`` may get a replica's.

        Without a ``clause`` that reads, the caller may write through the connection, so
        later reads of its database use the primary until the transaction ends.
        """
        router = self.replica_router
        if router is None or (bind_arguments is not None and "bind" in bind_arguments):
            return super().connection(bind_arguments, execution_options)
        arguments = dict(bind_arguments or {})
        mapper = arguments.pop("mapper", None)
        clause = arguments.pop("clause", None)
        bind, database = self._route(mapper, clause, arguments)
        router.note_request(database, clause)
        return super().connection({"bind": bind}, execution_options)

    def rollback(self) -> None:
        """:meth:`Session.rollback`; a replica connection that broke is closed quietly."""
        if self.replica_router is not None:
            self.replica_router.settle()
        super().rollback()

    def close(self) -> None:
        """:meth:`Session.close`; a replica connection that broke is closed quietly."""
        if self.replica_router is not None:
            self.replica_router.settle()
        super().close()

    def commit(self) -> None:
        """:meth:`Session.commit`; a failure names its database (:mod:`~.twophase`)."""
        self.commits.commit(super().commit)

    def flush(self, objects: Sequence[Any] | None = None) -> None:
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
        mapper: Any | None = None,
        *,
        clause: ClauseElement | None = None,
        bind: _Bind | None = None,
        **kw: Any,
    ) -> _Bind:
        """The engine for a statement: its shard's database first, else Session's rules.

        With replicas, a read may get one of the database's replicas instead
        (:mod:`~snowshard.sharding.replicas`).
        """
        if bind is not None:
            return bind
        return self._route(mapper, clause, kw)[0]

    def _route(
        self, mapper: Any | None, clause: ClauseElement | None, kw: dict[str, Any]
    ) -> tuple[_Bind, str | None]:
        """The bind of a statement, and the database key it belongs to (None: not one)."""
        primary, database = self._primary(mapper, clause, kw)
        router = self.replica_router
        if router is None or database is None:
            return primary, database
        database = router.key_of(database, primary)
        return router.route(self, database, primary, clause, kw.get(PREFER_KEY)), database

    def _primary(
        self, mapper: Any | None, clause: ClauseElement | None, kw: dict[str, Any]
    ) -> tuple[_Bind, str | None]:
        if not self.databases:  # one database: Session's own rules (bind, binds)
            found = super().get_bind(mapper, clause=clause, **kw)
            return found, (DEFAULT_DATABASE if found is self.bind else None)
        database: str | None = kw.get(BIND_KEY)
        if database is None and mapper is not None:
            inspected = inspect(mapper)
            database = _database_of_mapper(inspected)
            if database is not None or is_reference(getattr(inspected, "local_table", None)):
                # an ORM bulk statement asks for its base (logical) mapper's connection
                database = bulk_database(self) or database
        if database is None and clause is not None and self.databases:
            database = _database_of_clause(clause)
        if database is not None:
            return self.engine_for(database), database
        found = super().get_bind(mapper, clause=clause, **kw)
        return found, (DEFAULT_DATABASE if found is self.bind else None)

    def _shard_of_ident(self, entity: Any, ident: Any) -> tuple[ShardedModel, int] | None:
        """The model and shard an identity names, for a logical model keyed by its ID (else
        None)."""
        model = logical_model(entity) if isinstance(entity, type) else None
        if model is None:
            return None
        key = model.id_key
        if key is None or key not in model.keys:
            return None
        value = ident
        if isinstance(ident, (tuple, list)):
            value = ident[0] if len(ident) == 1 else None
        elif isinstance(ident, Mapping):
            value = ident.get(key)
        if value is None:
            return None
        shard = model.shard_of(key, value)
        if isinstance(value, str):  # a string key: only where the database matches exactly
            check_string_keys(model, self.get_bind(mapper=model.mappers[shard]).dialect.name)
        return model, shard

    def get(self, entity: Any, ident: Any, **kw: Any) -> Any:
        """:meth:`Session.get`; a model keyed by its ID reads the one table the ID names."""
        found = self._shard_of_ident(entity, ident)
        if found is None:
            return super().get(entity, ident, **kw)
        model, shard = found
        check_listeners((model,))
        given = kw.pop("options", None) or ()
        check_loader_criteria(given, (model,))
        targets = {model: Target(model, (shard,))}
        kw["options"] = [inert(o, targets) for o in given] + criteria_options(given, targets)
        options = {**(kw.pop("execution_options", None) or {}), DIRECT_MAPPER: model.mappers[shard]}
        arguments = kw.pop("bind_arguments", None)
        if self.databases:  # the ID named the table, so its database is known: say so
            arguments = {BIND_KEY: model.database_of(shard), **(arguments or {})}
        return super().get(
            model.classes[shard], ident, execution_options=options, bind_arguments=arguments, **kw
        )

    def get_one(self, entity: Any, ident: Any, **kw: Any) -> Any:
        """:meth:`Session.get_one`, routed like :meth:`get`."""
        found = self.get(entity, ident, **kw)
        if found is None:
            raise NoResultFound("No row was found when one was required")
        return found

    def bulk_insert_mappings(
        self, mapper: Any, mappings: Any, return_defaults: bool = False, render_nulls: bool = False
    ) -> None:
        """:meth:`Session.bulk_insert_mappings` (legacy); for a sharded model, the rows go
        to their tables as ``session.execute(insert(Order), rows)`` sends them."""
        model = _sharded_model_of(mapper)
        if model is None:
            super().bulk_insert_mappings(mapper, mappings, return_defaults, render_nulls)
            return
        if return_defaults or render_nulls:
            raise UnsupportedShardQuery(
                f"bulk_insert_mappings({model.name}, ..., return_defaults/render_nulls) is not "
                f"routed; use session.execute(insert({model.name}).returning(...), rows)"
            )
        self.execute(insert(model.cls), list(mappings))

    def bulk_update_mappings(self, mapper: Any, mappings: Any) -> None:
        """:meth:`Session.bulk_update_mappings` (legacy); for a sharded model, each row is
        updated in its table as ``session.execute(update(Order), rows)`` updates it."""
        model = _sharded_model_of(mapper)
        if model is None:
            super().bulk_update_mappings(mapper, mappings)
            return
        self.execute(update(model.cls), list(mappings))

    def bulk_save_objects(self, objects: Any, *args: Any, **kw: Any) -> None:
        """:meth:`Session.bulk_save_objects` (legacy), refused for sharded objects: it
        writes each class through one connection, which is not each row's database."""
        objects = list(objects)
        sharded = [model_of_class(type(o)) for o in objects]
        names = sorted({entry[0].name for entry in sharded if entry is not None})
        if names:
            raise UnsupportedShardQuery(
                f"bulk_save_objects() of {', '.join(names)} objects is not routed (each row "
                "would be written to one database, not its own); use session.add_all(objects) "
                "and flush, or session.execute(insert(Model), rows)"
            )
        super().bulk_save_objects(objects, *args, **kw)


def _sharded_model_of(mapper: Any) -> ShardedModel | None:
    """The sharded model of a class or mapper, logical or physical; None for others."""
    found = inspect(mapper, raiseerr=False)
    entry = model_of_mapper(found) if isinstance(found, Mapper) else None
    return entry[0] if entry is not None else None


def _database_of_mapper(mapper: Any) -> str | None:
    if not isinstance(mapper, Mapper):
        return None
    entry = model_of_mapper(mapper)
    if entry is None:
        return None
    model, shard = entry
    return model.database_of(shard if shard is not None else 0)


def _database_of_clause(clause: ClauseElement) -> str | None:
    for element in iterate(clause):
        # physical tables carry their ShardInfo in Table.info (not hasattr(element, "c"):
        # that reads Select.c, deprecated since SQLAlchemy 2.0 and an error under -W error)
        shard_info = element.info.get("snowshard") if isinstance(element, Table) else None
        if shard_info is not None:
            database: str = shard_info.spec.database_of(shard_info.shard)
            return database
    return None


def _after_begin(session: ShardedSession, transaction: Any, connection: Connection) -> None:
    """Every connection a sharded session begins: replicas, commits, error names, then the
    server settings (:mod:`~snowshard.sharding.server_settings`).

    One listener on the class (registered once, as SQLAlchemy recommends) rather than
    three per session: registering listeners on each new session cost more than a
    keyed read."""
    if session.replica_router is not None:
        session.replica_router.began(transaction, connection)
    session.commits.began(transaction, connection)
    driver_errors.mark_begun(session._database_keys, connection)
    database = session._database_keys.get(id(connection.engine))
    if database is not None:  # after the two-phase branch began: XA START comes first
        session.settings.began(database, connection)


def _after_transaction_end(session: ShardedSession, transaction: Any) -> None:
    if session.replica_router is not None:
        session.replica_router.ended(transaction)


def _do_orm_execute(state: ORMExecuteState) -> Any:
    """Every ORM statement a sharded session executes: the ``replica`` option, then routing.

    One listener rather than two: each ``do_orm_execute`` listener costs every statement,
    keyed reads included."""
    prefer_from_options(state)
    return route_execute(state)


event.listen(ShardedSession, "after_begin", _after_begin)
event.listen(ShardedSession, "after_transaction_end", _after_transaction_end)
event.listen(ShardedSession, "do_orm_execute", _do_orm_execute)
event.listen(ShardedSession, "before_flush", check_flush)

