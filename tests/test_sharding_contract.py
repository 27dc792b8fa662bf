"""The sharding contract, run over SQLite/PostgreSQL/MariaDB x table/database level x strategy.

Every test checks where rows land or which physical tables (and databases) a statement
named, from the SQL each engine was sent, and compares results with an unsharded twin
table holding the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, func, insert, select, update

from snowshard.sharding.driver_errors import ShardOperationError
from snowshard.sharding import ShardKeyChanged
from tests.test_sharding_helpers import COUNT, World, build_world, world_params

USERS = [1820, 5177331, 3, 17, 42, 99, 256, 1001, 7, 12, 64, 77, 123456789, 31, 8, 15]
ALL_TABLES = {f"orders_{i:02d}" for i in range(COUNT)}


@pytest.fixture(scope="module", params=world_params())
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    yield from build_world(request, tmp_path_factory.mktemp("world"), *request.param)


@pytest.fixture(autouse=True)
def _fresh(world: World) -> Iterator[None]:
    yield
    world.reset()


def _key(world: World) -> str:
    """The key column a query routes on: user_id if it is a key, else id."""
    return "user_id" if "user_id" in world.m.keys else "id"


def _table(world: World, shard: int) -> str:
    return f"orders_{shard:02d}"


def _values(params: Any) -> set[Any]:
    return set(params.values()) if isinstance(params, dict) else set(params)


def test_rows_land_in_the_table_the_strategy_names(world: World) -> None:
    """Each new order is stored in exactly the table its strategy assigns."""
    world.add_orders(USERS)
    with world.session() as session:
        orders = session.scalars(select(world.m.Twin)).all()
        expected: dict[int, set[int]] = {i: set() for i in range(COUNT)}
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
    assert world.tables_named() == ({_table(world, shard)} if "id" in world.m.keys else ALL_TABLES)


def test_key_equality_reads_one_table_in_its_database(world: World) -> None:
    """WHERE key == value sends one statement, naming only that value's table and database."""
    rows = world.add_orders(USERS)
    key = _key(world)
    value = rows[0][0] if key == "id" else USERS[0]
    shard = world.model.shard_of(key, value)
    with world.session() as session:
        world.clear()
        found = session.scalars(
            select(world.m.Order).where(getattr(world.m.Order, key) == value)
        ).all()
    assert [o.id for o in found] == [rows[0][0]]
    assert world.tables_named() == {_table(world, shard)}
    assert {db for db, _, _ in world.log} <= {world.model.database_of(shard), "default"}


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
        by_shard.setdefault(world.model.shard_of(key, value), set()).add(value)
    assert len(world.log) == len(by_shard)
    for database, sql, params in world.log:
        (table,) = {name for name in ALL_TABLES if name in sql}
        shard = int(table[-2:])
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
    assert world.tables_named() == ALL_TABLES


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
    assert {type(o).__name__[-2:] for o in orders} == {
        f"{world.expected_shard(o):02d}" for o in orders
    }


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
    assert {n for n in world.tables_named()} >= {_table(world, world.model.shard_of(key, value))}
    update_sql = [s for s in world.statements() if s.lstrip().upper().startswith("UPDATE")]
    assert len(update_sql) == 1


def test_bulk_delete_without_key_reaches_every_table(world: World) -> None:
    """delete(Order).where(non-key) runs on every table and deletes the matching rows."""
    world.add_orders(USERS, amount=lambda i: i % 2)
    with world.session() as session:
        world.clear()
        deleted = session.execute(delete(world.m.Order).where(world.m.Order.amount == 1)).rowcount
        session.commit()
        left = session.scalar(select(func.count()).select_from(world.m.Order))
    assert deleted == len(USERS) // 2 and left == len(USERS) - deleted
    assert {s.split()[2] for s in world.statements() if s.startswith("DELETE")} == ALL_TABLES


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
        here = world.model.shard_of(key, getattr(order, key))
        other = next(u for u in range(1, 100) if world.model.shard_of(key, u) != here)
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
