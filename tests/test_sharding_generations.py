"""Layout generations: rows live in the generation of their ID's time, and nothing moves.

One world per backend (SQLite, PostgreSQL, MariaDB), module-scoped: ``Order`` and ``Item``
have generation 0 = 4 tables over databases ``a`` and ``b`` (``Gene(4)``) and generation 1
= 8 tables from ``SWITCH`` (``Gene(8)``, also over ``a`` and ``b``), plus an unsharded twin
``orders_twin`` receiving the same rows. IDs come from two generators on manual clocks,
one before the switch and one after it, so every test chooses the time of its rows.
Placement is checked by reading each physical table with Core; expected tables are
computed from the user id's low bits (the gene), not from snowshard.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import produce_migrations
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import BigInteger, Integer, delete, func, insert, select, update
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    mapped_column,
    relationship,
    selectinload,
)

from snowshard import Layout, Snowflake
from snowshard.cli import main
from snowshard.clock import ManualClock
from snowshard.errors import ShardConfigError
from snowshard.migrations import (
    CreateShardedTableOp,
    collapse_sharded_ops,
    include_database,
)
from snowshard.orm import snowflake_pk
from snowshard.orm.timerange import id_between
from snowshard.sharding import (
    MissingShardKey,
    bulk_insert,
    Sharded,
    ShardKeyChanged,
    ShardKeyConflict,
    Shards,
    UnsupportedShardQuery,
    sharded_model,
)
from snowshard.sharding.explain import explain
from snowshard.sharding.generations import AmbiguousShard, Generation
from snowshard.sharding.keyset import keyset_page
from snowshard.sharding.routing import route
from snowshard.spec import ShardInfo
from snowshard.strategies import Mix, Mod
from snowshard.testing import max_fanout
from tests.backends import DatabaseFactory
from tests.test_sharding_helpers import BACKEND_MARKS
from tests.worlds import World, binary_string, open_world

LAYOUT = Layout(worker_bits=6, gene_bits=4)
SWITCH = datetime(2027, 1, 1, tzinfo=timezone.utc)
SWITCH_MS = int(SWITCH.timestamp() * 1000)
DAY_MS = 86_400_000
GEN0 = {f"orders_{i:02d}" for i in range(4)}
GEN1 = {f"orders_g1_{i:02d}" for i in range(8)}
USERS = [1820, 5177331, 3, 17, 42, 99, 256, 1001, 7, 12, 64, 77, 123456789, 31, 8, 15]


class TwoClocks:
    """An ID issuer over two generators on manual clocks: before and after ``SWITCH``."""

    def __init__(self) -> None:
        self.before = ManualClock(SWITCH_MS - 30 * DAY_MS)
        self.after = ManualClock(SWITCH_MS + 1000)
        self._generators = {
            "before": Snowflake(LAYOUT, worker=1, clock=self.before, sleep=self.before.sleep),
            "after": Snowflake(LAYOUT, worker=2, clock=self.after, sleep=self.after.sleep),
        }
        self.now = "before"

    @property
    def layout(self) -> Layout:
        return LAYOUT

    def next_id(self, gene: object = None) -> int:
        clock = self.before if self.now == "before" else self.after
        clock.advance(1)
        return self._generators[self.now].next_id(gene)


IDS = TwoClocks()


def _generation_shards() -> Shards:
    return Shards(
        4,
        key=("id", "user_id"),
        databases={"a": [0, 1], "b": [2, 3]},
        generations=[
            Generation("2027-01-01T00:00:00Z", 8, databases={"a": range(4), "b": range(4, 8)})
        ],
    )


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    orders: Mapped[list[Any]] = relationship(
        "Order", primaryjoin="User.id == foreign(Order.user_id)", viewonly=True, order_by="Order.id"
    )


class Order(Sharded, Base):
    __tablename__ = "orders"
    __shards__ = _generation_shards()
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger, index=True)
    amount: Mapped[int] = mapped_column(Integer, default=0)
    note: Mapped[str | None] = mapped_column(binary_string(20))


class Item(Sharded, Base):
    __tablename__ = "items"
    __shards__ = _generation_shards()
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)
    order_id: Mapped[int] = mapped_column(BigInteger)


class Twin(Base):
    __tablename__ = "orders_twin"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(BigInteger, index=True)
    amount: Mapped[int] = mapped_column(Integer, default=0)
    note: Mapped[str | None] = mapped_column(binary_string(20))


Base.registry.configure()
MODEL = sharded_model(Order)



@pytest.fixture(
    scope="module",
    params=[pytest.param(b, marks=BACKEND_MARKS[b]) for b in ("sqlite", "postgresql", "mysql")],
)
def module_world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:

    factory = DatabaseFactory.for_request(request, tmp_path_factory.mktemp("generations"))
    try:
        built = open_world(factory, Base, request.param)
        try:
            yield built
        finally:
            built.log.close()
    finally:
        factory.cleanup()


@pytest.fixture
def world(module_world: World) -> Iterator[World]:
    """The backend's world, emptied (every table of every database) after the test."""
    yield module_world
    for key, engine in module_world.engines.items():
        with engine.begin() as conn:
            for table in reversed(Base.metadata.sorted_tables):
                info = table.info.get("snowshard")
                home = info.spec.database_of(info.shard) if isinstance(info, ShardInfo) else None
                if home == key or (home is None and engine is module_world.bind):
                    conn.execute(table.delete())
    module_world.log.clear()
    IDS.now = "before"


