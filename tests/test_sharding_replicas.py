"""Read replicas (snowshard.sharding.replicas): which engine a session reads, and when.

Two kinds of replica:

* *stand-ins* on every backend: a second database per database, with the same tables,
  declared as the replica. It does not replicate, so which side a read went to shows in
  its answer (and in the SQL log); the tests write the row they look for on one side.
* the *real streaming replica* of the first PostgreSQL server
  (``$SNOWSHARD_TEST_POSTGRES_REPLICA_URL``, a hot standby): ``pg_is_in_recovery()`` and
  ``inet_server_port()`` prove where a read ran, two-phase commit runs next to it, and rows
  committed on the primary show up on it.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Engine, make_url

from snowshard.sharding import (
    ShardedSession,
    create_all,
    sharded_model,
    tables_by_database,
)
from snowshard.sharding.bulk import BIND_KEY
from snowshard.sharding.driver_errors import ShardOperationError
from snowshard.sharding import replicas as replicas_module
from snowshard.sharding.replicas import Replicas, ReplicaUnavailable
from snowshard.sharding.twophase import TwoPhase
from snowshard.spec import DEFAULT_DATABASE, ShardConfigError
from tests.backends import DatabaseFactory, async_url, wait_for_replica
from tests.forking import in_forked_child, needs_fork
from tests.worlds import SqlLog, declare_shop

SHOP = declare_shop(4, databases=2)  # orders_00/01 in "a" (with users), orders_02/03 in "b"
User, Order = SHOP.User, SHOP.Order
SERVERS = [
    pytest.param("postgresql", marks=pytest.mark.postgres, id="postgresql"),
    pytest.param("mysql", marks=pytest.mark.mysql, id="mysql"),
]


def _user_in(database: str) -> int:
    """A user whose orders live in ``database``."""
    model = sharded_model(Order)
    return next(u for u in range(100) if model.database_of(model.shard_of("user_id", u)) == database)


USER_A, USER_B = _user_in("a"), _user_in("b")


@dataclass
class Pair:
    """Primaries ``a`` and ``b`` with stand-in replicas ``a~r`` and ``b~r``, all logged."""

    engines: dict[str, Engine]
    log: SqlLog

    def session(self, **kw: Any) -> ShardedSession:
        replicas = kw.pop("replicas", {"a": [self.engines["a~r"]], "b": self.engines["b~r"]})
        e = self.engines
        return ShardedSession(e["a"], databases={"a": e["a"], "b": e["b"]}, replicas=replicas, **kw)

    def read_from(self) -> set[str]:
        """The databases that received statements on sharded tables since the last clear."""
        return {sent.database for sent in self.log if sent.shards}

    def seed(self, name: str, *rows: dict[str, Any]) -> None:
        """Write order rows straight into the database (primary or stand-in) ``name``."""
        model = sharded_model(Order)
        with self.engines[name].begin() as conn:
            for row in rows:
                table = model.tables[model.shard_of("user_id", row["user_id"])]
                conn.execute(insert(table), row)
        self.log.clear()


BACKENDS = [pytest.param("sqlite", id="sqlite"), *SERVERS]
TABLES = tables_by_database(SHOP.metadata)
OWN_TABLES = {"a": [*TABLES[None], *TABLES["a"]], "b": TABLES["b"]}


@pytest.fixture(scope="module", params=BACKENDS)
def shared(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Engine]]:
    """Engines a, b and their stand-ins a~r, b~r, on two databases for the module.

    The tables of a and b do not overlap, so database x holds a's tables and b's stand-in,
    database y b's tables and a's stand-in, each reached through an engine of its own.
    """
    factory = DatabaseFactory.for_request(request, tmp_path_factory.mktemp("replicas"))
    try:
        x, y = factory(request.param, 2)
        urls = {"a": x, "b~r": x, "b": y, "a~r": y}
        engines = {name: factory.engine(urls[name]) for name in ("a", "b", "a~r", "b~r")}
        for name, engine in engines.items():
            SHOP.metadata.create_all(engine, tables=OWN_TABLES[name[0]])
        yield engines
    finally:
        factory.cleanup()


@pytest.fixture
def pair(shared: dict[str, Engine], sql_log: SqlLog) -> Pair:
    """The module's stand-in pair, emptied, with a fresh SQL log."""
    for name, engine in shared.items():
        tables = OWN_TABLES[name[0]]
        SHOP.metadata.create_all(engine, tables=tables)  # a test may have dropped one
        with engine.begin() as conn:
            for table in tables:
                conn.execute(table.delete())
        sql_log.watch(engine, name)
    sql_log.clear()
    return Pair(shared, sql_log)


