"""The sharding contract, run over SQLite/PostgreSQL/MariaDB x table/database level x strategy.

Every test checks where rows land or which physical tables (and databases) a statement
named, from the SQL each engine was sent, and compares results with an unsharded twin
table holding the same rows.

The ``generations`` strategy is a model with two layout generations
(:mod:`snowshard.sharding.generations`): 4 tables by ``Gene(4)``, then 8 more by
``Gene(8)`` from ``SWITCH``; its IDs alternate between a clock before the switch and one
after it, so every test's rows span both generations. A parent key names one table per
generation there, so the tests expect the tables of ``shards_of(key, value)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import BigInteger, Integer, delete, func, insert, select, update
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, ShardKeyChanged, Shards
from snowshard.sharding.driver_errors import ShardOperationError
from snowshard.sharding.generations import Generation
from tests.backends import DatabaseFactory
from tests.test_sharding_helpers import (
    BACKEND_MARKS,
    LAYOUT,
    LEVELS,
    Models,
    World,
    build_world,
    world_params,
)
from tests.worlds import TWIN_SWITCH, TwoEras, binary_string, open_world

USERS = [1820, 5177331, 3, 17, 42, 99, 256, 1001, 7, 12, 64, 77, 123456789, 31, 8, 15]

# --------------------------------------------------------------------------- generations

SWITCH = TWIN_SWITCH
GENERATION_LEVELS: dict[str, tuple[dict[str, list[int]], dict[str, list[int]]]] = {
    "table": ({}, {}),
    "database": ({"a": [0, 1], "b": [2, 3]}, {"a": [0, 1, 2, 3], "b": [4, 5, 6, 7]}),
}


@dataclass(frozen=True)
class ByIdTime:
    """The expected table index of an ID, computed from its time and gene (not snowshard's)."""

    count: int = 12

    def shard_of(self, value: int) -> int:
        gene = value & 15
        return gene % 4 if LAYOUT.time_of(value) < SWITCH else 4 + gene % 8


_generation_models: dict[str, Models] = {}


def generation_models(level: str) -> Models:
    """The shop of ``level`` with two generations, declared once per test session."""
    found = _generation_models.get(level)
    if found is not None:
        return found
    first, second = GENERATION_LEVELS[level]
    worker = 10 + 2 * len(_generation_models)
    # IDs alternately after and before the switch, one at a time
    ids = TwoEras(
        run=1, workers=(worker, worker + 1), earlier=timedelta(days=1), later_first=True
    )

    def shards() -> Shards:
        later = Generation("2027-01-01T00:00:00Z", 8, databases=second)
        return Shards(4, key=("id", "user_id"), databases=first, generations=[later])

    class Base(DeclarativeBase):
        pass

    class User(Base):
        __tablename__ = "users"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        orders: Mapped[list[Any]] = relationship(
            "Order", primaryjoin="User.id == foreign(Order.user_id)", viewonly=True
        )

    class Order(Sharded, Base):
        __tablename__ = "orders"
        __shards__ = shards()
        id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger, index=True)
        amount: Mapped[int] = mapped_column(Integer, default=0)
        note: Mapped[str | None] = mapped_column(binary_string(20))

    class Item(Sharded, Base):
        __tablename__ = "items"
        __shards__ = shards()
        id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger)
        order_id: Mapped[int] = mapped_column(BigInteger)

    class Twin(Base):
        __tablename__ = "orders_twin"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        user_id: Mapped[int] = mapped_column(BigInteger, index=True)
        amount: Mapped[int] = mapped_column(Integer, default=0)
        note: Mapped[str | None] = mapped_column(binary_string(20))

    Base.registry.configure()
    found = Models(Base, User, Order, Item, Twin, ByIdTime(), ("id", "user_id"))
    _generation_models[level] = found
    return found


def _params() -> list[Any]:
    generations = [
        pytest.param((b, level, "generations"), id=f"{b}-{level}-generations", marks=BACKEND_MARKS[b])
        for b in ("sqlite", "postgresql", "mysql")
        for level in LEVELS
    ]
    return [*world_params(), *generations]