def _add(world: World, users: list[int], when: str, amount: Any = lambda i: i) -> list[int]:
    """One order per user, with IDs issued ``when`` ("before"/"after" the switch), twinned."""
    IDS.now = when
    with world.session() as session:
        orders = [Order(user_id=u, amount=amount(i), note=f"n{i % 3}") for i, u in enumerate(users)]
        session.add_all(orders)
        session.flush()
        session.add_all(
            Twin(id=o.id, user_id=o.user_id, amount=o.amount, note=o.note) for o in orders
        )
        session.commit()
        return [o.id for o in orders]


def _both(world: World) -> tuple[list[int], list[int]]:
    """Orders of every user, half issued before the switch and half after."""
    return _add(world, USERS, "before"), _add(world, USERS, "after", amount=lambda i: 100 + i)


def _by_table(world: World) -> dict[str, set[int]]:
    return {name: ids for name, ids in world.rows_by_table(Order).items() if ids}


def _pair(world: World, build: Any) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with world.session() as session:
        sharded = [tuple(r) for r in session.execute(build(Order)).all()]
        twin = [tuple(r) for r in session.execute(build(Twin)).all()]
    return sharded, twin


# --------------------------------------------------------------------------- placement


def test_rows_land_in_the_generation_of_their_id_time(world: World) -> None:
    """Orders issued before the switch are in generation 0's tables, later ones in generation 1's."""
    before, after = _both(world)
    expected: dict[str, set[int]] = {}
    for user, order_id in zip(USERS, before):
        expected.setdefault(f"orders_{user % 4:02d}", set()).add(order_id)
    for user, order_id in zip(USERS, after):
        expected.setdefault(f"orders_g1_{user % 8:02d}", set()).add(order_id)
    assert _by_table(world) == expected


def test_generation_tables_live_in_their_declared_databases(world: World) -> None:
    """Generation 1's tables 0-3 are in database a and 4-7 in b, as declared."""
    _both(world)
    assert [MODEL.database_of(i) for i in range(12)] == ["a"] * 2 + ["b"] * 2 + ["a"] * 4 + [
        "b"
    ] * 4
    with world.engines["a"].connect() as conn:
        names = set(sa.inspect(conn).get_table_names())
    assert {f"orders_g1_{i:02d}" for i in range(4)} <= names
    assert not {f"orders_g1_{i:02d}" for i in range(4, 8)} & names


