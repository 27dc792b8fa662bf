"""Streaming merges: ``yield_per`` over several databases keeps memory bounded.

Real PostgreSQL (psycopg server-side cursors) and MariaDB (PyMySQL unbuffered cursors),
two databases each, holding ROWS orders. Memory is measured with ``tracemalloc``: the
peak while streaming, against the peak of fetching the same rows whole.
"""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event, insert, select

from tests.backends import DatabaseFactory
from tests.worlds import Shop, World, declare_shop, open_world

ROWS = 12_000
BATCH = 500
STREAMING = [
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]


@pytest.fixture(scope="module", params=STREAMING)
def big(request: pytest.FixtureRequest, module_databases: DatabaseFactory) -> tuple[World, Shop]:
    """ROWS orders over two databases (shared: the tests only read)."""
    shop = declare_shop(4, databases=2)
    world = open_world(module_databases, shop, request.param)
    rows = [
        {"user_id": n % 97, "amount": (n * 7919) % 1009, "note": f"{n:020d}"[:20]}
        for n in range(ROWS)
    ]
    with world.session() as session:
        session.execute(insert(shop.Order), rows)
        session.commit()
    return world, shop


def _all_rows(world: World, shop: Shop) -> list[tuple[int, int]]:
    """(id, amount) of every order, read table by table with Core (the unsharded view)."""
    found: list[tuple[int, int]] = []
    model = shop.orders
    for shard, table in enumerate(model.tables):
        with world.engines[model.database_of(shard)].connect() as conn:
            found.extend((r[0], r[1]) for r in conn.execute(sa.select(table.c.id, table.c.amount)))
    return found


def _peak(run: Any) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_yield_per_keeps_memory_bounded(big: tuple[World, Shop]) -> None:
    """Streaming ordered objects with yield_per peaks far below fetching them whole."""
    world, shop = big
    statement = select(shop.Order).order_by(shop.Order.amount, shop.Order.id)
    seen: list[int] = []

    def whole() -> None:
        with world.session() as session:
            seen.append(len(session.scalars(statement).all()))

    def streamed() -> None:
        with world.session() as session:
            count = 0
            for part in session.scalars(statement.execution_options(yield_per=BATCH)).partitions():
                count += len(part)
            seen.append(count)

    full = _peak(whole)
    stream = _peak(streamed)
    assert seen == [ROWS, ROWS]
    assert stream < full / 5, (stream, full)