def _orders_of(user: int) -> Any:
    """The amounts of ``user``'s orders (the tests mark rows by amount)."""
    return select(Order.amount).where(Order.user_id == user).order_by(Order.amount)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --------------------------------------------------------------------------- routing


def test_reads_outside_a_write_go_to_the_replica(pair: Pair) -> None:
    """A SELECT before any write reads the replica's rows, and only the replica."""
    pair.seed("a", {"id": 1, "user_id": USER_A, "amount": 1})
    pair.seed("a~r", {"id": 2, "user_id": USER_A, "amount": 2})
    with pair.session() as session:
        assert session.scalars(_orders_of(USER_A)).all() == [2]
    assert pair.read_from() == {"a~r"}


def test_flush_pins_the_primary_until_the_transaction_ends(pair: Pair) -> None:
    """After a flush the session reads its own row from the primary; after commit, the replica."""
    with pair.session() as session:
        session.add(Order(user_id=USER_A, amount=7))
        assert session.scalars(_orders_of(USER_A)).all() == [7]  # autoflush, then the primary
        session.commit()
        pair.log.clear()
        assert session.scalars(_orders_of(USER_A)).all() == []  # the stand-in never got it
    assert pair.read_from() == {"a~r"}


def test_a_write_pins_only_its_own_database(pair: Pair) -> None:
    """Writing to database a keeps reads of database b on b's replica."""
    pair.seed("b~r", {"id": 5, "user_id": USER_B, "amount": 5})
    with pair.session() as session:
        session.add(Order(user_id=USER_A, amount=7))
        session.flush()
        pair.log.clear()
        assert session.scalars(_orders_of(USER_B)).all() == [5]
        session.rollback()
    assert pair.read_from() == {"b~r"}


def test_dml_and_bulk_inserts_pin_the_primary(pair: Pair) -> None:
    """An UPDATE, and an ORM bulk INSERT, send later reads of their database to the primary."""
    pair.seed("a", {"id": 1, "user_id": USER_A, "amount": 1})
    with pair.session() as session:
        session.execute(update(Order).where(Order.user_id == USER_A).values(amount=5))
        assert session.scalars(_orders_of(USER_A)).all() == [5]
        session.rollback()
        session.execute(insert(Order), [{"user_id": USER_A, "amount": 3}])
        assert session.scalars(_orders_of(USER_A)).all() == [1, 3]
        session.rollback()
    assert "a~r" not in pair.read_from()


@pytest.mark.parametrize("where", ["statement", "execute"])
def test_replica_false_reads_the_primary_without_pinning_it(pair: Pair, where: str) -> None:
    """``replica=False`` (on the statement or session.execute) reads the primary, once."""
    pair.seed("a", {"id": 1, "user_id": USER_A, "amount": 1})
    with pair.session() as session:
        if where == "statement":
            forced = session.scalars(_orders_of(USER_A).execution_options(replica=False)).all()
        else:
            forced = session.scalars(_orders_of(USER_A), execution_options={"replica": False}).all()
        assert forced == [1]
        assert session.scalars(_orders_of(USER_A)).all() == []  # the replica again


def test_replica_true_reads_the_replica_after_a_write(pair: Pair) -> None:
    """``replica=True`` reads the replica even once the session wrote to the database."""
    pair.seed("a~r", {"id": 2, "user_id": USER_A, "amount": 2})
    with pair.session() as session:
        session.add(Order(user_id=USER_A, amount=7))
        session.flush()
        forced = session.scalars(_orders_of(USER_A).execution_options(replica=True)).all()
        assert forced == [2]
        assert session.scalars(_orders_of(USER_A)).all() == [7]
        session.rollback()