@pytest.fixture(scope="module", params=_params())
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    backend, level, strategy = request.param
    if strategy != "generations":
        yield from build_world(request, tmp_path_factory.mktemp("world"), *request.param)
        return


    factory = DatabaseFactory.for_request(request, tmp_path_factory.mktemp("world"))
    try:
        m = generation_models(level)
        yield World(backend, level, strategy, m, open_world(factory, m.base, backend))
    finally:
        factory.cleanup()


@pytest.fixture(autouse=True)
def _fresh(world: World) -> Iterator[None]:
    yield
    world.reset()


def _key(world: World) -> str:
    """The key column a query routes on: user_id if it is a key, else id."""
    return "user_id" if "user_id" in world.m.keys else "id"


def _table(world: World, shard: int) -> str:
    return world.model.tables[shard].name


def _all_tables(world: World) -> set[str]:
    return {table.name for table in world.model.tables}


def _tables_of(world: World, key: str, value: Any) -> set[str]:
    """The tables a row with ``key`` = ``value`` can be in: one, or one per generation."""
    return {_table(world, s) for s in world.model.shards_of(key, value)}


def _values(params: Any) -> set[Any]:
    return set(params.values()) if isinstance(params, dict) else set(params)


def test_rows_land_in_the_table_the_strategy_names(world: World) -> None:
    """Each new order is stored in exactly the table its strategy assigns."""
    world.add_orders(USERS)
    with world.session() as session:
        orders = session.scalars(select(world.m.Twin)).all()
        expected: dict[int, set[int]] = {i: set() for i in range(world.model.count)}
        for order in orders:
            expected[world.expected_shard(order)].add(order.id)
    assert world.rows_by_table() == expected


def test_order_id_carries_the_gene_of_its_user(world: World) -> None:
    """Every order ID ends in the low 4 bits of its user's ID."""
    for order_id, user_id, _ in world.add_orders(USERS):
        assert order_id % 16 == user_id % 16


def test_session_get_reads_only_the_table_of_the_id(world: World) -> None:
    """session.get names one table when the ID is a shard key, every table otherwise."""
    order_id, user_id, amount = world.add_orders(USERS)[4]
    with world.session() as session:
        world.clear()
        order = session.get(world.m.Order, order_id)
        assert order is not None and order.amount == amount
        shard = world.model.shard_of(world.m.keys[0], order_id if "id" in world.m.keys else user_id)
    assert world.tables_named() == ({_table(world, shard)} if "id" in world.m.keys else _all_tables(world))


def test_key_equality_reads_one_table_in_its_database(world: World) -> None:
    """WHERE key == value names only that value's table (one per generation) and database."""
    rows = world.add_orders(USERS)
    key = _key(world)
    value = rows[0][0] if key == "id" else USERS[0]
    shards = world.model.shards_of(key, value)
    with world.session() as session:
        world.clear()
        found = session.scalars(
            select(world.m.Order).where(getattr(world.m.Order, key) == value)
        ).all()
    assert [o.id for o in found] == [rows[0][0]]
    assert world.tables_named() == _tables_of(world, key, value)
    assert len(world.log) == len(shards)
    databases = {world.model.database_of(s) for s in shards}
    assert {db for db, _, _ in world.log} <= databases | {"default"}


def test_in_list_is_split_per_shard(world: World) -> None:
    """WHERE key IN (...) reads each needed table once, passing it only its own values."""
    rows = world.add_orders(USERS)
    key = _key(world)
    values = [r[0] for r in rows] if key == "id" else list(USERS)
    wanted = values[:9]
    with world.session() as session:
        world.clear()
        found = session.scalars(
            select(world.m.Order.id).where(getattr(world.m.Order, key).in_(wanted))
        ).all()
    assert sorted(found) == sorted(r[0] for r in rows[:9])
    by_shard: dict[int, set[Any]] = {}
    for value in wanted:
        for shard in world.model.shards_of(key, value):
            by_shard.setdefault(shard, set()).add(value)
    assert len(world.log) == len(by_shard)
    index = {name: i for i, name in enumerate(t.name for t in world.model.tables)}
    for (database, _, params), sent in zip(world.log, world.sql):
        (table,) = sent.shards
        shard = index[table]
        assert _values(params) & set(wanted) == by_shard[shard]
        assert database in (world.model.database_of(shard), "default")


