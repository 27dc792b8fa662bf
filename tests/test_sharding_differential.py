"""Random statements on a sharded model equal the same statements on one plain table, or raise
UnsupportedShardQuery before any SQL runs.

Five configurations: SQLite, PostgreSQL (one database, two databases) and MariaDB (one, two).
The rows are created once per configuration; each example builds one statement from a
grammar (filters on key and non-key columns, IN lists, aggregates and expressions over
them (division and CAST included), GROUP BY selected and unselected keys, HAVING, ORDER
BY with ties and NULLs, LIMIT/OFFSET, DISTINCT, window functions, subqueries, binding-table
and unsharded joins) for both models. ``SNOWSHARD_DIFFERENTIAL_EXAMPLES`` sets the examples
per configuration.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Optional

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import BigInteger, Integer, String, and_, case, cast, exists, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from snowshard import Layout, Snowflake
from snowshard.sharding import ShardedSession, Sharded, Shards, UnsupportedShardQuery, create_all
from tests.backends import DatabaseFactory

EXAMPLES = int(os.environ.get("SNOWSHARD_DIFFERENTIAL_EXAMPLES", "300"))
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
        amount: Mapped[Optional[int]] = mapped_column(Integer)
        status: Mapped[Optional[str]] = mapped_column(String(8))

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
        amount: Mapped[Optional[int]] = mapped_column(Integer)
        status: Mapped[Optional[str]] = mapped_column(String(8))

    class ItemTwin(Base):
        __tablename__ = "items_twin"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        user_id: Mapped[int] = mapped_column(BigInteger)
        order_id: Mapped[int] = mapped_column(BigInteger)
        qty: Mapped[int] = mapped_column(Integer)

    class Note(Base):
        __tablename__ = "notes"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        label: Mapped[str] = mapped_column(String(8))

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


CONFIGS = [
    pytest.param(("sqlite", 1), id="sqlite"),
    pytest.param(("postgresql", 1), id="postgresql-1", marks=pytest.mark.postgres),
    pytest.param(("postgresql", 2), id="postgresql-2", marks=pytest.mark.postgres),
    pytest.param(("mysql", 1), id="mariadb-1", marks=pytest.mark.mysql),
    pytest.param(("mysql", 2), id="mariadb-2", marks=pytest.mark.mysql),
]
_SERVERS = {"postgresql": "postgres_url", "mysql": "mysql_url"}


def build_setup(
    request: pytest.FixtureRequest, tmp_path: Any, backend: str, count: int
) -> Iterator[Setup]:
    """Databases, tables and rows of one configuration (dropped afterwards)."""

    def server(kind: str) -> str:
        url: str = request.getfixturevalue(_SERVERS[kind])
        return url

    factory = DatabaseFactory(tmp_path, server)
    try:
        spread = {"a": range(0, 2), "b": range(2, 4)} if count == 2 else {}
        schema = declare(spread)
        urls = factory(backend, count + (1 if count == 2 else 0))
        engines = [factory.engine(url) for url in urls]
        bind = engines[0]
        databases = dict(zip(spread, engines[1:])) if count == 2 else {}
        sent: list[str] = []
        for engine in engines:
            sa.event.listen(
                engine, "before_cursor_execute", lambda *a: sent.append(a[2]), named=False
            )
        create_all(schema.base.metadata, bind=bind, databases=databases)
        setup = Setup(f"{backend}-{count}", schema, bind, databases, sent)
        _fill(setup)
        yield setup
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


@pytest.fixture(scope="module", params=CONFIGS)
def setup(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    yield from build_setup(request, tmp_path_factory.mktemp("diff"), *request.param)


# --------------------------------------------------------------------------- the grammar

Build = Callable[[Any, Any, Any], Any]
"""(orders model, items model, notes) -> statement; called once with the sharded models,
once with the twins."""


@dataclass
class Case:
    build: Build
    ordered: list[int]
    """Result positions the ORDER BY determines (compared in sequence); [] for none."""
    total: bool
    """Whether the ORDER BY fixes the row order completely (LIMIT/OFFSET need that)."""


def _where(draw: Any, m: Any) -> list[Callable[[Any], Any]]:
    options: list[Callable[[Any], Any]] = [
        lambda m: m.user_id == USERS[1],
        lambda m: m.user_id.in_([USERS[0], USERS[3], USERS[5]]),
        lambda m: m.amount > 5,
        lambda m: m.status == "paid",
        lambda m: m.status.is_(None),
        lambda m: m.user_id.in_([USERS[2], 999]),
    ]
    chosen = draw(st.lists(st.sampled_from(range(len(options))), max_size=2, unique=True))
    return [options[i] for i in chosen]


def _rows(draw: Any) -> Case:
    columns = ["id", "user_id", "amount", "status"]
    picked = draw(st.lists(st.sampled_from(columns), min_size=1, max_size=4, unique=True))
    order = draw(st.lists(st.sampled_from(picked), max_size=2, unique=True))
    desc = draw(st.lists(st.booleans(), min_size=len(order), max_size=len(order)))
    limited = draw(st.booleans()) and bool(order)
    limit = draw(st.integers(1, 6)) if limited else None
    offset = draw(st.integers(0, 4)) if limited else 0
    distinct = draw(st.booleans()) and not limited
    window = draw(st.sampled_from([None, "count_key", "count_all", "row_number_key"]))
    filters = _where(draw, None)

    def build(m: Any, i: Any, note: Any) -> Any:
        cols = [getattr(m, c) for c in picked]
        if window == "count_key":
            cols.append(func.count().over(partition_by=m.user_id))
        elif window == "count_all":
            cols.append(func.count().over())
        elif window == "row_number_key":
            cols.append(func.row_number().over(partition_by=m.user_id, order_by=m.id))
        statement = select(*cols).where(*[f(m) for f in filters])
        keys = [getattr(m, c).desc() if d else getattr(m, c) for c, d in zip(order, desc)]
        if limited:
            keys.append(m.id)
            if "id" not in picked:
                statement = statement.add_columns(m.id)
        statement = statement.order_by(*keys)
        if distinct:
            statement = statement.distinct()
        if limited:
            statement = statement.limit(limit).offset(offset)
        return statement

    return Case(build, [picked.index(c) for c in order], limited)


_AGGREGATES: list[Callable[[Any], Any]] = [
    lambda m: func.count(),
    lambda m: func.sum(m.amount),
    lambda m: func.min(m.amount),
    lambda m: func.max(m.amount),
    lambda m: func.avg(m.amount),
    lambda m: func.count() * 2,
    lambda m: func.max(m.amount) - func.min(m.amount),
    lambda m: func.coalesce(func.sum(m.amount), 0),
    lambda m: cast(func.avg(m.amount) * 100, Integer),
    lambda m: case((func.count() > 3, "many"), else_="few"),
    lambda m: func.count(m.status.distinct()),
    lambda m: func.sum(m.amount) / func.count(),
    lambda m: func.sum(m.amount) // func.count(),
    lambda m: cast(func.sum(m.amount) * 10 / func.count(), Integer),
    lambda m: func.max(m.amount) / (func.min(m.amount) + 1),
    lambda m: func.count() / 7,
]


def _grouped(draw: Any) -> Case:
    aggs = draw(st.lists(st.sampled_from(range(len(_AGGREGATES))), min_size=1, max_size=3))
    key = draw(st.sampled_from([None, "status", "user_id"]))
    shown = key is not None and draw(st.booleans())
    having = key is not None and draw(st.booleans())
    ordered = shown and draw(st.booleans())
    filters = _where(draw, None)

    def build(m: Any, i: Any, note: Any) -> Any:
        cols = ([getattr(m, key)] if shown and key else []) + [_AGGREGATES[a](m) for a in aggs]
        statement = select(*cols).select_from(m).where(*[f(m) for f in filters])
        if key is not None:
            statement = statement.group_by(getattr(m, key))
        if having:
            statement = statement.having(func.avg(m.amount) > 4)
        if ordered and key is not None:
            statement = statement.order_by(getattr(m, key))
        return statement

    return Case(build, [0] if ordered else [], ordered)


def _nested(draw: Any) -> Case:
    kind = draw(st.sampled_from(["scalar", "exists_item", "in_notes", "exists_notes", "join"]))
    filters = _where(draw, None)

    def build(m: Any, i: Any, note: Any) -> Any:
        statement = select(m.id, m.amount).where(*[f(m) for f in filters])
        if kind == "scalar":
            return statement.where(m.amount > select(func.avg(m.amount)).scalar_subquery())
        if kind == "exists_item":
            inner = select(i.id).where(i.user_id == m.user_id, i.order_id == m.id, i.qty > 3)
            return statement.where(exists(inner))
        if kind == "in_notes":
            return statement.where(m.user_id.in_(select(note.id)))
        if kind == "exists_notes":
            return statement.where(exists(select(note.id).where(note.label == "u3")))
        return (
            select(m.id, i.qty)
            .join(i, and_(i.user_id == m.user_id, i.order_id == m.id))
            .where(*[f(m) for f in filters])
        )

    return Case(build, [], False)


@st.composite
def statements(draw: Any) -> Case:
    shape = draw(st.sampled_from([_rows, _grouped, _nested]))
    return shape(draw)  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- comparing


def _norm(value: Any) -> Any:
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else value
    return value


def _rows_of(result: Any) -> list[tuple[Any, ...]]:
    return [tuple(_norm(v) for v in row) for row in result]


def _sort(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=lambda r: tuple((v is None, str(type(v)), v if v is not None else 0) for v in r))


def compare(setup: Setup, case_: Case) -> None:
    """The sharded statement's rows equal the twin's, or it is refused before any SQL."""
    s = setup.schema
    sharded_statement = case_.build(s.Order, s.Item, s.Note)
    twin_statement = case_.build(s.OrderTwin, s.ItemTwin, s.Note)
    with setup.session() as session:
        twin = _rows_of(session.execute(twin_statement))
        setup.sent.clear()
        try:
            got = _rows_of(session.execute(sharded_statement))
        except UnsupportedShardQuery:
            assert setup.sent == [], f"SQL ran before the refusal of {sharded_statement}"
            return
    shown = f"{setup.name}: {sharded_statement}"
    if case_.total:
        assert got == twin, shown
        return
    assert _sort(got) == _sort(twin), shown
    if case_.ordered:
        assert [tuple(r[i] for i in case_.ordered) for r in got] == [
            tuple(r[i] for i in case_.ordered) for r in twin
        ], shown


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case_=statements())
def test_sharded_statements_equal_one_table_or_are_refused(setup: Setup, case_: Case) -> None:
    """Every random statement answers like the unsharded twin, or raises UnsupportedShardQuery."""
    compare(setup, case_)
