"""Concurrent fan-out: a read over several databases sends their statements at once.

Real databases: SQLite, PostgreSQL and MariaDB across two (or four) databases. Overlap is
shown with PostgreSQL's ``pg_sleep`` in an InitPlan (evaluated once per statement) and
with the times ``before_cursor_execute``/``after_cursor_execute`` record.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from sqlalchemy import event, func, literal_column, select
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session

from snowshard.sharding import AsyncShardedSession, ShardedSession, create_all
from snowshard.sharding.driver_errors import ShardOperationError
from snowshard.sharding.fanout import run_concurrently
from snowshard.spec import ShardConfigError
from tests.backends import DatabaseFactory, async_url
from tests.forking import in_forked_child, needs_fork
from tests.worlds import (
    PlainOrder,
    Shop,
    World,
    WorldFactory,
    copy_orders_to_plain,
    declare_shop,
    open_world,
)

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]

USERS = 40
SLEEP = 0.5  # seconds each database's statement sleeps


def _fill(world: World) -> None:
    """Orders of USERS users (amounts repeat, notes are sometimes NULL) and their twins."""
    with world.session() as session:
        orders = [
            world.Order(user_id=u, amount=(u * 7) % 11, note=None if u % 3 else f"n{u % 5}")
            for u in range(USERS)
            for _ in range(2)
        ]
        session.add_all(orders)
        session.commit()
    copy_orders_to_plain(world)


def _world(factory: Any, backend: str, databases: int = 2) -> tuple[World, Shop]:
    shop = declare_shop(4, databases=databases)
    world = factory(shop, backend)
    _fill(world)
    return world, shop


@pytest.fixture(scope="module", params=BACKENDS)
def shared(request: pytest.FixtureRequest, module_databases: DatabaseFactory) -> tuple[World, Shop]:
    """Two databases per backend with the usual rows, shared by tests that only read (or
    roll back)."""
    return _world(lambda shop, backend: open_world(module_databases, shop, backend), request.param)


@pytest.fixture(scope="module", params=BACKENDS)
def shared4(request: pytest.FixtureRequest, module_databases: DatabaseFactory) -> tuple[World, Shop]:
    """Four databases (one table each) per backend, shared by tests that only read."""
    return _world(
        lambda shop, backend: open_world(module_databases, shop, backend), request.param, 4
    )


QUERIES = {
    "top_n": lambda m: select(m.id, m.amount).order_by(m.amount.desc(), m.id).limit(7),
    "offset": lambda m: select(m.id).order_by(m.note.desc(), m.id).limit(5).offset(30),
    "distinct": lambda m: select(m.amount).distinct().order_by(m.amount),
    "aggregates": lambda m: select(m.amount, func.count(), func.sum(m.user_id), func.max(m.id))
    .group_by(m.amount)
    .order_by(m.amount),
    "unordered": lambda m: select(m.id, m.note).where(m.amount > 3),
    "core_top_n": lambda m: select(m.__table__.c.id, m.__table__.c.amount)
    .order_by(m.__table__.c.amount, m.__table__.c.id)
    .limit(6),
    "core_count": lambda m: select(func.count()).select_from(m.__table__).where(m.amount > 2),
}


@pytest.mark.parametrize("name", list(QUERIES))
def test_results_equal_the_unsharded_twin(shared: tuple[World, Shop], name: str) -> None:
    """Top-N, OFFSET, DISTINCT, aggregates, unordered and Core (table) reads over two
    databases equal the same query on one plain table."""
    world, shop = shared
    build = QUERIES[name]
    with world.session() as session:
        got = [tuple(r) for r in session.execute(build(shop.Order))]
    with Session(world.bind) as plain:
        want = [tuple(r) for r in plain.execute(build(PlainOrder))]
    if name == "unordered":
        got, want = sorted(got, key=repr), sorted(want, key=repr)
    assert got == want
    assert len(want) > 0


def test_entities_top_n_equal_the_twin(shared: tuple[World, Shop]) -> None:
    """A top-N of whole objects over two databases is the twin's top-N, objects and all."""
    world, shop = shared
    Order = shop.Order
    with world.session() as session:
        got = session.scalars(select(Order).order_by(Order.amount, Order.id.desc()).limit(9))
        got_rows = [(o.id, o.user_id, o.amount, o.note) for o in got]
    with Session(world.bind) as plain:
        want = plain.scalars(select(PlainOrder).order_by(PlainOrder.amount, PlainOrder.id.desc()).limit(9))
        want_rows = [(o.id, o.user_id, o.amount, o.note) for o in want]
    assert got_rows == want_rows