def _pair(world: World, build: Any) -> tuple[list[Any], list[Any]]:
    with world.session() as session:
        sharded = [tuple(r) for r in session.execute(build(world.m.Order)).all()]
        twin = [tuple(r) for r in session.execute(build(world.m.Twin)).all()]
    return sharded, twin


def test_fan_out_order_by_limit_offset_equals_the_twin(world: World) -> None:
    """A query without shard key reads every table and sorts/limits like one table."""
    world.add_orders(USERS, amount=lambda i: (i * 7) % 5)
    world.clear()
    sharded, twin = _pair(
        world,
        lambda m: (
            select(m.id, m.user_id, m.amount)
            .where(m.amount > 0)
            .order_by(m.amount.desc(), m.id)
            .limit(5)
            .offset(3)
        ),
    )
    assert sharded == twin and len(twin) == 5
    assert world.tables_named() == _all_tables(world)


def test_fan_out_entities_come_back_in_order(world: World) -> None:
    """select(Order) ORDER BY id DESC LIMIT n returns the same objects as the twin's rows."""
    world.add_orders(USERS)
    with world.session() as session:
        orders = session.scalars(
            select(world.m.Order).order_by(world.m.Order.id.desc()).limit(6)
        ).all()
        twin = session.scalars(
            select(world.m.Twin.id).order_by(world.m.Twin.id.desc()).limit(6)
        ).all()
    assert [o.id for o in orders] == list(twin)
    assert [type(o).__table__.name for o in orders] == [
        _table(world, world.expected_shard(o)) for o in orders
    ]


def test_aggregates_equal_the_twin(world: World) -> None:
    """COUNT, SUM, MIN, MAX and AVG over every table equal those of one table."""
    world.add_orders(USERS, amount=lambda i: i * i % 11)
    sharded, twin = _pair(
        world,
        lambda m: select(
            func.count(),
            func.sum(m.amount),
            func.min(m.amount),
            func.max(m.amount),
            func.avg(m.amount),
        ).where(m.user_id > 10),
    )
    assert sharded[0][:4] == twin[0][:4]
    assert math.isclose(float(sharded[0][4]), float(twin[0][4]), rel_tol=1e-12)


def test_group_by_equals_the_twin(world: World) -> None:
    """GROUP BY with aggregates, ordered by a grouped column, equals one table's answer."""
    world.add_orders(USERS, amount=lambda i: i)
    sharded, twin = _pair(
        world,
        lambda m: (
            select(m.note, func.count(), func.sum(m.amount), func.max(m.id))
            .group_by(m.note)
            .order_by(m.note.desc())
        ),
    )
    assert sharded == twin and len(twin) == 3


def test_bulk_update_is_routed_and_applied(world: World) -> None:
    """update(Order).where(key == v) changes rows in one table only."""
    rows = world.add_orders(USERS)
    key = _key(world)
    value = rows[2][0] if key == "id" else USERS[2]
    with world.session() as session:
        world.clear()
        result = session.execute(
            update(world.m.Order).where(getattr(world.m.Order, key) == value).values(amount=500)
        )
        session.commit()
        assert result.rowcount == 1
        assert (
            session.scalar(select(func.sum(world.m.Order.amount)))
            == sum(r[2] for r in rows) - rows[2][2] + 500
        )
    assert {n for n in world.tables_named()} >= _tables_of(world, key, value)
    update_sql = [s for s in world.statements() if s.lstrip().upper().startswith("UPDATE")]
    assert len(update_sql) == len(world.model.shards_of(key, value))


def test_bulk_delete_without_key_reaches_every_table(world: World) -> None:
    """delete(Order).where(non-key) runs on every table and deletes the matching rows."""
    world.add_orders(USERS, amount=lambda i: i % 2)
    with world.session() as session:
        world.clear()
        deleted = session.execute(delete(world.m.Order).where(world.m.Order.amount == 1)).rowcount
        session.commit()
        left = session.scalar(select(func.count()).select_from(world.m.Order))
    assert deleted == len(USERS) // 2 and left == len(USERS) - deleted
    assert {s.split()[2] for s in world.statements() if s.startswith("DELETE")} == _all_tables(world)