def test_replica_true_never_sends_a_write_to_a_replica(pair: Pair) -> None:
    """An UPDATE with ``replica=True`` still changes the primary, not the replica."""
    pair.seed("a", {"id": 1, "user_id": USER_A, "amount": 1})
    pair.seed("a~r", {"id": 1, "user_id": USER_A, "amount": 1})
    with pair.session() as session:
        changed = update(Order).where(Order.user_id == USER_A).values(amount=9)
        session.execute(changed.execution_options(replica=True))
        session.commit()
    for name, amount in (("a", 9), ("a~r", 1)):
        with pair.engines[name].connect() as conn:
            assert conn.scalar(select(_table_of(USER_A).c.amount)) == amount


def test_a_fan_out_reads_every_database_from_its_replica(pair: Pair) -> None:
    """A keyless read over a and b reads both stand-ins; the same as an unsharded sum."""
    pair.seed("a~r", {"id": 1, "user_id": USER_A, "amount": 1})
    pair.seed("b~r", {"id": 2, "user_id": USER_B, "amount": 2})
    pair.seed("a", {"id": 3, "user_id": USER_A, "amount": 30})
    with pair.session() as session:
        assert session.scalars(select(Order.amount).order_by(Order.amount)).all() == [1, 2]
    assert pair.read_from() == {"a~r", "b~r"}


def test_a_fan_out_after_a_write_reads_that_database_from_its_primary(pair: Pair) -> None:
    """After writing to a (autoflush), a keyless read takes a's rows from the primary and
    b's from b's replica."""
    pair.seed("b~r", {"id": 2, "user_id": USER_B, "amount": 2})
    with pair.session() as session:
        session.add(Order(user_id=USER_A, amount=7))
        assert session.scalars(select(Order.amount).order_by(Order.amount)).all() == [2, 7]
        session.rollback()
    assert {s.database for s in pair.log if s.verb == "SELECT" and s.shards} == {"a", "b~r"}


def test_a_savepoint_write_pins_the_primary_too(pair: Pair) -> None:
    """A flush inside begin_nested() keeps later reads of that database on the primary."""
    with pair.session() as session:
        session.scalars(_orders_of(USER_A)).all()  # the replica, before any write
        with session.begin_nested():
            session.add(Order(user_id=USER_A, amount=7))
        assert session.scalars(_orders_of(USER_A)).all() == [7]
        session.rollback()


def test_locking_reads_and_plain_sql_go_to_the_primary(pair: Pair) -> None:
    """FOR UPDATE and text() SQL run on the primary and pin it; text().columns() reads a replica."""
    pair.seed("a", {"id": 1, "user_id": USER_A, "amount": 1})
    pair.seed("a~r", {"id": 2, "user_id": USER_A, "amount": 2})
    with pair.session() as session:
        assert session.scalars(_orders_of(USER_A).with_for_update()).all() == [1]
        assert session.scalars(_orders_of(USER_A)).all() == [1]
        session.rollback()
        session.execute(sa.text("SELECT 1"))
        assert session.scalars(_orders_of(USER_A)).all() == [1]
        session.rollback()
        typed = sa.text(f"SELECT amount FROM {_table_of(USER_A).name}").columns(amount=sa.Integer)
        assert session.scalars(typed).all() == [2]


def test_reloads_after_commit_read_the_primary(pair: Pair) -> None:
    """An object committed by the session reloads from the primary, not a lagging replica."""
    with pair.session() as session:
        order = Order(user_id=USER_A, amount=3)
        session.add(order)
        session.commit()
        assert order.amount == 3  # expired on commit: reloaded; the stand-in has no row 7


def test_unsharded_tables_read_the_replica_of_the_bind(pair: Pair) -> None:
    """Users (unsharded, in database a) are read from a's replica."""
    with pair.engines["a~r"].begin() as conn:
        conn.execute(insert(User.__table__), {"id": 1, "name": "replica"})
    pair.log.clear()
    with pair.session() as session:
        assert session.scalars(select(User.name)).all() == ["replica"]


