"""Core statements on a logical table (``Model.__table__``) route like ORM ones."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import BigInteger, Integer, event, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, ShardedSession, Shards, UnsupportedShardQuery, create_all

IDS = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=29)


class Base(DeclarativeBase):
    pass


class Order(Sharded, Base):
    __tablename__ = "orders"
    __shards__ = Shards(4, key=("id", "user_id"))
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)
    amount: Mapped[int] = mapped_column(Integer)


@pytest.fixture
def session() -> Iterator[tuple[ShardedSession, list[str]]]:
    engine = sa.create_engine("sqlite://")
    create_all(Base.metadata, bind=engine)
    sent: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda c, cur, s, *a: sent.append(s))
    try:
        with ShardedSession(engine) as session:
            session.add_all([Order(user_id=i, amount=i) for i in range(8)])
            session.commit()
            sent.clear()
            yield session, sent
    finally:
        engine.dispose()


def test_core_select_with_key_reads_one_table(session: tuple[ShardedSession, list[str]]) -> None:
    """select(orders).where(orders.c.user_id == 6) reads orders_02 only."""
    db, sent = session
    table = Order.__table__
    rows = db.execute(select(table.c.amount).where(table.c.user_id == 6)).scalars().all()
    assert rows == [6]
    assert len(sent) == 1 and "FROM orders_02" in sent[0]


def test_core_aggregate_fans_out_in_one_union(session: tuple[ShardedSession, list[str]]) -> None:
    """A Core SUM without key is one UNION ALL statement over the four tables."""
    db, sent = session
    table = Order.__table__
    assert db.execute(select(func.sum(table.c.amount))).scalar() == sum(range(8))
    assert len(sent) == 1 and all(f"orders_0{i}" in sent[0] for i in range(4))


def test_core_update_routes_by_key(session: tuple[ShardedSession, list[str]]) -> None:
    """update(orders).where(orders.c.user_id == 3) changes orders_03 only."""
    db, sent = session
    table = Order.__table__
    assert db.execute(sa.update(table).where(table.c.user_id == 3).values(amount=30)).rowcount == 1
    assert [s.split()[1] for s in sent] == ["orders_03"]


def test_fan_out_statement_is_compiled_once(session: tuple[ShardedSession, list[str]]) -> None:
    """Equal fan-out statements share one compiled form: the UNION's cache key is stable."""
    db, _ = session
    cache: dict[object, object] = {}
    for _ in range(3):  # a new statement object each time, as an application builds it
        query = select(Order).where(Order.amount > 2).order_by(Order.id.desc()).limit(3)
        assert len(db.scalars(query, execution_options={"compiled_cache": cache}).all()) == 3
        db.expunge_all()
    assert len(cache) == 1


def test_single_row_insert_with_values_is_routed(session: tuple[ShardedSession, list[str]]) -> None:
    """insert(Order).values(user_id=9) goes to orders_01 and gets an ID with 9's gene."""
    db, sent = session
    db.execute(sa.insert(Order).values(user_id=9, amount=90))
    assert [s.split()[2] for s in sent] == ["orders_01"]
    (new_id,) = db.execute(select(Order.id).where(Order.user_id == 9)).scalars()
    assert new_id % 16 == 9


def test_multi_row_values_insert_is_refused(session: tuple[ShardedSession, list[str]]) -> None:
    """insert().values([...]) of several rows asks for the executemany form instead."""
    db, sent = session
    with pytest.raises(UnsupportedShardQuery, match="executemany|pass the rows"):
        db.execute(
            sa.insert(Order).values([{"user_id": 1, "amount": 1}, {"user_id": 2, "amount": 2}])
        )
    assert sent == []