def test_bulk_insert_issues_ids_and_places_rows_by_their_time(world: World) -> None:
    """insert(Order) with user_id only issues each ID first and stores the row in its generation."""
    IDS.now = "after"
    with world.session() as session:
        session.execute(insert(Order), [{"user_id": u, "amount": 1} for u in USERS])
        session.commit()
        stored = session.execute(select(Order.id, Order.user_id)).all()
    assert len(stored) == len(USERS)
    placed = _by_table(world)
    assert set(placed) <= GEN1
    assert all(i in placed[f"orders_g1_{u % 8:02d}"] for i, u in stored)


def test_bulk_insert_function_places_rows_by_the_generation_of_their_ids(world: World) -> None:
    """bulk_insert with user_id only issues IDs and stores each row in its ID's generation."""
    placed: dict[str, list[int]] = {}
    for when in ("before", "after"):
        IDS.now = when
        with world.session() as session:
            report = bulk_insert(session, Order, [{"user_id": u, "amount": 1} for u in USERS])
            session.commit()
        placed[when] = list(report.ids)
    tables = _by_table(world)
    for when, generation in (("before", "orders_{:02d}"), ("after", "orders_g1_{:02d}")):
        count = 4 if when == "before" else 8
        for order_id, user in zip(placed[when], USERS):
            assert order_id in tables[generation.format(user % count)]


def test_bulk_insert_refuses_an_id_whose_gene_is_not_its_parents(world: World) -> None:
    """bulk_insert refuses a row whose ID and user_id name different tables, naming the row."""
    IDS.now = "after"
    good = IDS.next_id(17)
    with world.session() as session, pytest.raises(ShardKeyConflict, match="row 1"):
        bulk_insert(
            session, Order, [{"id": IDS.next_id(3), "user_id": 3}, {"id": good, "user_id": 18}]
        )


# --------------------------------------------------------------------------- routing


def test_get_by_id_reads_the_one_table_of_its_generation(world: World) -> None:
    """session.get of an ID issued before/after the switch names only that ID's table."""
    before, after = _both(world)
    for order_id, table in ((before[3], "orders_01"), (after[3], "orders_g1_01")):  # user 17
        with world.session() as session, max_fanout(session, tables=1):
            world.log.clear()
            order = session.get(Order, order_id)
            assert order is not None and order.user_id == 17
        assert world.log.touched() == {table}


def test_parent_key_reads_one_table_per_generation(world: World) -> None:
    """WHERE user_id == u names u's table in each generation and finds the orders of both."""
    _both(world)
    with world.session() as session, max_fanout(session, tables=2):
        world.log.clear()
        found = session.scalars(
            select(Order.id).where(Order.user_id == 42).order_by(Order.id)
        ).all()
        twin = session.scalars(select(Twin.id).where(Twin.user_id == 42).order_by(Twin.id)).all()
    assert list(found) == list(twin) and len(twin) == 2
    assert world.log.touched() == {"orders_02", "orders_g1_02"}


def test_in_list_of_parent_keys_is_split_per_table(world: World) -> None:
    """WHERE user_id IN (...) sends each generation's table only its own users."""
    _both(world)
    wanted = [3, 17, 42]
    with world.session() as session:
        world.log.clear()
        found = session.scalars(select(Order.id).where(Order.user_id.in_(wanted))).all()
        twin = session.scalars(select(Twin.id).where(Twin.user_id.in_(wanted))).all()
    assert sorted(found) == sorted(twin) and len(twin) == 6
    sent = [s for s in world.log if s.shards]
    assert {frozenset(s.shards) for s in sent} == {
        frozenset({t})
        for t in (
            "orders_03",
            "orders_01",
            "orders_02",
            "orders_g1_03",
            "orders_g1_01",
            "orders_g1_02",
        )
    }


def test_explain_names_one_table_per_generation(world: World) -> None:
    """explain() of a parent-key query lists a table of each generation and sends no SQL."""
    with world.session() as session:
        world.log.clear()
        plan = explain(session, select(Order).where(Order.user_id == 5))
    assert plan.tables == 2
    named = {t for s in plan.statements for t in s.tables}
    assert named == {"orders_01", "orders_g1_05"}
    assert len(world.log) == 0


# --------------------------------------------------------------------------- time ranges


