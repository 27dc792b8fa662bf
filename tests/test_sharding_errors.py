"""Bad input at flush and query time: a specific error, raised before any SQL is sent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import BigInteger, Numeric, cast, func, select, update
from sqlalchemy.orm import Mapped, mapped_column

from snowshard.orm import snowflake_pk
from snowshard.sharding import (
    FanOutForbidden,
    InvalidShardKey,
    MissingShardKey,
    Sharded,
    ShardedSession,
    ShardKeyChanged,
    ShardKeyTypeError,
    Shards,
    UnknownDatabase,
    UnsupportedShardQuery,
)
from snowshard.strategies import Mod
from tests.worlds import IDS, SqlLog, World, WorldFactory, declare_shop

SHOP = declare_shop(4)
Order = SHOP.Order


class Ledger(Sharded, SHOP.base):  # type: ignore[name-defined,misc]
    __tablename__ = "ledger"
    __shards__ = Shards(4, key="user_id", fan_out=False)
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)


class Visit(Sharded, SHOP.base):  # type: ignore[name-defined,misc]
    __tablename__ = "visits"
    __shards__ = Shards(3, key="user_id", strategy=Mod(3))
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)


class Split(Sharded, SHOP.base):  # type: ignore[name-defined,misc]
    __tablename__ = "split"
    __shards__ = Shards(2, key="user_id", databases={"a": [0], "b": [1]})
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)


@pytest.fixture
def world(sharded_world: WorldFactory) -> World:
    """The shop and the models above on SQLite (databases default, a and b)."""
    return sharded_world(SHOP)


@pytest.fixture
def session(world: World) -> Iterator[ShardedSession]:
    """A session over eight orders and eight ledger rows (users 0..7); the log starts empty."""
    with world.session() as session:
        session.add_all([Order(user_id=u, amount=u) for u in range(8)])
        session.add_all([Ledger(user_id=u) for u in range(8)])
        session.commit()
        world.log.clear()
        yield session


def test_gene_parent_cleared_before_flush(session: ShardedSession, sql_log: SqlLog) -> None:
    """An order whose user_id was set to None after construction is refused at flush."""
    order = Order(user_id=5)
    order.user_id = None
    session.add(order)
    with pytest.raises(MissingShardKey, match="set to None"):
        session.flush()
    assert len(sql_log) == 0


def test_key_changed_on_a_new_row(session: ShardedSession, sql_log: SqlLog) -> None:
    """A new order whose user_id moved to another shard before flush is refused."""
    order = Order(user_id=5)
    order.user_id = 6
    session.add(order)
    with pytest.raises(ShardKeyChanged, match="belongs to shard 2"):
        session.flush()
    assert len(sql_log) == 0


def test_key_changed_within_the_shard_is_allowed(session: ShardedSession) -> None:
    """Changing user_id to another value of the same shard is an ordinary update."""
    order = session.scalars(select(Order).where(Order.user_id == 1)).one()
    order.user_id = 5
    session.commit()
    assert session.scalar(select(func.count()).select_from(Order).where(Order.user_id == 5)) == 2


@pytest.mark.parametrize(
    ("value", "error"),
    [("abc", InvalidShardKey), (1.5, ShardKeyTypeError), (-1, InvalidShardKey)],
    ids=["not-decimal", "float", "negative"],
)
def test_bad_key_in_where(
    session: ShardedSession, sql_log: SqlLog, value: Any, error: type[Exception]
) -> None:
    """A WHERE key value the strategy cannot route raises before the query is sent."""
    with pytest.raises(error):
        session.scalars(select(Order).where(Order.user_id == value)).all()
    assert len(sql_log) == 0


def test_bad_id_in_get(session: ShardedSession, sql_log: SqlLog) -> None:
    """session.get with an ID of the wrong type raises before any SQL."""
    with pytest.raises(ShardKeyTypeError):
        session.get(Order, 1.5)
    assert len(sql_log) == 0


def test_decimal_string_key_routes_like_its_number(session: ShardedSession) -> None:
    """WHERE user_id == '5' reads the table of 5 and finds its row."""
    assert [o.user_id for o in session.scalars(select(Order).where(Order.user_id == "5"))] == [5]


def test_fan_out_forbidden_without_key(session: ShardedSession, sql_log: SqlLog) -> None:
    """A model declared fan_out=False refuses a query without its shard key."""
    with pytest.raises(FanOutForbidden, match="fan_out=False.*user_id"):
        session.scalars(select(Ledger)).all()
    assert len(sql_log) == 0


def test_fan_out_forbidden_allows_routed_queries(session: ShardedSession) -> None:
    """The same model answers queries that name its key, even over several shards."""
    found = session.scalars(select(Ledger.user_id).where(Ledger.user_id.in_([1, 2, 3]))).all()
    assert sorted(found) == [1, 2, 3]


def test_fan_out_forbidden_for_bulk_delete(session: ShardedSession, sql_log: SqlLog) -> None:
    """delete(Ledger) without key raises FanOutForbidden too."""
    with pytest.raises(FanOutForbidden):
        session.execute(sa.delete(Ledger).where(Ledger.id > 0))
    assert len(sql_log) == 0


def test_bulk_update_moving_rows_is_refused(session: ShardedSession, sql_log: SqlLog) -> None:
    """update(Order).values(user_id=...) into another shard raises ShardKeyChanged."""
    with pytest.raises(ShardKeyChanged, match="cannot move"):
        session.execute(update(Order).where(Order.user_id == 1).values(user_id=2))
    assert len(sql_log) == 0


def test_having_over_an_unmergeable_aggregate_is_refused(
    session: ShardedSession, sql_log: SqlLog
) -> None:
    """HAVING over SUM(DISTINCT) of a NUMERIC is not merged from partial groups: refused,
    no SQL."""
    query = (
        select(Order.user_id, func.count())
        .where(Order.user_id.in_([1, 2]))
        .group_by(Order.user_id)
        .having(func.sum(cast(Order.amount, Numeric(8, 2)).distinct()) > 0)
    )
    with pytest.raises(UnsupportedShardQuery, match="DISTINCT"):
        session.execute(query)
    assert len(sql_log) == 0


def test_avg_distinct_of_decimals_across_shards_is_unsupported(session: ShardedSession) -> None:
    """AVG(DISTINCT x) of non-integers over several shards is refused, saying why."""
    query = select(func.avg(cast(Order.amount, Numeric(8, 2)).distinct())).where(
        Order.user_id.in_([1, 2])
    )
    with pytest.raises(UnsupportedShardQuery, match="integers only"):
        session.execute(query)


def test_join_of_models_sharded_differently_is_unsupported(session: ShardedSession) -> None:
    """Orders (Gene(4)) and visits (Mod(3)) cannot be joined shard by shard."""
    query = select(Order.id, Visit.id).join(Visit, Visit.user_id == Order.user_id)
    with pytest.raises(UnsupportedShardQuery, match="sharded differently"):
        session.execute(query)


def test_unknown_database(world: World) -> None:
    """A session without an engine for database 'b' says which one to pass."""
    with ShardedSession(world.bind, databases={"a": world.engines["a"]}) as session:
        with pytest.raises(UnknownDatabase, match="'b'"):
            session.add(Split(user_id=1))
            session.flush()


def test_empty_in_list_reads_nothing(session: ShardedSession) -> None:
    """WHERE key IN () returns no rows and a zero count."""
    assert session.scalars(select(Order).where(Order.user_id.in_([]))).all() == []
    assert session.scalar(select(func.count()).select_from(Order).where(Order.id.in_([]))) == 0


def test_or_of_keys_reads_both_shards(session: ShardedSession, sql_log: SqlLog) -> None:
    """user_id == 1 OR user_id == 2 reads exactly the two shards of 1 and 2."""
    found = session.scalars(
        select(Order.user_id).where((Order.user_id == 1) | (Order.user_id == 2))
    ).all()
    assert sorted(found) == [1, 2]
    assert sorted(sql_log.tables(), key=sorted) == [{"orders_01"}, {"orders_02"}]


def test_nothing_stays_half_routed_after_an_error(session: ShardedSession) -> None:
    """After a refused flush and a rollback, the session works and the shards are intact."""
    order = Order(user_id=5)
    order.user_id = 6
    session.add(order)
    with pytest.raises(ShardKeyChanged):
        session.flush()
    session.rollback()
    assert session.scalar(select(func.count()).select_from(Order)) == 8