def test_connection_for_a_select_gets_the_replica_and_without_one_the_primary(pair: Pair) -> None:
    """``session.connection()`` with a SELECT clause reads a replica; without one it pins."""
    with pair.session() as session:
        reading = session.connection(bind_arguments={BIND_KEY: "a", "clause": _orders_of(USER_A)})
        assert reading.engine is pair.engines["a~r"]
        writing = session.connection(bind_arguments={BIND_KEY: "a"})
        assert writing.engine is pair.engines["a"]
        again = session.connection(bind_arguments={BIND_KEY: "a", "clause": _orders_of(USER_A)})
        assert again.engine is pair.engines["a"]


def test_one_transaction_reads_one_replica_and_turns_rotate(database_factory: DatabaseFactory) -> None:
    """With two replicas, a transaction sticks to one; the next transaction reads the other."""
    urls = database_factory("sqlite", 3)
    main, first, second = (database_factory.engine(url) for url in urls)
    for engine in (main, first, second):
        create_all(SHOP.metadata, bind=engine, databases={"a": engine, "b": engine})
    with ShardedSession(main, replicas={DEFAULT_DATABASE: [first, second]}) as session:
        seen = [session.connection(bind_arguments={"clause": select(User)}).engine for _ in range(2)]
        session.commit()
        seen.append(session.connection(bind_arguments={"clause": select(User)}).engine)
    assert seen[0] is seen[1]
    assert {seen[1], seen[2]} == {first, second}


# --------------------------------------------------------------------------- down replicas


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_down_replica_falls_back_to_the_primary_with_a_warning(
    database_factory: DatabaseFactory, backend: str, tmp_path: Any
) -> None:
    """A replica that refuses connections: a warning naming it (no password), the primary
    answers, and the replica is skipped until ``retry_after`` passed."""
    (url,) = database_factory(backend)
    main = database_factory.engine(url)
    create_all(SHOP.metadata, bind=main, databases={"a": main, "b": main})
    if backend == "sqlite":
        down_url = f"sqlite:///{tmp_path}/missing/dir/replica.db"
    else:
        down_url = f"postgresql+psycopg://postgres:s3cret-pw@127.0.0.1:{_closed_port()}/x"
    down = database_factory.engine(down_url)
    now = [100.0]
    replicas = Replicas({DEFAULT_DATABASE: down}, retry_after=5, clock=lambda: now[0])
    with main.begin() as conn:
        conn.execute(insert(User.__table__), {"id": 1, "name": "main"})
    with pytest.warns(ReplicaUnavailable) as caught, ShardedSession(main, replicas=replicas) as s:
        assert s.scalars(select(User.name)).all() == ["main"]
    (warning,) = caught
    text = str(warning.message)
    assert "'default'" in text and "replica" in text and "s3cret" not in text
    assert make_url(down_url).render_as_string(hide_password=True) in text
    now[0] += 4  # still skipped: no second warning (filterwarnings=error would raise)
    with ShardedSession(main, replicas=replicas) as session:
        assert session.scalars(select(User.name)).all() == ["main"]
    now[0] += 2  # retried
    with pytest.warns(ReplicaUnavailable), ShardedSession(main, replicas=replicas) as session:
        session.scalars(select(User.name)).all()


@pytest.mark.parametrize("shared", SERVERS, indirect=True)
def test_a_replica_that_breaks_in_a_transaction_ends_quietly(pair: Pair) -> None:
    """Its connection killed after a read, commit and rollback still succeed."""
    engines = pair.engines
    for finish in ("commit", "rollback", "commit after a write"):
        with pair.session() as session:
            if finish == "commit after a write":
                session.add(Order(user_id=USER_B))
            session.scalars(_orders_of(USER_A)).all()
            replica = session.connection(bind_arguments={BIND_KEY: "a", "clause": _orders_of(USER_A)})
            assert replica.engine is engines["a~r"]
            _kill(replica)
            if finish == "rollback":
                session.rollback()
            else:
                session.commit()
    with engines["b"].connect() as conn:
        assert conn.scalar(select(func.count()).select_from(_table_of(USER_B))) == 1