@pytest.fixture(scope="module")
def pg_world(module_databases: DatabaseFactory) -> tuple[World, Shop]:
    """Four PostgreSQL databases, one table each, with the usual rows."""
    return _world(lambda shop, backend: open_world(module_databases, shop, backend), "postgresql", 4)


def _warm(Order: Any) -> Any:
    """A cheap read of every database: run first, it opens the session's connection to
    each, so the timed statement measures the fan-out, not connecting on a busy machine (a
    CI run once took 2.5 s for four 0.25 s statements)."""
    return select(Order.id).limit(1)


def _slow(Order: Any) -> Any:
    # an uncorrelated scalar subquery is an InitPlan: once per table, and each of the four
    # databases holds one table
    return select(Order.id).where(literal_column(f"(SELECT 1 FROM pg_sleep({SLEEP}))") == 1)


class Spans:
    """The (start, end) times of the statements sent to each of some engines, as
    ``before_cursor_execute``/``after_cursor_execute`` see them."""

    def __init__(self, engines: dict[str, Any]) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.engines = list(engines.values())

    def _start(self, *args: Any) -> None:
        self.starts.append(time.perf_counter())

    def _end(self, *args: Any) -> None:
        self.ends.append(time.perf_counter())

    def __enter__(self) -> Spans:
        for engine in self.engines:
            event.listen(engine, "before_cursor_execute", self._start)
            event.listen(engine, "after_cursor_execute", self._end)
        return self

    def __exit__(self, *exc: object) -> None:
        for engine in self.engines:
            event.remove(engine, "before_cursor_execute", self._start)
            event.remove(engine, "after_cursor_execute", self._end)

    def clear(self) -> None:
        self.starts.clear()
        self.ends.clear()

    def most_at_once(self) -> int:
        """The most statements running at one moment (an end before a start at a tie)."""
        moments = sorted([(t, 1) for t in self.starts] + [(t, -1) for t in self.ends])
        running = most = 0
        for _, step in moments:
            running += step
            most = max(most, running)
        return most


# Wall time is not asserted in the tests below: on a busy CI VM four 0.5 s statements once
# took 3.1 s together, longer than one after another would. How many statements ran at once
# does not depend on the machine's speed; the benchmarks measure the time.


@pytest.mark.postgres
def test_databases_are_queried_at_the_same_time(pg_world: tuple[World, Shop]) -> None:
    """The statements of four databases, each taking SLEEP seconds, all run at once."""
    world, shop = pg_world
    with Spans(world.databases) as spans, world.session() as session:
        session.execute(_warm(shop.Order)).all()  # connections opened before the spans
        spans.clear()
        rows = session.execute(_slow(shop.Order)).all()
    assert len(rows) == 2 * USERS and len(spans.ends) == 4
    assert spans.most_at_once() == 4


@pytest.mark.postgres
def test_max_concurrency_one_queries_one_database_at_a_time(pg_world: tuple[World, Shop]) -> None:
    """execution_options(max_concurrency=1) runs the four databases one after another."""
    world, shop = pg_world
    with Spans(world.databases) as spans, world.session() as session:
        session.execute(_warm(shop.Order)).all()
        spans.clear()
        session.execute(_slow(shop.Order).execution_options(max_concurrency=1)).all()
    assert len(spans.ends) == 4
    assert spans.most_at_once() == 1


@pytest.mark.postgres
def test_session_max_concurrency_bounds_the_overlap(pg_world: tuple[World, Shop]) -> None:
    """ShardedSession(max_concurrency=2) queries four databases two at a time."""
    world, shop = pg_world
    with Spans(world.databases) as spans, world.session(max_concurrency=2) as session:
        session.execute(_warm(shop.Order)).all()
        spans.clear()
        session.execute(_slow(shop.Order)).all()
    assert len(spans.ends) == 4
    assert spans.most_at_once() == 2