@pytest.mark.parametrize(
    ("start", "end", "tables"),
    [
        (SWITCH - timedelta(days=60), SWITCH, GEN0),
        (SWITCH, SWITCH + timedelta(days=1), GEN1),
        (SWITCH - timedelta(days=60), SWITCH + timedelta(days=1), GEN0 | GEN1),
    ],
    ids=["before", "after", "across"],
)
def test_time_range_visits_only_overlapping_generations(
    world: World, start: datetime, end: datetime, tables: set[str]
) -> None:
    """id_between(...) reads only the generations its range overlaps, and equals the twin."""
    _both(world)

    def build(m: Any) -> Any:
        return select(m.id, m.amount).where(id_between(m.id, LAYOUT, start, end)).order_by(m.id)

    world.log.clear()
    sharded, twin = _pair(world, build)
    assert sharded == twin and twin
    assert world.log.touched() == tables


def test_between_on_the_id_is_routed_to_its_generations(world: World) -> None:
    """Order.id.between(x, y) with both bounds after the switch reads generation 1 only."""
    _, after = _both(world)
    low, high = sorted(after)[2], sorted(after)[9]
    world.log.clear()
    sharded, twin = _pair(
        world, lambda m: select(m.id).where(m.id.between(low, high)).order_by(m.id)
    )
    assert sharded == twin and len(twin) == 8
    assert world.log.touched() <= GEN1


GEN0_INDICES = frozenset(range(4))
GEN1_INDICES = frozenset(range(4, 12))


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (
            lambda first: Order.id.between(first + 10, first - 10, symmetric=True),
            GEN0_INDICES | GEN1_INDICES,
        ),
        (lambda first: Order.id.between(first + 10, first + 20, symmetric=True), GEN1_INDICES),
        (lambda first: Order.id.between(first + 10, first - 10), frozenset()),
        (lambda first: first <= Order.id, GEN1_INDICES),
        (lambda first: Order.id > first - 1, GEN1_INDICES),
        (lambda first: Order.id <= first - 1, GEN0_INDICES),
        (lambda first: (Order.id < first) | (Order.id == first + 5), GEN0_INDICES | {4 + 5}),
        (lambda first: Order.id < -1, frozenset()),
        (lambda first: Order.id != first, None),
    ],
    ids=[
        "symmetric-across",
        "symmetric-after",
        "empty",
        "ge-flipped",
        "gt",
        "le",
        "or",
        "negative",
        "ne",
    ],
)
def test_id_ranges_route_to_the_generations_they_overlap(
    where: Any, expected: frozenset[int] | None
) -> None:
    """Range terms on the ID name every table of each generation they can match, and only those."""
    first = LAYOUT.min_id(SWITCH)
    assert route([MODEL], where(first), {}).shards == expected


# --------------------------------------------------------------------------- merges


def test_fan_out_order_by_limit_offset_equals_the_twin(world: World) -> None:
    """A query without a shard key reads both generations and sorts/limits like one table."""
    _both(world)
    world.log.clear()
    sharded, twin = _pair(
        world,
        lambda m: (
            select(m.id, m.user_id, m.amount)
            .where(m.amount % 3 != 1)
            .order_by(m.amount.desc(), m.id)
            .limit(7)
            .offset(4)
        ),
    )
    assert sharded == twin and len(twin) == 7
    assert world.log.touched() == GEN0 | GEN1


def test_aggregates_and_group_by_equal_the_twin(world: World) -> None:
    """COUNT/SUM/MIN/MAX grouped by note across generations equal one table's answer."""
    _both(world)
    sharded, twin = _pair(
        world,
        lambda m: (
            select(m.note, func.count(), func.sum(m.amount), func.min(m.id), func.max(m.id))
            .group_by(m.note)
            .order_by(m.note)
        ),
    )
    assert sharded == twin and len(twin) == 3


_ONE_TABLE_PER_KEY = {
    "a window partitioned by the key": lambda m: select(
        m.user_id, func.count().over(partition_by=m.user_id)
    ),
    "a derived table DISTINCT over the key": lambda m: select(func.count()).select_from(
        select(m.user_id).distinct().subquery()
    ),
    "the key IN a SELECT of it": lambda m: select(m.user_id).where(
        m.user_id.in_(select(m.user_id).where(m.amount >= 100))
    ),
}