@pytest.mark.parametrize("shared", SERVERS, indirect=True)
def test_two_phase_commit_leaves_replica_connections_out(pair: Pair) -> None:
    """twophase=True after reading a replica prepares and commits the primaries only."""
    steps: list[tuple[str, Any]] = []
    with pair.session(twophase=TwoPhase(on_step=lambda s, g, db: steps.append((s, db)))) as session:
        assert session.scalars(_orders_of(USER_A)).all() == []
        session.add_all([Order(user_id=USER_A, amount=11), Order(user_id=USER_B, amount=12)])
        session.commit()
    assert sorted(db for step, db in steps if step == "prepared") == ["a", "b"]
    with pair.engines["a"].connect() as a, pair.engines["b"].connect() as b:
        assert a.scalar(select(_table_of(USER_A).c.amount)) == 11
        assert b.scalar(select(_table_of(USER_B).c.amount)) == 12


def _table_of(user: int) -> sa.Table:
    model = sharded_model(Order)
    table: sa.Table = model.tables[model.shard_of("user_id", user)]
    return table


def _kill(victim: sa.Connection) -> None:
    """End ``victim``'s server session from another connection of its engine."""
    if victim.dialect.name == "postgresql":
        pid = victim.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        with victim.engine.connect() as conn:
            conn.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
    else:
        pid = victim.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one()
        with victim.engine.connect() as conn:
            conn.exec_driver_sql(f"KILL CONNECTION {int(pid)}")
    time.sleep(0.1)


def test_errors_on_a_replica_name_the_database_and_the_replica(pair: Pair) -> None:
    """A replica missing a table: ShardOperationError says replica, names database a."""
    with pair.engines["a~r"].begin() as conn:
        conn.execute(sa.schema.DropTable(_table_of(USER_A)))
    with pair.session() as session, pytest.raises(ShardOperationError) as caught:
        session.scalars(_orders_of(USER_A)).all()
    assert caught.value.replica and caught.value.database == "a"
    assert "replica" in str(caught.value) and "'a'" in str(caught.value)


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("replicas", "message"),
    [
        ({"nowhere": "R"}, "names no database"),
        ({"a": []}, "non-empty list of engines"),
        ({"a": ["not an engine"]}, "non-empty list of engines"),
        ({1: "R"}, "keys are str"),
        ({"a": "A"}, "also a primary engine"),
        ("R", "must map database keys"),
    ],
)
def test_bad_replica_configurations_are_refused(
    sqlite_url: str, replicas: Any, message: str
) -> None:
    """Unknown keys, non-engines, empty lists and a primary as replica raise ShardConfigError."""
    engine = sa.create_engine(sqlite_url)
    replica = sa.create_engine(sqlite_url)
    try:
        given = {"A": engine, "R": replica}
        if isinstance(replicas, dict):
            replicas = {k: [given.get(v, v) for v in vs] if isinstance(vs, list) else given[vs] for k, vs in replicas.items()}
        else:
            replicas = given[replicas]
        with pytest.raises(ShardConfigError, match=message):
            ShardedSession(engine, databases={"a": engine}, replicas=replicas)
    finally:
        engine.dispose()
        replica.dispose()


@pytest.mark.postgres
def test_a_replica_of_another_dialect_is_refused(sqlite_url: str, postgres_url: str) -> None:
    """A PostgreSQL replica of a SQLite primary raises ShardConfigError naming both."""
    engine, replica = sa.create_engine(sqlite_url), sa.create_engine(postgres_url)
    try:
        with pytest.raises(ShardConfigError, match="is postgresql, but its primary is sqlite"):
            ShardedSession(engine, replicas={DEFAULT_DATABASE: replica})
    finally:
        engine.dispose()
        replica.dispose()