@pytest.mark.parametrize("bad", [0, -1, 2.5, "4", True])
def test_bad_max_concurrency_option_is_refused(sharded_world: WorldFactory, bad: Any) -> None:
    """A max_concurrency option that is not an int >= 1 raises ShardConfigError naming it."""
    shop = declare_shop(4, databases=2)
    world = sharded_world(shop)
    with world.session() as session, pytest.raises(ShardConfigError, match="max_concurrency=") as info:
        session.execute(select(shop.Order).execution_options(max_concurrency=bad))
    assert repr(bad) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_objects_are_built_only_for_the_rows_kept(shared4: tuple[World, Shop]) -> None:
    """A top-20 of objects over four databases builds 20 objects, not 20 per database."""
    world, shop = shared4
    loaded: list[Any] = []
    hook = lambda target, context: loaded.append(target)
    event.listen(shop.Order, "load", hook, propagate=True)
    try:
        with world.session() as session:
            got = session.scalars(select(shop.Order).order_by(shop.Order.id).limit(20)).all()
    finally:
        event.remove(shop.Order, "load", hook)
    assert len(got) == 20
    assert len(loaded) == 20
    assert {id(o) for o in loaded} == {id(o) for o in got}


def test_flushed_rows_are_read_and_rollback_works(shared: tuple[World, Shop]) -> None:
    """Rows flushed but not committed are seen by a concurrent fan-out in the same session,
    and a rollback afterwards removes them."""
    world, shop = shared
    Order = shop.Order
    count = select(func.count()).select_from(Order)
    with world.session() as session:
        session.add_all([Order(user_id=u, amount=100 + u) for u in (1, 2, 3, 6)])  # a and b
        top = session.scalars(select(Order.amount).order_by(Order.amount.desc()).limit(4)).all()
        assert top == [106, 103, 102, 101]
        assert session.scalar(count) == 2 * USERS + 4
        session.rollback()
        assert session.scalar(count) == 2 * USERS


def _bare(factory: WorldFactory, backend: str) -> tuple[World, Shop]:
    shop = declare_shop(4, databases=2)
    return factory(shop, backend), shop


def test_commit_after_a_fan_out_stores_the_rows(sharded_world: WorldFactory, sql_backend: str) -> None:
    """A session that fanned out commits its writes in every database afterwards."""
    world, shop = _bare(sharded_world, sql_backend)
    Order = shop.Order
    with world.session() as session:
        session.add_all([Order(user_id=u, amount=500) for u in (1, 6)])
        assert session.scalar(select(func.count()).where(Order.amount == 500)) == 2
        session.commit()
    with world.session() as session:
        assert session.scalar(select(func.count()).where(Order.amount == 500)) == 2


@pytest.mark.postgres
def test_twophase_commit_after_a_fan_out(sharded_world: WorldFactory) -> None:
    """A two-phase session that fanned out prepares and commits both databases."""
    world, shop = _bare(sharded_world, "postgresql")
    Order = shop.Order
    with world.session(twophase=True) as session:
        session.add_all([Order(user_id=u, amount=700) for u in (1, 6)])
        assert session.scalars(select(Order.amount).order_by(Order.amount.desc()).limit(2)).all() == [700, 700]
        session.commit()
    with world.session() as session:
        assert session.scalar(select(func.count()).where(Order.amount == 700)) == 2