@pytest.mark.parametrize("name", list(_ONE_TABLE_PER_KEY))
def test_shapes_that_need_a_keys_rows_in_one_table_are_refused(world: World, name: str) -> None:
    """A user's orders span a table of each generation (of two databases for most users):
    a window partitioned by user_id, a DISTINCT derived table over it and user_id IN
    (SELECT user_id ...) would see each table's share; refused before any SQL. The twin
    shows what one table sees: both of each user's orders."""
    _both(world)
    build = _ONE_TABLE_PER_KEY[name]
    with world.session() as session:
        twin = [tuple(r) for r in session.execute(build(Twin))]
        world.log.clear()
        with pytest.raises(UnsupportedShardQuery):
            session.execute(build(Order))
    assert len(world.log) == 0
    expected = {
        "a window partitioned by the key": sorted((u, 2) for u in USERS for _ in range(2)),
        "a derived table DISTINCT over the key": [(len(USERS),)],
        "the key IN a SELECT of it": sorted((u,) for u in USERS for _ in range(2)),
    }
    assert sorted(twin) == expected[name]


def test_keyset_pages_walk_both_generations_like_the_twin(world: World) -> None:
    """Keyset pages by id (descending) return the twin's order, crossing the switch."""
    _both(world)
    seen: list[int] = []
    with world.session() as session:
        page = keyset_page(session, select(Order), Order.id, size=5)
        while page.items:
            seen.extend(o.id for o in page.items)
            if page.after is None:
                break
            page = keyset_page(session, select(Order), Order.id, size=5, after=page.after)
        twin = session.scalars(select(Twin.id).order_by(Twin.id.desc())).all()
    assert seen == list(twin) and len(seen) == 2 * len(USERS)


def test_relationship_loads_orders_of_both_generations(world: World) -> None:
    """User.orders (lazy and selectin) lists the orders a user has in every generation."""
    _both(world)
    with world.session() as session:
        session.add_all(User(id=u) for u in USERS[:4])
        session.commit()
    with world.session() as session:
        lazy = {u.id: [o.id for o in u.orders] for u in session.scalars(select(User))}
    with world.session() as session:
        loaded = session.scalars(select(User).options(selectinload(User.orders))).all()
        eager = {u.id: [o.id for o in u.orders] for u in loaded}
        twin = {
            u: list(session.scalars(select(Twin.id).where(Twin.user_id == u).order_by(Twin.id)))
            for u in USERS[:4]
        }
    assert lazy == eager == twin
    assert all(len(ids) == 2 for ids in twin.values())


# --------------------------------------------------------------------------- writes


def test_update_and_delete_by_parent_key_reach_both_generations(world: World) -> None:
    """update/delete WHERE user_id == u change the rows of both generations, like the twin."""
    _both(world)
    with world.session() as session:
        for m in (Order, Twin):
            session.execute(update(m).where(m.user_id == 99).values(amount=m.amount + 1000))
            session.execute(delete(m).where(m.user_id == 7))
        session.commit()
    sharded, twin = _pair(world, lambda m: select(m.id, m.user_id, m.amount).order_by(m.id))
    assert sharded == twin
    assert sum(1 for r in twin if r[2] >= 1000) == 2 and not any(r[1] == 7 for r in twin)


def test_orm_update_and_delete_write_to_each_rows_own_table(world: World) -> None:
    """Changing one old and deleting one new order writes only to their two tables."""
    before, after = _both(world)
    with world.session() as session:
        old = session.get(Order, before[0])
        new = session.get(Order, after[1])
        old.amount = 555
        session.delete(new)
        world.log.clear()
        session.commit()
    writes = [s for s in world.log if s.verb in ("UPDATE", "DELETE")]
    assert {t for s in writes for t in s.shards} == {"orders_00", "orders_g1_03"}
    with world.session() as session:
        assert session.get(Order, before[0]).amount == 555
        assert session.get(Order, after[1]) is None