def test_orm_update_and_delete_touch_one_table(world: World) -> None:
    """Changing and deleting loaded objects writes only to their own tables."""
    rows = world.add_orders(USERS)
    with world.session() as session:
        first = session.get(world.m.Order, rows[0][0])
        second = session.get(world.m.Order, rows[1][0])
        expected = {_table(world, world.expected_shard(o)) for o in (first, second)}
        first.amount = 1234
        session.delete(second)
        world.clear()
        session.commit()
    writes = [s for s in world.statements() if s.split()[0] in ("UPDATE", "DELETE")]
    assert len(writes) == 2
    assert world.tables_named() == expected


def test_moving_a_row_to_another_shard_is_refused(world: World) -> None:
    """Setting a shard key to another shard's value raises before any SQL is sent."""
    rows = world.add_orders(USERS)
    key = world.m.keys[-1]
    with world.session() as session:
        order = session.get(world.m.Order, rows[0][0])
        here = world.expected_shard(order)
        other = next(u for u in range(1, 100) if here not in world.model.shards_of(key, u))
        setattr(order, key, other)
        world.clear()
        with pytest.raises(ShardKeyChanged, match="cannot move"):
            session.flush()
    assert world.log == []


def test_failed_flush_leaves_every_table_unchanged(world: World) -> None:
    """A flush that fails on one table rolls back the rows it wrote to the others."""
    rows = world.add_orders(USERS[:6])
    before = world.rows_by_table()
    with world.session() as session:
        session.add_all([world.m.Order(user_id=u, amount=1) for u in USERS[6:]])
        duplicate = world.m.Order(id=rows[0][0], user_id=rows[0][1], amount=2)
        session.add(duplicate)
        table = world.model.tables[world.expected_shard(duplicate)].name
        with pytest.raises(ShardOperationError, match="refused a statement") as caught:
            session.commit()
    assert caught.value.tables == (table,)
    assert world.rows_by_table() == before


def test_bulk_insert_groups_rows_by_table(world: World) -> None:
    """session.execute(insert(Order), rows) stores each row in its strategy's table."""
    with world.session() as session:
        session.execute(insert(world.m.Order), [{"user_id": u, "amount": 1} for u in USERS])
        session.commit()
        stored = session.scalars(select(world.m.Order)).all()
    assert len(stored) == len(USERS)
    placed = world.rows_by_table()
    assert all(o.id in placed[world.expected_shard(o)] for o in stored)


@settings(
    # each example refills a world on a real database (~150 ms): a tenth of the profile's
    # examples (5 in dev, 20 in CI, x 24 worlds); the differential test covers breadth
    max_examples=max(5, settings.default.max_examples // 10),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    amounts=st.lists(st.integers(0, 40), min_size=1, max_size=24),
    column=st.sampled_from(["amount", "user_id", "id"]),
    descending=st.booleans(),
    limit=st.one_of(st.none(), st.integers(1, 8)),
    offset=st.integers(0, 5),
)
def test_fan_out_queries_equal_the_twin(
    world: World, amounts: list[int], column: str, descending: bool, limit: Any, offset: int
) -> None:
    """Random rows and ORDER BY/LIMIT/OFFSET: the sharded model answers like its twin."""
    world.reset()
    users = [USERS[i % len(USERS)] + i for i in range(len(amounts))]
    world.add_orders(users, amount=lambda i: amounts[i])

    def build(m: Any) -> Any:
        key = getattr(m, column)
        return (
            select(m.id, m.amount)
            .order_by(key.desc() if descending else key, m.id)
            .limit(limit)
            .offset(offset)
        )

    sharded, twin = _pair(world, build)
    assert sharded == twin


def test_bulk_update_synchronizes_loaded_objects(world: World) -> None:
    """Objects already loaded see the values a routed bulk update wrote."""
    world.add_orders(USERS[:6], amount=lambda i: 10)
    with world.session() as session:
        loaded = session.scalars(select(world.m.Order)).all()
        targets = [o.id for o in loaded[:2]]
        statement = update(world.m.Order).where(world.m.Order.id.in_(targets))
        session.execute(statement.values(amount=world.m.Order.amount + 5))
        assert sorted(o.amount for o in loaded) == [10, 10, 10, 10, 15, 15]
