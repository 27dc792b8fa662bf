"""SQL naming a logical table never leaves a sharded session (snowshard.sharding.logical_guard).

The dangerous case is set up for real: each world's database ``b`` also holds an unsharded
table named like the logical one (``orders``, the table an application moves off), with a
row in it, so a statement that reached the database would read or write it silently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session

from snowshard.sharding import (
    AsyncShardedSession,
    ShardedSession,
    UnsupportedShardQuery,
    create_all_async,
)
from snowshard.sharding.logical_guard import LogicalTableSent, logical_tables_of
from tests.backends import DatabaseFactory, async_url
from tests.worlds import SqlLog, World, WorldFactory, declare_shop

USER = 1820  # gene 12 of 16: orders_12, in database "b" of two
OLD_ROW = 99  # the id of the row in the old unsharded "orders" table


def _world(sharded_world: WorldFactory, backend: str) -> World:
    """The shop over two databases, with an old unsharded ``orders`` table in ``b``."""
    world = sharded_world(declare_shop(16, databases=2), backend)
    old = sa.Table(
        "orders", sa.MetaData(), sa.Column("id", sa.BigInteger, primary_key=True),
        sa.Column("user_id", sa.BigInteger), sa.Column("amount", sa.Integer),
    )  # fmt: skip
    old.create(world.engines["b"])
    with world.engines["b"].begin() as conn:
        conn.execute(old.insert().values(id=OLD_ROW, user_id=USER, amount=7))
    return world


def _old_rows(world: World) -> list[Any]:
    with world.engines["b"].connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql("SELECT id, amount FROM orders")]


@contextmanager
def _stopped(world: World) -> Iterator[list[str]]:
    """Statements that reached database ``b``'s driver meanwhile (the dialect's
    ``do_execute``); on exit, the ones the world's log saw and the guard stopped are let go
    (SQLAlchemy runs engine listeners in the order they were added: the log's is first)."""
    reached: list[str] = []

    def record(cursor: Any, statement: str, parameters: Any, context: Any) -> None:
        reached.append(statement)

    engine = world.engines["b"]
    event.listen(engine, "do_execute", record)
    try:
        yield reached
    finally:
        event.remove(engine, "do_execute", record)
        assert world.log.logical, "the log saw no statement naming the logical table"
        world.log.logical.clear()


@contextmanager
def _connection_of_b(world: World) -> Iterator[sa.Connection]:
    """A sharded session's connection to database ``b`` (rolled back on exit)."""
    with ShardedSession(world.bind, databases=world.databases) as session:
        yield session.connection(bind_arguments={"bind": world.engines["b"]})


def _logical(world: World) -> sa.Table:
    table: sa.Table = world.Order.__table__
    return table


def test_a_read_naming_the_logical_table_is_stopped_before_it_is_sent(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """Core SQL on the session's connection naming ``orders`` raises, not the old table's row."""
    world = _world(sharded_world, sql_backend)
    with _connection_of_b(world) as connection:
        with _stopped(world) as reached, pytest.raises(LogicalTableSent) as caught:
            connection.execute(sa.select(_logical(world)))
        assert reached == []
    error = caught.value
    assert (error.tables, error.database) == (("orders",), "b")
    assert isinstance(error, UnsupportedShardQuery)
    assert "SELECT statement for database 'b' names the logical table orders" in str(error)


def test_a_write_naming_the_logical_table_changes_nothing(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """An UPDATE of ``orders`` through the session raises and the old table keeps its row."""
    world = _world(sharded_world, sql_backend)
    with _connection_of_b(world) as connection, _stopped(world):
        with pytest.raises(LogicalTableSent, match="an UPDATE statement for database 'b'"):
            connection.execute(sa.update(_logical(world)).values(amount=0))
    assert _old_rows(world) == [(OLD_ROW, 7)]


def test_the_verdict_holds_for_a_cached_statement(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """The same statement run twice is stopped twice (the remembered verdict is the same)."""
    world = _world(sharded_world, sql_backend)
    statement = sa.select(_logical(world).c.amount).where(_logical(world).c.user_id == USER)
    with _connection_of_b(world) as connection:
        with _stopped(world) as reached:
            for _ in range(2):
                with pytest.raises(LogicalTableSent):
                    connection.execute(statement)
        assert reached == []


def test_plain_sessions_on_the_same_engine_still_read_the_old_table(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """Only a sharded session's connections are checked: a plain Session reads ``orders``."""
    world = _world(sharded_world, sql_backend)
    ShardedSession(world.bind, databases=world.databases).close()  # guards the engines
    with Session(world.engines["b"]) as plain:
        amounts = plain.scalars(sa.select(_logical(world).c.amount)).all()
    assert amounts == [7]
    world.log.logical.clear()  # the world's log saw this plain read of the old table


def test_routed_statements_of_the_session_pass(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """Writes and reads of the model go to orders_12 beside the old table, unhindered."""
    world = _world(sharded_world, sql_backend)
    with ShardedSession(world.bind, databases=world.databases) as session:
        session.add(world.Order(user_id=USER, amount=3))
        session.commit()
        amounts = session.scalars(
            sa.select(world.Order.amount).where(world.Order.user_id == USER)
        ).all()
    assert amounts == [3]
    assert _old_rows(world) == [(OLD_ROW, 7)]


def test_logical_tables_are_found_through_columns_and_ddl(sharded_world: WorldFactory) -> None:
    """A column of the logical table in a subquery, and CREATE TABLE orders, name it."""
    world = sharded_world(declare_shop(16, databases=2), "sqlite")
    logical = _logical(world)
    physical = logical.metadata.tables["orders_12"]
    dialect = world.engines["b"].dialect
    inner = sa.select(sa.func.max(logical.c.amount)).scalar_subquery()
    mixed = sa.select(physical.c.id).where(physical.c.amount == inner)
    assert logical_tables_of(mixed.compile(dialect=dialect)) == ("orders",)
    assert logical_tables_of(sa.schema.CreateTable(logical).compile(dialect=dialect)) == (
        "orders",
    )
    assert logical_tables_of(sa.select(physical).compile(dialect=dialect)) == ()


async def _async_read_of_logical(urls: list[str], log: SqlLog) -> LogicalTableSent | None:
    shop = declare_shop(16, databases=2)
    a, b = (create_async_engine(async_url(u)) for u in urls)
    log.watch(a, "a")
    log.watch(b, "b")
    try:
        await create_all_async(shop.metadata, databases={"a": a, "b": b})
        async with AsyncShardedSession(databases={"a": a, "b": b}) as session:
            connection = await session.connection(bind_arguments={"bind": b.sync_engine})
            try:
                await connection.execute(sa.select(shop.Order.__table__))
            except LogicalTableSent as error:
                return error
        return None
    finally:
        await a.dispose()
        await b.dispose()


def test_an_async_session_is_guarded_too(
    database_factory: DatabaseFactory, sql_backend: str, sql_log: SqlLog
) -> None:
    """An AsyncShardedSession's connection stops SQL naming ``orders`` before sending it."""
    error = asyncio.run(_async_read_of_logical(database_factory(sql_backend, 2), sql_log))
    assert error is not None and (error.tables, error.database) == (("orders",), "b")
    assert sql_log.logical  # the log's listener (added first) saw it; the guard stopped it
    sql_log.logical.clear()