def test_a_row_cannot_be_flushed_into_another_generation(world: World) -> None:
    """A physical row of generation 0 holding an ID of generation 1 is refused before SQL."""
    IDS.now = "after"
    new_id = IDS.next_id(42)
    with world.session() as session:
        wrong = MODEL.classes[2](id=new_id, user_id=42)  # orders_02, generation 0
        session.add(wrong)
        world.log.clear()
        with pytest.raises(ShardKeyChanged, match="orders_02"):
            session.flush()
    assert len(world.log) == 0


def test_a_physical_row_without_id_is_refused(world: World) -> None:
    """Building a physical class directly without an ID is refused: its time is unknown."""
    with world.session() as session:
        session.add(MODEL.classes[5](user_id=1))  # orders_g1_01
        world.log.clear()
        with pytest.raises(MissingShardKey, match="ID's time picks the table"):
            session.flush()
    assert len(world.log) == 0


def test_joining_two_models_with_generations_is_refused(world: World) -> None:
    """A join of Order and Item (both with generations) raises UnsupportedShardQuery before SQL."""
    with world.session() as session:
        world.log.clear()
        with pytest.raises(UnsupportedShardQuery, match="Order and Item"):
            session.execute(select(Order, Item).join(Item, Item.order_id == Order.id)).all()
    assert len(world.log) == 0


# --------------------------------------------------------------------------- no database


def test_shard_of_a_parent_key_is_ambiguous() -> None:
    """shard_of(user_id) raises AmbiguousShard naming both tables; shards_of lists them."""
    with pytest.raises(AmbiguousShard, match="orders_01, orders_g1_05"):
        MODEL.shard_of("user_id", 5)
    assert MODEL.shards_of("user_id", 5) == (1, 4 + 5)


def test_generations_of_the_model() -> None:
    """The model describes each generation's spec, offset and switch time."""
    zero, one = MODEL.generations
    assert (zero.offset, zero.count, zero.since) == (0, 4, None)
    assert (one.offset, one.count, one.since) == (4, 8, "2027-01-01T00:00:00.000Z")
    assert one.first_id == LAYOUT.min_id(SWITCH)
    assert [t.name for t in MODEL.tables] == sorted(GEN0) + sorted(GEN1)
    assert MODEL.classes[4].__name__ == "Order_g1_00"


def test_the_last_id_before_the_switch_is_in_generation_0() -> None:
    """min_id(SWITCH) - 1 routes to generation 0 and min_id(SWITCH) to generation 1."""
    first = LAYOUT.min_id(SWITCH)
    assert MODEL.shard_of("id", first - 1) < 4 <= MODEL.shard_of("id", first)


def test_a_given_id_picks_the_class_of_its_generation() -> None:
    """Order(id=x, user_id=u) builds the class of x's generation and table, whatever the clock says."""
    gene = 42 % 16
    before = LAYOUT.compose(SWITCH - timedelta(seconds=1), worker=5, gene=gene)
    after = LAYOUT.compose(SWITCH, worker=5, gene=gene)
    assert type(Order(id=before, user_id=42)).__table__.name == "orders_02"
    assert type(Order(id=after, user_id=42)).__table__.name == "orders_g1_02"


def test_an_id_without_its_parents_gene_is_refused() -> None:
    """Order(id=x, user_id=u) where x's table cannot hold u raises ShardKeyConflict naming both."""
    after = LAYOUT.compose(SWITCH, worker=5, gene=3)
    with pytest.raises(ShardKeyConflict, match="orders_g1_03.*orders_02, orders_g1_02"):
        Order(id=after, user_id=42)


