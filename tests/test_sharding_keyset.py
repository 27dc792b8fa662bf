"""Keyset pagination over sharded tables."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import BigInteger, Integer, event, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import (
    InvalidPage,
    Sharded,
    ShardedSession,
    Shards,
    create_all,
    keyset,
    keyset_page,
)

IDS = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=23)


class Base(DeclarativeBase):
    pass


class Order(Sharded, Base):
    __tablename__ = "orders"
    __shards__ = Shards(8, key=("id", "user_id"))
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
            session.add_all([Order(user_id=i % 13, amount=i) for i in range(50)])
            session.commit()
            sent.clear()
            yield session, sent
    finally:
        engine.dispose()


def test_pages_walk_every_row_once_newest_first(session: tuple[ShardedSession, list[str]]) -> None:
    """Following Page.after visits all 50 orders once, in descending ID order."""
    db, _ = session
    seen: list[int] = []
    page = keyset_page(db, select(Order), Order.id, size=7)
    while True:
        seen.extend(o.id for o in page.items)
        if page.after is None:
            break
        page = keyset_page(db, select(Order), Order.id, after=page.after, size=7)
    everything = db.scalars(select(Order.id)).all()
    assert seen == sorted(everything, reverse=True)


def test_ascending_pages_keep_the_filter(session: tuple[ShardedSession, list[str]]) -> None:
    """descending=False pages upwards, within the statement's WHERE clause."""
    db, _ = session
    query = select(Order).where(Order.amount >= 40)
    first = keyset_page(db, query, Order.id, size=6, descending=False)
    second = keyset_page(db, query, Order.id, after=first.after, size=6, descending=False)
    ids = [o.id for o in first.items + second.items]
    assert ids == sorted(ids) and len(ids) == 10 and second.after is None
    assert all(o.amount >= 40 for o in first.items + second.items)


def test_routed_page_reads_one_table(session: tuple[ShardedSession, list[str]]) -> None:
    """A page of one user's orders reads only that user's table."""
    db, sent = session
    page = keyset_page(db, select(Order).where(Order.user_id == 5), Order.id, size=3)
    assert [o.user_id for o in page.items] == [5, 5, 5]
    assert len(sent) == 1 and "orders_05" in sent[0]


def test_keyset_statement_shape() -> None:
    """keyset() adds WHERE key < after, ORDER BY key DESC and LIMIT size."""
    sql = str(keyset(select(Order.__table__), Order.__table__.c.id, after=10, size=3))
    assert "WHERE orders.id < :id_1" in sql and "ORDER BY orders.id DESC" in sql and "LIMIT" in sql


@pytest.mark.parametrize("size", [0, -1, 2.5, True])
def test_bad_page_size(size: object) -> None:
    """A page size that is not a positive int raises InvalidPage."""
    with pytest.raises(InvalidPage, match="page size"):
        keyset(select(Order), Order.id, size=size)  # type: ignore[arg-type]