def test_error_in_one_database_is_named_and_session_recovers(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """A table dropped in database b raises ShardOperationError naming b; after rollback the
    session reads database a again."""
    world, shop = _bare(sharded_world, sql_backend)
    Order = shop.Order
    with world.session() as session:
        session.add_all([Order(user_id=u) for u in (1, 1, 6)])
        session.commit()
    with world.databases["b"].begin() as conn:
        conn.exec_driver_sql("DROP TABLE orders_02")
    with world.session() as session:
        with pytest.raises(ShardOperationError) as info:
            session.execute(select(Order.id).order_by(Order.id).limit(3)).all()
        assert info.value.database == "b"
        assert "'b'" in str(info.value)
        session.rollback()
        assert session.scalar(select(func.count()).where(Order.user_id == 1)) == 2


def test_a_later_hook_sees_each_sub_statement(sharded_world: WorldFactory) -> None:
    """A do_orm_execute hook registered after snowshard's sees the per-database statements
    (they run through invoke_statement), and the result is unchanged."""
    world, shop = _world(sharded_world, "sqlite")
    seen: list[Any] = []
    with world.session() as session:
        want = session.execute(select(shop.Order.id).order_by(shop.Order.id).limit(5)).all()
        event.listen(session, "do_orm_execute", lambda state: seen.append(state.bind_arguments))
        got = session.execute(select(shop.Order.id).order_by(shop.Order.id).limit(5)).all()
    assert got == want
    assert sorted(a.get("snowshard_database") for a in seen) == ["a", "b"]


@pytest.mark.postgres
def test_32_threads_of_fan_out_do_not_time_out(database_factory: DatabaseFactory) -> None:
    """32 threads, each running fan-out sessions over two PostgreSQL databases whose pools
    hold 32 connections, finish without a pool timeout."""
    shop = declare_shop(4, databases=2)
    urls = database_factory("postgresql", 2)
    engines = {
        k: database_factory.engine(u, pool_size=32, max_overflow=0, pool_timeout=20)
        for k, u in zip("ab", urls)
    }
    create_all(shop.metadata, bind=engines["a"], databases=engines)
    with ShardedSession(engines["a"], databases=engines) as session:
        session.add_all([shop.Order(user_id=u, amount=u) for u in range(16)])
        session.commit()
    errors: list[BaseException] = []
    counts: list[int] = []
    barrier = threading.Barrier(32)

    def worker() -> None:
        try:
            barrier.wait()
            for _ in range(5):
                with ShardedSession(engines["a"], databases=engines) as s:
                    counts.append(s.scalar(select(func.count()).select_from(shop.Order)) or 0)
                    s.scalars(select(shop.Order).order_by(shop.Order.amount).limit(3)).all()
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert counts == [16] * 160


async def _async_overlap(world: World, shop: Shop) -> tuple[int, int, int]:
    """(most at once by default, most at once under max_concurrency=1, rows read)."""
    engines = {
        k: create_async_engine(async_url(e.url.render_as_string(hide_password=False)))
        for k, e in world.engines.items()
    }
    try:
        with Spans({k: e.sync_engine for k, e in engines.items()}) as spans:
            async with AsyncShardedSession(engines["a"], databases=engines) as session:
                (await session.execute(_warm(shop.Order))).all()
                spans.clear()
                rows = (await session.execute(_slow(shop.Order))).all()
                together = spans.most_at_once() if len(spans.ends) == 4 else 0
                spans.clear()
                await session.execute(_slow(shop.Order).execution_options(max_concurrency=1))
                alone = spans.most_at_once() if len(spans.ends) == 4 else 0
    finally:
        for engine in engines.values():
            await engine.dispose()
    return together, alone, len(rows)


@pytest.mark.postgres
def test_async_fan_out_gathers_the_databases(pg_world: tuple[World, Shop]) -> None:
    """AsyncShardedSession queries four PostgreSQL databases at once (psycopg async), and
    one at a time under max_concurrency=1."""
    together, alone, count = asyncio.run(_async_overlap(*pg_world))
    assert count == 2 * USERS
    assert (together, alone) == (4, 1)


@needs_fork
def test_a_forked_child_fans_out_on_threads_of_its_own() -> None:
    """After fork(), a fan-out in the child still runs its tasks on several threads at once."""

    def task() -> int:
        time.sleep(0.1)
        return threading.get_ident()

    def threads_in_child() -> int:
        return len(set(run_concurrently([task] * 4, 4, lambda _: None)))

    run_concurrently([task] * 4, 4, lambda _: None)  # the parent's pool now has idle threads
    # the calling thread and three of the child's own pool
    assert in_forked_child(threads_in_child) == 4