def _declare(shards: Any, pk: bool = True) -> type:
    class B(DeclarativeBase):
        pass

    namespace: dict[str, Any] = {
        "__tablename__": "things",
        "__shards__": shards,
        "user_id": mapped_column(BigInteger),
        "__annotations__": {"user_id": Mapped[int]},
    }
    if pk:
        namespace["id"] = snowflake_pk(IDS, gene_from="user_id")
        namespace["__annotations__"]["id"] = Mapped[int]
    else:
        namespace["id"] = mapped_column(BigInteger, primary_key=True)
        namespace["__annotations__"]["id"] = Mapped[int]
    return type("Thing", (Sharded, B), namespace)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Generation("2027-01-01T00:00:00", 8), "has no UTC offset"),
        (lambda: Generation("next year", 8), "is not an ISO 8601 time"),
        (lambda: Generation(datetime(2027, 1, 1), 8), "naive datetime"),
        (lambda: Generation(20270101, 8), "must be an ISO 8601 str"),  # type: ignore[arg-type]
        (lambda: Generation("2027-01-01T00:00:00Z", 0), r"count=...\) must be an int >= 1"),
        (
            lambda: Shards(
                4,
                key="id",
                generations=[
                    Generation("2028-01-01T00:00Z", 8),
                    Generation("2027-01-01T00:00Z", 8),
                ],
            ),
            "not after generation 1",
        ),
        (
            lambda: Shards(4, key="id", generations=[("2027-01-01T00:00Z", 8)]),  # type: ignore[list-item]
            "must be a Generation",
        ),
        (
            lambda: Shards(4, key="id", generations="2027"),  # type: ignore[arg-type]
            "must be a list of Generation",
        ),
    ],
    ids=["no-offset", "not-iso", "naive", "int", "count", "order", "tuple", "str"],
)
def test_bad_declarations_are_refused(make: Any, message: str) -> None:
    """A malformed Generation or generations list raises ShardConfigError naming the value."""
    with pytest.raises(ShardConfigError, match=message):
        make()


@pytest.mark.parametrize(
    ("shards", "pk", "message"),
    [
        (
            Shards(4, key="user_id", generations=[Generation("2027-01-01T00:00Z", 8)]),
            True,
            "must be a snowflake ID",
        ),
        (
            Shards(4, key="id", generations=[Generation("2027-01-01T00:00Z", 8)]),
            False,
            "must be a snowflake ID",
        ),
        (
            Shards(
                4,
                key="id",
                pattern="{name}_g1_{index:02d}",
                generations=[Generation("2027-01-01T00:00Z", 2)],
            ),
            True,
            "would belong to generations 0 and 1",
        ),
        (
            Shards(4, key="id", generations=[Generation("1999-01-01T00:00Z", 8)]),
            True,
            "precedes the ID layout's epoch",
        ),
        (
            Shards(4, key="id", generations=[Generation("2027-01-01T00:00Z", 8, strategy=Mod(4))]),
            True,
            "declares 8 tables",
        ),
        (
            Shards(
                4,
                key=("id", "user_id"),
                generations=[Generation("2027-01-01T00:00Z", 8, strategy=Mix(8))],
            ),
            True,
            r"\(generation 1\) does not send user_id",
        ),
    ],
    ids=[
        "parent-key-only",
        "no-snowflake-pk",
        "name-clash",
        "before-epoch",
        "strategy-count",
        "no-colocation",
    ],
)
def test_bad_generations_for_a_model_are_refused(shards: Shards, pk: bool, message: str) -> None:
    """Generations a model cannot route exactly raise ShardConfigError at declaration."""
    with pytest.raises(ShardConfigError, match=message):
        _declare(shards, pk)


# --------------------------------------------------------------------------- migrations