@pytest.mark.parametrize("value", [0, -1.5, True, "10"])
def test_bad_retry_after_is_refused(value: Any) -> None:
    """retry_after must be a positive number of seconds."""
    with pytest.raises(ShardConfigError, match=r"retry_after=.*> 0"):
        Replicas({}, retry_after=value)


@pytest.mark.parametrize("value", [0, -2, True, 2.0, "8"])
def test_bad_max_concurrency_is_refused(value: Any) -> None:
    """max_concurrency must be an int >= 1, named in the error."""
    with pytest.raises(ShardConfigError, match=rf"max_concurrency must be an int >= 1.*got {value!r}"):
        ShardedSession(max_concurrency=value)


def test_max_concurrency_is_kept() -> None:
    """The session keeps max_concurrency (default 8) for the fan-out."""
    assert ShardedSession().max_concurrency == 8
    assert ShardedSession(max_concurrency=3).max_concurrency == 3


def test_a_replica_option_that_is_not_a_bool_is_refused(pair: Pair) -> None:
    """``replica="yes"`` raises ShardConfigError before any SQL."""
    with pair.session() as session, pytest.raises(ShardConfigError, match="replica='yes'"):
        session.scalars(_orders_of(USER_A).execution_options(replica="yes")).all()
    assert pair.read_from() == set()


# --------------------------------------------------------------------------- asyncio


def test_async_sessions_read_async_replicas(database_factory: DatabaseFactory) -> None:
    """AsyncShardedSession with AsyncEngine replicas reads the replica until it writes."""
    pytest.importorskip("aiosqlite")
    from sqlalchemy.ext.asyncio import create_async_engine

    from snowshard.sharding.aio import AsyncShardedSession

    main_url, replica_url = database_factory("sqlite", 2)
    for url, name in ((main_url, "main"), (replica_url, "replica")):
        engine = database_factory.engine(url)
        create_all(SHOP.metadata, bind=engine, databases={"a": engine, "b": engine})
        with engine.begin() as conn:
            conn.execute(insert(User.__table__), {"id": 1, "name": name})

    async def run() -> list[Any]:
        main, replica = create_async_engine(async_url(main_url)), create_async_engine(async_url(replica_url))
        try:
            async with AsyncShardedSession(main, replicas={DEFAULT_DATABASE: replica}) as session:
                first = (await session.scalars(select(User.name))).all()
                session.add(User(id=2, name="new"))
                await session.flush()
                second = (await session.scalars(select(User.name).order_by(User.id))).all()
                await session.rollback()
                return [first, second]
        finally:
            await main.dispose()
            await replica.dispose()

    assert asyncio.run(run()) == [["replica"], ["main", "new"]]


# --------------------------------------------------------------------------- a real replica


@dataclass
class Streaming:
    """A database on the first PostgreSQL server, and its copy on the streaming replica."""

    primary: Engine
    replica: Engine


@pytest.fixture(scope="module")
def streaming_database(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    postgres_primary_url: str,
    postgres_replica_url: str,
) -> Iterator[Streaming]:
    """A database with the shop's tables on the replica's primary, once the replica has
    them too."""
    factory = DatabaseFactory.for_request(request, tmp_path_factory.mktemp("streaming"))
    try:
        (url,) = factory("postgresql", server_url=postgres_primary_url)
        primary = factory.engine(url)
        create_all(SHOP.metadata, bind=primary, databases={"a": primary, "b": primary})
        copy_url = make_url(postgres_replica_url).set(database=make_url(url).database)
        replica = factory.engine(copy_url.render_as_string(hide_password=False), pool_pre_ping=True)

        def has_tables() -> bool:
            with replica.connect() as conn:
                return set(sa.inspect(conn).get_table_names()) >= {"users", "orders_00"}

        wait_for_replica(has_tables, "the test database's tables")
        yield Streaming(primary, replica)
    finally:
        factory.cleanup()


