"""Keyset pagination over sharded tables."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select

from snowshard.sharding import InvalidPage, ShardedSession, keyset, keyset_page
from tests.worlds import SqlLog, WorldFactory, declare_shop

SHOP = declare_shop(8)
Order = SHOP.Order


@pytest.fixture
def session(sharded_world: WorldFactory) -> Iterator[ShardedSession]:
    """50 orders of users 0..12 over eight SQLite tables; the log starts empty."""
    world = sharded_world(SHOP)
    with world.session() as session:
        session.add_all([Order(user_id=i % 13, amount=i) for i in range(50)])
        session.commit()
        world.log.clear()
        yield session


def test_pages_walk_every_row_once_newest_first(session: ShardedSession) -> None:
    """Following Page.after visits all 50 orders once, in descending ID order."""
    seen: list[int] = []
    page = keyset_page(session, select(Order), Order.id, size=7)
    while True:
        seen.extend(o.id for o in page.items)
        if page.after is None:
            break
        page = keyset_page(session, select(Order), Order.id, after=page.after, size=7)
    everything = session.scalars(select(Order.id)).all()
    assert seen == sorted(everything, reverse=True)


def test_ascending_pages_keep_the_filter(session: ShardedSession) -> None:
    """descending=False pages upwards, within the statement's WHERE clause."""
    query = select(Order).where(Order.amount >= 40)
    first = keyset_page(session, query, Order.id, size=6, descending=False)
    second = keyset_page(session, query, Order.id, after=first.after, size=6, descending=False)
    ids = [o.id for o in first.items + second.items]
    assert ids == sorted(ids) and len(ids) == 10 and second.after is None
    assert all(o.amount >= 40 for o in first.items + second.items)


def test_routed_page_reads_one_table(session: ShardedSession, sql_log: SqlLog) -> None:
    """A page of one user's orders reads only that user's table."""
    page = keyset_page(session, select(Order).where(Order.user_id == 5), Order.id, size=3)
    assert [o.user_id for o in page.items] == [5, 5, 5]
    assert sql_log.tables() == [{"orders_05"}]


def test_keyset_statement_shape() -> None:
    """keyset() adds WHERE key < after, ORDER BY key DESC and LIMIT size."""
    sql = str(keyset(select(Order.__table__), Order.__table__.c.id, after=10, size=3))
    assert "WHERE orders.id < :id_1" in sql and "ORDER BY orders.id DESC" in sql and "LIMIT" in sql


@pytest.mark.parametrize("size", [0, -1, 2.5, True])
def test_bad_page_size(size: object) -> None:
    """A page size that is not a positive int raises InvalidPage."""
    with pytest.raises(InvalidPage, match="page size"):
        keyset(select(Order), Order.id, size=size)  # type: ignore[arg-type]
