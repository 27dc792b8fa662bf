"""Core statements on a logical table (``Model.__table__``) route like ORM ones."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
import sqlalchemy as sa
from sqlalchemy import func, select
from sqlalchemy.engine import CursorResult

from snowshard.sharding import ShardedSession, UnsupportedShardQuery
from tests.worlds import SqlLog, World, WorldFactory, declare_shop

SHOP = declare_shop(4)
Order = SHOP.Order


@pytest.fixture
def world(sharded_world: WorldFactory) -> World:
    """The shop on SQLite with one order for each user 0..7 (amount = user)."""
    world = sharded_world(SHOP)
    with world.session() as session:
        session.add_all([Order(user_id=i, amount=i) for i in range(8)])
        session.commit()
    world.log.clear()
    return world


@pytest.fixture
def session(world: World) -> Iterator[ShardedSession]:
    with world.session() as session:
        yield session


def test_core_select_with_key_reads_one_table(session: ShardedSession, sql_log: SqlLog) -> None:
    """select(orders).where(orders.c.user_id == 6) reads orders_02 only."""
    table = Order.__table__
    rows = session.execute(select(table.c.amount).where(table.c.user_id == 6)).scalars().all()
    assert rows == [6]
    assert sql_log.tables() == [{"orders_02"}]
    assert "FROM orders_02" in sql_log.statements()[0]


def test_core_aggregate_fans_out_in_one_union(session: ShardedSession, sql_log: SqlLog) -> None:
    """A Core SUM without key is one UNION ALL statement over the four tables."""
    table = Order.__table__
    assert session.execute(select(func.sum(table.c.amount))).scalar() == sum(range(8))
    assert sql_log.tables() == [{f"orders_0{i}" for i in range(4)}]
    assert "UNION ALL" in sql_log.statements()[0]


def test_core_update_routes_by_key(session: ShardedSession, sql_log: SqlLog) -> None:
    """update(orders).where(orders.c.user_id == 3) changes orders_03 only."""
    table = Order.__table__
    statement = sa.update(table).where(table.c.user_id == 3).values(amount=30)
    assert cast("CursorResult[Any]", session.execute(statement)).rowcount == 1
    assert [(s.verb, s.tables) for s in sql_log] == [("UPDATE", {"orders_03"})]


def test_fan_out_statement_is_compiled_once(session: ShardedSession) -> None:
    """Equal fan-out statements share one compiled form: the UNION's cache key is stable."""
    cache: dict[object, object] = {}
    for _ in range(3):  # a new statement object each time, as an application builds it
        query = select(Order).where(Order.amount > 2).order_by(Order.id.desc()).limit(3)
        assert len(session.scalars(query, execution_options={"compiled_cache": cache}).all()) == 3
        session.expunge_all()
    assert len(cache) == 1


def test_single_row_insert_with_values_is_routed(session: ShardedSession, sql_log: SqlLog) -> None:
    """insert(Order).values(user_id=9) goes to orders_01 and gets an ID with 9's gene."""
    session.execute(sa.insert(Order).values(user_id=9, amount=90))
    assert [(s.verb, s.tables) for s in sql_log] == [("INSERT", {"orders_01"})]
    (new_id,) = session.execute(select(Order.id).where(Order.user_id == 9)).scalars()
    assert new_id % 16 == 9


def test_values_list_insert_on_the_table_routes_each_row(
    session: ShardedSession, sql_log: SqlLog
) -> None:
    """insert(orders).values([...]) writes user 9's row to orders_01 and user 2's to
    orders_02, one INSERT each, with IDs of their genes."""
    table = Order.__table__
    session.execute(
        sa.insert(table).values([{"user_id": 9, "amount": 90}, {"user_id": 2, "amount": 20}])
    )
    assert sorted((s.verb, sorted(s.tables)) for s in sql_log) == [
        ("INSERT", ["orders_01"]),
        ("INSERT", ["orders_02"]),
    ]
    new = session.execute(select(Order.id, Order.user_id).where(Order.amount.in_([20, 90])))
    assert sorted((i % 16, u) for i, u in new) == [(2, 2), (9, 9)]


def test_insert_from_select_is_refused(session: ShardedSession, sql_log: SqlLog) -> None:
    """insert().from_select(...) is refused as such (not as a row without its key), asking
    for the rows to be selected and passed, before any SQL."""
    rows = select(Order.user_id, Order.amount).where(Order.user_id == 1)
    with pytest.raises(UnsupportedShardQuery, match=r"from_select.*pass them"):
        session.execute(sa.insert(Order).from_select(["user_id", "amount"], rows))
    assert len(sql_log) == 0


def test_keys_no_shard_satisfies_are_sent_as_written(
    session: ShardedSession, sql_log: SqlLog
) -> None:
    """delete() where user_id IN (1, 2) AND user_id IN (3, 4), which no shard satisfies,
    deletes nothing from the one table that answers, with neither IN emptied there."""
    statement = sa.delete(Order).where(Order.user_id.in_([1, 2]), Order.user_id.in_([3, 4]))
    assert cast("CursorResult[Any]", session.execute(statement)).rowcount == 0
    assert [(s.verb, s.tables) for s in sql_log] == [("DELETE", {"orders_00"})]
    # the IN of users 1 and 2 (shards 1 and 2) is kept whole, not emptied for shard 0
    assert sorted(next(iter(sql_log)).params) == [1, 2, 4]
