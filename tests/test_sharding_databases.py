"""Sharding over several databases: engines per table, schema helpers, two-phase commit."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event, func, select

from snowshard.sharding import (
    UnknownDatabase,
    UnsupportedShardQuery,
    create_all,
    drop_all,
    tables_by_database,
)
from tests.worlds import SqlLog, World, WorldFactory, declare_shop

SHOP = declare_shop(4, databases={"east": [0, 1], "west": [2, 3]})
User, Order = SHOP.User, SHOP.Order

SERVERS = [
    pytest.param("postgresql", marks=pytest.mark.postgres, id="postgresql"),
    pytest.param("mysql", marks=pytest.mark.mysql, id="mysql"),
]


@pytest.fixture
def world(sharded_world: WorldFactory, sql_backend: str) -> World:
    """The shop on two databases, east (with the unsharded users) and west, per backend."""
    return sharded_world(SHOP, sql_backend)


def _tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def test_tables_by_database_follows_the_spec() -> None:
    """Each physical table is listed under its database; unsharded tables under None."""
    grouped = tables_by_database(SHOP.metadata)
    assert {k: sorted(t.name for t in v) for k, v in grouped.items()} == {
        None: ["users"],
        "east": ["items_00", "items_01", "orders_00", "orders_01"],
        "west": ["items_02", "items_03", "orders_02", "orders_03"],
    }


def test_create_all_and_drop_all_per_database(world: World) -> None:
    """create_all puts each table in its database (unsharded ones in bind); drop_all undoes it."""
    east, west = world.engines["east"], world.engines["west"]
    assert world.bind is east
    assert _tables(east) == {"users", "orders_00", "orders_01", "items_00", "items_01"}
    assert _tables(west) == {"orders_02", "orders_03", "items_02", "items_03"}
    drop_all(SHOP.metadata, bind=east, databases=world.databases)
    assert _tables(east) == _tables(west) == set()
    create_all(SHOP.metadata, bind=east, databases=world.databases)
    assert _tables(west) == {"orders_02", "orders_03", "items_02", "items_03"}


def test_create_all_needs_every_database(sqlite_url: str) -> None:
    """Leaving out the engine of a database raises UnknownDatabase, naming it."""
    engine = sa.create_engine(sqlite_url)
    try:
        with pytest.raises(UnknownDatabase, match="'west'"):
            create_all(SHOP.metadata, bind=engine, databases={"east": engine})
    finally:
        engine.dispose()


def test_writes_and_reads_go_to_the_database_of_each_table(world: World) -> None:
    """Rows of orders_00/01 are stored in 'east', of orders_02/03 in 'west', and read back."""
    with world.session() as session:
        session.add_all([Order(user_id=u, amount=u) for u in range(8)])
        session.add(User(id=1))
        session.commit()
        assert session.scalar(select(func.sum(Order.amount))) == sum(range(8))
    for name, engine in world.engines.items():
        with engine.connect() as conn:
            for shard in SHOP.orders.spec.tables_in(name):
                table = SHOP.orders.tables[shard]
                users = conn.execute(select(table.c.user_id)).scalars()
                assert sorted(users) == [shard, shard + 4]


@pytest.mark.parametrize("backend", SERVERS)
def test_two_phase_commit_prepares_every_database(
    backend: str, sharded_world: WorldFactory
) -> None:
    """Session(twophase=True) prepares both databases, then commits rows in each."""
    world = sharded_world(SHOP, backend)
    prepared: list[str] = []
    for engine in world.engines.values():
        event.listen(engine, "prepare_twophase", lambda conn, xid: prepared.append(str(xid)))
    with world.session(twophase=True) as session:
        session.add_all([Order(user_id=u, amount=1) for u in (0, 2)])
        session.commit()
    assert len(prepared) == 2
    with world.session() as session:
        assert session.scalar(select(func.count()).select_from(Order)) == 2


@pytest.mark.parametrize("backend", SERVERS)
def test_two_phase_rollback_leaves_both_databases_empty(
    backend: str, sharded_world: WorldFactory
) -> None:
    """A two-phase session rolled back after writing to both databases leaves no rows."""
    world = sharded_world(SHOP, backend)
    with world.session(twophase=True) as session:
        session.add_all([Order(user_id=u, amount=1) for u in (0, 2)])
        session.flush()
        session.rollback()
        assert session.scalar(select(func.count()).select_from(Order)) == 0


@pytest.mark.parametrize(
    "subquery",
    [
        lambda: User.id.in_(select(Order.user_id)),
        lambda: select(Order.id).where(Order.user_id == User.id).exists(),
        lambda: User.id == select(func.max(Order.user_id)).scalar_subquery(),
    ],
    ids=["in", "exists", "scalar"],
)
def test_sharded_model_in_a_subquery_across_databases_is_refused(
    world: World, sql_log: SqlLog, subquery: Any
) -> None:
    """Across databases, a sharded model inside a subquery raises before any SQL is sent."""
    with world.session() as session:
        with pytest.raises(UnsupportedShardQuery, match="inside a subquery"):
            session.scalars(select(User).where(subquery()))
    assert len(sql_log) == 0


def test_sharded_model_in_its_own_subquery_across_databases_is_refused(world: World) -> None:
    """A sharded query filtering on a subquery of itself would take a per-database max: refused."""
    with world.session() as session:
        with pytest.raises(UnsupportedShardQuery, match="Order is sharded over several"):
            session.scalars(
                select(Order).where(Order.id == select(func.max(Order.id)).scalar_subquery())
            )
