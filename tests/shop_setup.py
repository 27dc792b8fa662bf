"""A small shop of sharded orders and items with unsharded twins, for regression tests.

``build_setup(request, tmp_path, backend, count)`` creates ``count`` databases on
``backend`` (SQLite, PostgreSQL or MySQL/MariaDB), declares ``Order``/``Item`` (4 tables,
spread over databases ``a`` and ``b`` when ``count`` is 2) with their plain twins and an
unsharded ``notes`` table, fills both sides with the same rows and yields a :class:`Setup`
(dropped afterwards). :func:`rows_of` and :func:`sort_rows` normalise results so a
sharded statement's rows compare with its twin's.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import BigInteger, Integer
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from snowshard import Layout, Snowflake
from snowshard.sharding import Sharded, ShardedSession, Shards, UnsupportedShardQuery, create_all
from tests.backends import DatabaseFactory
from tests.worlds import binary_string, logical_tables

__all__ = [
    "IDS",
    "STATUSES",
    "USERS",
    "Schema",
    "Setup",
    "build_setup",
    "refused_before_sql",
    "rows_of",
    "sort_rows",
]

IDS = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=9)
USERS = [3, 4, 7, 8, 12, 17, 21, 30]
STATUSES = ["new", "paid", "sent", None]


@dataclass
class Schema:
    """The sharded models, their unsharded twins and an unsharded ``notes`` table."""

    base: type[DeclarativeBase]
    Order: Any
    Item: Any
    OrderTwin: Any
    ItemTwin: Any
    Note: Any


def declare(databases: dict[str, range]) -> Schema:
    """A fresh declarative Base with orders/items sharded alike over 4 tables."""
    from snowshard.orm import snowflake_pk

    class Base(DeclarativeBase):
        pass

    class Order(Sharded, Base):
        __tablename__ = "orders"
        __shards__ = Shards(4, key=("id", "user_id"), databases=databases)
        id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger)
        amount: Mapped[int | None] = mapped_column(Integer)
        status: Mapped[str | None] = mapped_column(binary_string(8))

    class Item(Sharded, Base):
        __tablename__ = "items"
        __shards__ = Shards(4, key=("id", "user_id"), databases=databases)
        id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger)
        order_id: Mapped[int] = mapped_column(BigInteger)
        qty: Mapped[int] = mapped_column(Integer)

    class OrderTwin(Base):
        __tablename__ = "orders_twin"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        user_id: Mapped[int] = mapped_column(BigInteger)
        amount: Mapped[int | None] = mapped_column(Integer)
        status: Mapped[str | None] = mapped_column(binary_string(8))

    class ItemTwin(Base):
        __tablename__ = "items_twin"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        user_id: Mapped[int] = mapped_column(BigInteger)
        order_id: Mapped[int] = mapped_column(BigInteger)
        qty: Mapped[int] = mapped_column(Integer)

    class Note(Base):
        __tablename__ = "notes"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        label: Mapped[str] = mapped_column(binary_string(8))

    return Schema(Base, Order, Item, OrderTwin, ItemTwin, Note)


@dataclass
class Setup:
    """One configuration: schema, session factory, and the SQL sent since the last reset."""

    name: str
    schema: Schema
    bind: sa.Engine
    databases: dict[str, sa.Engine]
    sent: list[str]

    def session(self) -> ShardedSession:
        return ShardedSession(self.bind, databases=dict(self.databases))


def build_setup(
    request: pytest.FixtureRequest, tmp_path: Any, backend: str, count: int
) -> Iterator[Setup]:
    """Databases, tables and rows of one configuration (dropped afterwards)."""
    factory = DatabaseFactory.for_request(request, tmp_path)
    try:
        spread = {"a": range(2), "b": range(2, 4)} if count == 2 else {}
        schema = declare(spread)
        urls = factory(backend, count + (1 if count == 2 else 0))
        engines = [factory.engine(url) for url in urls]
        bind = engines[0]
        databases = dict(zip(spread, engines[1:])) if count == 2 else {}
        sent: list[str] = []
        logical: list[str] = []

        def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
            sent.append(statement)
            if logical_tables(rest[1]):  # rest: parameters, context, executemany
                logical.append(statement)

        for engine in engines:
            sa.event.listen(engine, "before_cursor_execute", record)
        create_all(schema.base.metadata, bind=bind, databases=databases)
        setup = Setup(f"{backend}-{count}", schema, bind, databases, sent)
        _fill(setup)
        yield setup
        # a sharded session never names a logical table in SQL (no database holds one)
        assert not logical, f"SQL naming a logical table was sent: {logical[:3]}"
    finally:
        factory.cleanup()


def _fill(setup: Setup) -> None:
    s = setup.schema
    with setup.session() as session:
        orders = []
        for i in range(40):
            user = USERS[i % len(USERS)]
            amount = None if i % 9 == 4 else (i * 7) % 13
            orders.append(s.Order(user_id=user, amount=amount, status=STATUSES[i % 4]))
        session.add_all(orders)
        session.flush()
        items = [
            s.Item(user_id=o.user_id, order_id=o.id, qty=(n + k) % 5 + 1)
            for n, o in enumerate(orders)
            for k in range(1 + n % 2)
        ]
        session.add_all(items)
        session.flush()
        session.add_all(
            s.OrderTwin(id=o.id, user_id=o.user_id, amount=o.amount, status=o.status)
            for o in orders
        )
        session.add_all(
            s.ItemTwin(id=t.id, user_id=t.user_id, order_id=t.order_id, qty=t.qty) for t in items
        )
        session.add_all(s.Note(id=u, label=f"u{u}") for u in USERS[::2])
        session.commit()


def _norm(value: Any) -> Any:
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else value
    return value


def rows_of(result: Any) -> list[tuple[Any, ...]]:
    """A result's rows as tuples, numbers normalised (Decimal -> float, rounded)."""
    return [tuple(_norm(v) for v in row) for row in result]


def sort_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows in a canonical order (NULLs last), for comparisons without ORDER BY."""
    return sorted(rows, key=lambda r: tuple((v is None, str(type(v)), v if v is not None else 0) for v in r))


def refused_before_sql(shop: Setup, statement: Any, match: str) -> None:
    """Running ``statement`` raises UnsupportedShardQuery matching ``match``, and no SQL
    was sent."""
    shop.sent.clear()
    with shop.session() as session, pytest.raises(UnsupportedShardQuery, match=match):
        session.execute(statement)
    assert shop.sent == []