def test_autogenerate_creates_the_new_generation_with_sharded_operations(
    database_factory: DatabaseFactory, sql_backend: str
) -> None:
    """On a database holding generation 0, autogenerate emits one create per new spec, and
    running it creates exactly generation 1's tables of that database; then nothing is left."""
    [url] = database_factory(sql_backend, 1)
    engine = database_factory.engine(url)
    old = [
        t
        for t in Base.metadata.sorted_tables
        if isinstance(info := t.info.get("snowshard"), ShardInfo)
        and "_g1_" not in t.name
        and info.spec.database_of(info.shard) == "a"
    ]
    Base.metadata.create_all(engine, tables=old)
    options = {
        "target_metadata": Base.metadata,
        "include_object": include_database("a"),
        "snowshard_database": "a",
    }
    with engine.begin() as connection:
        context = MigrationContext.configure(connection, opts=options)
        script = produce_migrations(context, Base.metadata)
        collapse_sharded_ops(context, None, [script])
        assert script.upgrade_ops is not None
        created = [op for op in script.upgrade_ops.ops if isinstance(op, CreateShardedTableOp)]
        assert sorted((op.spec.name, op.spec.pattern) for op in created) == [
            ("items", "{name}_g1_{index:02d}"),
            ("orders", "{name}_g1_{index:02d}"),
        ]
        operations = Operations(context)
        for op in script.upgrade_ops.ops:
            operations.invoke(op)
    with engine.begin() as connection:
        names = set(sa.inspect(connection).get_table_names())
        context = MigrationContext.configure(connection, opts=options)
        again = produce_migrations(context, Base.metadata)
    assert {n for n in names if "_g1_" in n} == {
        f"{name}_g1_{i:02d}" for name in ("orders", "items") for i in range(4)
    }
    assert again.upgrade_ops is not None and again.upgrade_ops.is_empty()


# --------------------------------------------------------------------------- snowshard layout

CLI_MODELS = """
from sqlalchemy import BigInteger
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, Shards
from snowshard.sharding.generations import Generation

ids = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=1)


class Base(DeclarativeBase):
    pass


class Order(Sharded, Base):
    __tablename__ = "orders"
    __shards__ = Shards(4, key=("id", "user_id"), generations=[
        Generation("2027-01-01T00:00:00Z", 8, databases={"a": range(4), "b": range(4, 8)})
    ])
    id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)
"""


def _layout_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    (tmp_path / "generation_cli_models.py").write_text(CLI_MODELS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("SNOWSHARD_LAYOUT", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    try:
        code = main(["layout", "--gene-bits", "4", "--worker-bits", "6", *args])
    finally:
        sys.modules.pop("generation_cli_models", None)
    out, err = capsys.readouterr()
    return code, out, err


def test_layout_command_lists_generations_as_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """layout --model M:Order --json gives each generation's switch, first ID, indices, tables."""
    code, out, _ = _layout_cli(
        tmp_path, monkeypatch, capsys, "--model", "generation_cli_models:Order", "--json"
    )
    assert code == 0
    assert json.loads(out)["generations"] == [
        {
            "generation": 0, "since": None, "first_id": "0", "indices": [0, 3],
            "tables": ["orders_00", "orders_03"], "count": 4, "strategy": "Gene(4)",
            "databases": {"default": 4},
        },
        {
            "generation": 1, "since": "2027-01-01T00:00:00.000Z",
            "first_id": str(LAYOUT.min_id(SWITCH)), "indices": [4, 11],
            "tables": ["orders_g1_00", "orders_g1_07"], "count": 8, "strategy": "Gene(8)",
            "databases": {"a": 4, "b": 4},
        },
    ]  # fmt: skip


def test_layout_command_prints_a_generation_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """layout --model M:Order prints one row per generation, with its switch time and tables."""
    code, out, _ = _layout_cli(
        tmp_path, monkeypatch, capsys, "--model", "generation_cli_models:Order"
    )
    assert code == 0
    lines = out[out.index("Order: layout generations") :].splitlines()
    assert lines[2].split() == [
        "0",
        "(from",
        "the",
        "start)",
        "0..3",
        "orders_00..orders_03",
        "Gene(4)",
        "default:",
        "4",
    ]
    assert lines[3].split() == [
        "1", "2027-01-01T00:00:00.000Z", "4..11", "orders_g1_00..orders_g1_07", "Gene(8)", "a:", "4,", "b:", "4",
    ]  # fmt: skip


def test_layout_command_refuses_a_model_it_cannot_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--model naming a missing module exits 2 with an error naming it, and no traceback."""
    code, _, err = _layout_cli(tmp_path, monkeypatch, capsys, "--model", "no_such_module:Order")
    assert code == 2
    assert "cannot import 'no_such_module'" in err and "Traceback" not in err