@pytest.fixture
def streaming(streaming_database: Streaming) -> Streaming:
    """The module's streaming database, emptied on the primary and (polled) on the replica."""
    tables = [*TABLES[None], *TABLES["a"], *TABLES["b"]]
    with streaming_database.primary.begin() as conn:
        for table in tables:
            conn.execute(table.delete())
    counts = select(*(select(func.count()).select_from(t).scalar_subquery() for t in tables))

    def empty() -> bool:
        with streaming_database.replica.connect() as conn:
            return not any(conn.execute(counts).one())

    wait_for_replica(empty, "the emptied tables")
    return streaming_database


def _where(session: ShardedSession, **options: Any) -> tuple[bool, int]:
    row = session.execute(
        select(func.pg_is_in_recovery(), func.inet_server_port()).execution_options(**options)
    ).one()
    return bool(row[0]), int(row[1])


@pytest.mark.postgres
def test_the_streaming_replica_serves_reads_until_the_session_writes(streaming: Streaming) -> None:
    """Reads run on the hot standby (in recovery, its port); after a flush, on the primary."""
    replica_port = streaming.replica.url.port
    primary_port = streaming.primary.url.port
    with ShardedSession(streaming.primary, replicas={DEFAULT_DATABASE: streaming.replica}) as session:
        assert _where(session) == (True, replica_port)
        assert _where(session, replica=False) == (False, primary_port)
        session.add(User(id=1, name="x"))
        session.flush()
        assert _where(session) == (False, primary_port)
        assert session.scalars(select(User.name)).all() == ["x"]
        session.commit()
        assert _where(session) == (True, replica_port)


@pytest.mark.postgres
def test_rows_committed_on_the_primary_reach_the_replica(streaming: Streaming) -> None:
    """After commit, a replica read finds the committed rows (polled: replication lags)."""
    with ShardedSession(streaming.primary, replicas={DEFAULT_DATABASE: streaming.replica}) as session:
        session.add_all([Order(user_id=u, amount=u) for u in range(6)])
        session.commit()

        def replicated() -> Any:
            total = session.scalar(select(func.sum(Order.amount)))
            session.rollback()  # a new snapshot each poll
            return total == sum(range(6))

        wait_for_replica(replicated, "the committed orders")
        assert _where(session)[0] is True


@pytest.mark.postgres
def test_two_phase_commit_never_prepares_on_the_replica(
    streaming: Streaming, database_factory: DatabaseFactory, postgres2_url: str
) -> None:
    """twophase=True with a hot-standby replica read in the transaction commits both databases."""
    (other_url,) = database_factory("postgresql", server_url=postgres2_url)
    other = database_factory.engine(other_url)
    create_all(SHOP.metadata, bind=other, databases={"a": other, "b": other})
    steps: list[tuple[str, Any]] = []
    with ShardedSession(
        streaming.primary,
        databases={"a": streaming.primary, "b": other},
        replicas={"a": streaming.replica},
        twophase=TwoPhase(on_step=lambda step, group, db: steps.append((step, db))),
    ) as session:
        assert session.scalars(_orders_of(USER_A)).all() == []  # read on the standby
        session.add_all([Order(user_id=USER_A, amount=11), Order(user_id=USER_B, amount=12)])
        session.commit()
    assert sorted(db for step, db in steps if step == "prepared") == ["a", "b"]
    with streaming.primary.connect() as a, other.connect() as b:
        assert a.scalar(select(_table_of(USER_A).c.amount)) == 11
        assert b.scalar(select(_table_of(USER_B).c.amount)) == 12


def test_no_replicas_changes_nothing(pair: Pair) -> None:
    """A session without replicas reads its primaries (and has no router)."""
    pair.seed("a", {"id": 1, "user_id": USER_A, "amount": 1})
    with pair.session(replicas=None) as session:
        assert session.replica_router is None
        assert session.scalars(_orders_of(USER_A)).all() == [1]
    assert pair.read_from() == {"a"}


@needs_fork
def test_a_forked_child_gets_a_free_lock_of_the_replica_records() -> None:
    """A fork while another thread holds the lock of the down-replica records frees it in
    the child (else its next read with replicas would hang)."""
    with replicas_module._lock:  # as a thread picking a replica holds it at the fork
        free = in_forked_child(lambda: int(replicas_module._lock.acquire(timeout=2)))
    assert free == 1