def test_partitions_are_yield_per_rows_in_merged_order(big: tuple[World, Shop]) -> None:
    """partitions() under yield_per gives BATCH rows at a time, in the twin's order."""
    world, shop = big
    Order = shop.Order
    statement = select(Order.id, Order.amount).order_by(Order.amount.desc(), Order.id)
    with world.session() as session:
        parts = list(session.execute(statement.execution_options(yield_per=BATCH)).partitions())
    sizes = [len(p) for p in parts]
    assert sizes == [BATCH] * (ROWS // BATCH) + ([ROWS % BATCH] if ROWS % BATCH else [])
    got = [tuple(r) for p in parts for r in p]
    assert got == sorted(_all_rows(world, shop), key=lambda r: (-r[1], r[0]))


def test_unordered_stream_reads_source_after_source(big: tuple[World, Shop]) -> None:
    """stream_results=True without ORDER BY yields each row once: database a's, then b's."""
    world, shop = big
    with world.session() as session:
        result = session.execute(select(shop.Order.id).execution_options(stream_results=True))
        got = [r[0] for r in result]
    tables = world.rows_by_table(shop.Order)
    in_a = tables["orders_00"] | tables["orders_01"]
    in_b = tables["orders_02"] | tables["orders_03"]
    assert len(got) == ROWS
    assert set(got[: len(in_a)]) == in_a
    assert set(got[len(in_a) :]) == in_b


def test_deep_offset_reads_offset_plus_limit_per_source(big: tuple[World, Shop]) -> None:
    """OFFSET 9000 LIMIT 5 asks each database for 9005 rows at most, builds 5 objects,
    and equals the twin's page."""
    world, shop = big
    Order = shop.Order
    loaded: list[Any] = []
    hook = lambda target, context: loaded.append(target)
    event.listen(Order, "load", hook, propagate=True)
    world.log.clear()
    try:
        with world.session() as session:
            page = session.scalars(select(Order).order_by(Order.id).offset(9000).limit(5)).all()
            got = [o.id for o in page]
    finally:
        event.remove(Order, "load", hook)
    selects = [s for s in world.log if s.verb == "SELECT"]
    assert got == sorted(i for i, _ in _all_rows(world, shop))[9000:9005]
    assert len(loaded) == 5
    assert {s.database for s in selects} == {"a", "b"}
    assert all("9005" in s.statement and "OFFSET" not in s.statement.upper() for s in selects)


@pytest.mark.postgres
def test_closing_a_stream_early_releases_server_cursors(big: tuple[World, Shop]) -> None:
    """A stream closed after its first partition leaves no open server-side cursor."""
    world, shop = big
    if world.backend != "postgresql":
        pytest.skip("pg_cursors is PostgreSQL's")
    open_cursors = sa.text("SELECT count(*) FROM pg_cursors")
    with world.session() as session:
        result = session.scalars(
            select(shop.Order).order_by(shop.Order.id).execution_options(yield_per=BATCH)
        )
        first = next(result.partitions())
        conn = session.connection(bind_arguments={"snowshard_database": "a"})
        during = conn.execute(open_cursors).scalar()
        result.close()
        after = conn.execute(open_cursors).scalar()
    assert len(first) == BATCH
    assert (during, after) == (1, 0)


def test_several_statements_per_database_stream_in_order(big: tuple[World, Shop]) -> None:
    """An IN over users of all four tables (two statements per database) under yield_per
    gives the twin's rows in order (MariaDB reads them buffered: one connection, two
    statements)."""
    world, shop = big
    Order = shop.Order
    users = [0, 1, 2, 3, 4, 5, 6, 7]
    statement = (
        select(Order.id, Order.amount)
        .where(Order.user_id.in_(users))
        .order_by(Order.amount, Order.id)
        .execution_options(yield_per=100)
    )
    with world.session() as session:
        parts = list(session.execute(statement).partitions())
    model = shop.orders
    assert len({model.shard_of("user_id", u) for u in users}) == 4
    want = []
    for shard, table in enumerate(model.tables):
        with world.engines[model.database_of(shard)].connect() as conn:
            query = sa.select(table.c.id, table.c.amount).where(table.c.user_id.in_(users))
            want.extend(tuple(r) for r in conn.execute(query))
    assert [tuple(r) for p in parts for r in p] == sorted(want, key=lambda r: (r[1], r[0]))
    assert all(len(p) == 100 for p in parts[:-1])


def test_a_buffered_merge_hands_out_rows_in_pieces_in_merged_order(big: tuple[World, Shop]) -> None:
    """Without yield_per the merged rows are built at once; fetchmany, partitions(n) and
    all() still hand them out in the twin's order, under the statement's column names."""
    world, shop = big
    Order = shop.Order
    statement = select(Order.id, Order.amount).order_by(Order.amount.desc(), Order.id).limit(50)
    want = sorted(_all_rows(world, shop), key=lambda r: (-r[1], r[0]))[:50]
    with world.session() as session:
        result = session.execute(statement)
        assert list(result.keys()) == ["id", "amount"]
        first = result.fetchmany(5)
        parts = list(result.partitions(7))
    assert [tuple(r) for r in first] + [tuple(r) for p in parts for r in p] == want
    assert [len(p) for p in parts] == [7] * 6 + [3]


def test_a_merge_that_keeps_no_row_still_names_its_columns(big: tuple[World, Shop]) -> None:
    """A merged read that keeps no row has the statement's columns and no rows."""
    world, shop = big
    Order = shop.Order
    statement = select(Order.id, Order.amount).where(Order.amount < 0).order_by(Order.id)
    with world.session() as session:
        result = session.execute(statement)
        assert list(result.keys()) == ["id", "amount"]
        assert result.all() == []
