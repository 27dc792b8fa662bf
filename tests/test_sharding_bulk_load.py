"""bulk_insert: rows checked before anything is written, then COPY / multi-row INSERT per table.

Placement is checked against the strategies' arithmetic (``Gene(4)``: ``user_id & 3``;
``Mod(4)``: ``user_id % 4``; a gene is the ID's low 4 bits), stored rows against an
unsharded twin table loaded with SQLAlchemy's own executemany, on SQLite, PostgreSQL (COPY)
and MariaDB, in one database and across two.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import (
    BigInteger,
    DateTime,
    Integer,
    String,
    event,
    func,
    insert,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from snowshard.errors import MissingExtra
from snowshard.orm import UtcDateTime, snowflake_pk
from snowshard.sharding import (
    InvalidShardKey,
    MissingShardKey,
    Sharded,
    ShardedSession,
    ShardKeyConflict,
    ShardKeyTypeError,
    Shards,
    sharded_model,
)
from snowshard.sharding.bulk_errors import (
    BulkInvalidShardKey,
    BulkMissingShardKey,
    BulkRowError,
    BulkRowTypeError,
    BulkShardKeyConflict,
    BulkShardKeyTypeError,
    InvalidBulkArgument,
)
from snowshard.sharding.bulk_load import bulk_insert, progress_bar
from snowshard.strategies import Mod
from tests.worlds import IDS, World, WorldFactory, declare_shop

GENE_MASK = 15  # tests.worlds.LAYOUT has 4 gene bits: the gene is the ID's low 4 bits
BATCH = 100  # rows per statement and per check in the larger loads

SHOP = declare_shop(4)
SHOP_2DB = declare_shop(4, databases=2)  # orders_00/01 in database "a", 02/03 in "b"
SHOP_MOD = declare_shop(4, key="user_id", strategy=Mod(4))  # the ID is no shard key here

SERVERS = [
    pytest.param("postgresql", marks=pytest.mark.postgres, id="postgresql"),
    pytest.param("mysql", marks=pytest.mark.mysql, id="mysql"),
]


class TwinBase(DeclarativeBase):
    pass


class TwinOrder(TwinBase):
    """The shop's Order as one plain table: same columns, same defaults."""

    __tablename__ = "twin_orders"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(BigInteger)
    amount: Mapped[int] = mapped_column(Integer, default=0)
    note: Mapped[str | None] = mapped_column(String(20))


class EventBase(DeclarativeBase):
    pass


class Event(Sharded, EventBase):
    """TypeDecorator columns: a string snowflake ID and an aware UTC datetime."""

    __tablename__ = "events"
    __shards__ = Shards(4, key=("id", "user_id"))
    id: Mapped[str] = snowflake_pk(IDS, gene_from="user_id", as_string=True)
    user_id: Mapped[int] = mapped_column(BigInteger)
    at: Mapped[datetime] = mapped_column(UtcDateTime())


class DefaultsBase(DeclarativeBase):
    pass


def _label(context: Any) -> str:
    return f"user {context.get_current_parameters()['user_id']}"


class Ticket(Sharded, DefaultsBase):
    """Python-side defaults bulk_insert computes: scalar, zero-arg and row-reading callables."""

    __tablename__ = "tickets"
    __shards__ = Shards(4, key="user_id")
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(10), default="new")
    priority: Mapped[int] = mapped_column(Integer, default=lambda: 3)
    label: Mapped[str] = mapped_column(String(30), default=_label)


class Audit(Sharded, DefaultsBase):
    """Defaults only a statement can compute."""

    __tablename__ = "audits"
    __shards__ = Shards(4, key="user_id")
    id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
    user_id: Mapped[int] = mapped_column(BigInteger)
    seen: Mapped[int | None] = mapped_column(
        Integer, default=lambda context: context.connection.scalar(select(1))
    )
    created: Mapped[datetime | None] = mapped_column(DateTime, default=func.now())


@pytest.fixture(params=[1, 2], ids=["1db", "2db"])
def shop_world(
    request: pytest.FixtureRequest, sharded_world: WorldFactory, sql_backend: str
) -> World:
    """The shop in one database, or split over two, per backend."""
    return sharded_world(SHOP if request.param == 1 else SHOP_2DB, sql_backend)


def _stored(world: World, model: Any) -> dict[str, set[tuple[Any, ...]]]:
    """Every row of each physical table, read with Core from its own database."""
    sharded = sharded_model(model)
    found: dict[str, set[tuple[Any, ...]]] = {}
    for shard, table in enumerate(sharded.tables):
        engine = world.engines.get(sharded.database_of(shard), world.bind)
        with engine.connect() as conn:
            found[table.name] = set(map(tuple, conn.execute(select(table)).all()))
    return found


def _count(session: Session, model: Any) -> int:
    return int(session.scalar(select(func.count()).select_from(model)) or 0)


def _orders(users: range) -> list[dict[str, Any]]:
    return [{"user_id": user, "amount": user * 10, "note": f"n{user}"} for user in users]


# --------------------------------------------------------------------------- placement


def test_rows_land_in_the_table_of_their_user_and_ids_carry_the_gene(shop_world: World) -> None:
    """Each row is in orders_<user_id & 3>, with an ID whose low 4 bits are user_id's."""
    users = range(40)
    with shop_world.session() as session:
        report = bulk_insert(session, shop_world.Order, _orders(users))
        session.commit()
    assert report.total == 40 and len(report.ids) == 40
    assert [i & GENE_MASK for i in report.ids] == [u & GENE_MASK for u in users]
    expected: dict[str, set[int]] = {f"orders_{t:02d}": set() for t in range(4)}
    for user, new_id in zip(users, report.ids):
        expected[f"orders_{user & 3:02d}"].add(new_id)
    assert shop_world.rows_by_table(shop_world.Order) == expected
    assert report.tables == {name: len(ids) for name, ids in expected.items()}


def test_mod_routing_by_user_id_alone_issues_ids_from_the_column_default(
    sharded_world: WorldFactory,
) -> None:
    """Keyed by user_id with Mod(4): rows go to orders_<user_id % 4>, IDs still carry genes."""
    world = sharded_world(SHOP_MOD)
    users = range(3, 60, 7)
    with world.session() as session:
        report = bulk_insert(session, world.Order, _orders(users))
        session.commit()
    expected: dict[str, set[int]] = {f"orders_{t:02d}": set() for t in range(4)}
    for user, new_id in zip(users, report.ids):
        assert new_id & GENE_MASK == user & GENE_MASK
        expected[f"orders_{user % 4:02d}"].add(new_id)
    assert world.rows_by_table(world.Order) == expected


def test_loaded_rows_equal_an_unsharded_twin(sharded_world: WorldFactory, sql_backend: str) -> None:
    """Across two databases, the shards hold exactly what executemany puts into a plain table.

    Rows are checked a batch at a time: the first two batches are uniform, with their IDs
    (checked a column at a time), the third mixes given and missing IDs, amounts and notes
    (checked row by row, defaults applied).
    """
    world = sharded_world(SHOP_2DB, sql_backend)
    TwinBase.metadata.create_all(world.bind)
    uniform = [
        {"id": IDS.next_id(gene=u % 50), "user_id": u % 50, "amount": u, "note": "x"}
        for u in range(2 * BATCH)
    ]
    mixed: list[dict[str, Any]] = []
    for u in range(BATCH):
        row: dict[str, Any] = {"user_id": u}
        if u % 3 == 0:
            row["id"] = IDS.next_id(gene=u)
        if u % 2 == 0:
            row["amount"] = -u
        if u % 5 == 0:
            row["note"] = None if u % 10 else "tab\there\\ \"q\" 'é'"
        mixed.append(row)
    rows = uniform + mixed
    with world.session() as session:
        report = bulk_insert(session, world.Order, rows, batch_size=BATCH)
        session.commit()
    twin_rows = [{**row, "id": new_id} for row, new_id in zip(rows, report.ids)]
    with Session(world.bind) as plain:
        plain.execute(insert(TwinOrder), twin_rows)
        plain.commit()
        twin = set(map(tuple, plain.execute(select(TwinOrder.__table__)).all()))
    stored = _stored(world, world.Order)
    assert len(twin) == len(rows)
    assert set().union(*stored.values()) == twin
    for name, table_rows in stored.items():  # (id, user_id, ...) in orders_<user_id & 3>
        assert {user & 3 for _, user, *_ in table_rows} == {int(name[-2:])}


def test_rollback_discards_the_load(sharded_world: WorldFactory, sql_backend: str) -> None:
    """Rows bulk-loaded into two databases are gone after the session rolls back."""
    world = sharded_world(SHOP_2DB, sql_backend)
    with world.session() as session:
        bulk_insert(session, world.Order, _orders(range(20)))
        assert _count(session, world.Order) == 20
        session.rollback()
    assert _stored(world, world.Order) == {f"orders_{t:02d}": set() for t in range(4)}


@pytest.mark.parametrize("backend", SERVERS)
def test_a_two_phase_session_prepares_and_commits_the_load(
    backend: str, sharded_world: WorldFactory
) -> None:
    """With twophase=True, both databases holding loaded rows are prepared, then committed."""
    world = sharded_world(SHOP_2DB, backend)
    prepared: list[str] = []
    for engine in world.engines.values():
        event.listen(engine, "prepare_twophase", lambda conn, xid: prepared.append(str(xid)))
    with world.session(twophase=True) as session:
        bulk_insert(session, world.Order, _orders(range(8)))
        session.commit()
    assert len(prepared) == 2
    stored = _stored(world, world.Order)
    assert {name: len(rows) for name, rows in stored.items()} == {
        f"orders_{t:02d}": 2 for t in range(4)
    }


# --------------------------------------------------------------------------- types, defaults


def test_type_decorator_columns_round_trip(sharded_world: WorldFactory, sql_backend: str) -> None:
    """UtcDateTime keeps the instant and its microseconds; string IDs come back as given."""
    world = sharded_world(EventBase, sql_backend)
    plus5 = timezone(timedelta(hours=5))
    given = {
        str(IDS.next_id(gene=u)): (u, datetime(2024, 2, 29, 23, 59, 58, 123456 + u, tzinfo=plus5))
        for u in range(12)
    }
    rows: list[dict[str, Any]] = [
        {"id": key, "user_id": user, "at": at} for key, (user, at) in given.items()
    ]
    rows.append({"user_id": 99, "at": datetime(2030, 1, 1, tzinfo=timezone.utc)})  # ID issued
    with world.session() as session:
        report = bulk_insert(session, Event, rows)
        session.commit()
        assert report.ids[:12] == list(given) and isinstance(report.ids[12], str)
        loaded = {e.id: (e.user_id, e.at) for e in session.scalars(select(Event))}
    assert loaded.pop(report.ids[12]) == (99, datetime(2030, 1, 1, tzinfo=timezone.utc))
    assert loaded == given
    assert all(at.tzinfo == timezone.utc for _, at in loaded.values())


def test_python_side_defaults_are_applied(sharded_world: WorldFactory) -> None:
    """Scalar, zero-argument and row-reading defaults fill what a row leaves out."""
    world = sharded_world(DefaultsBase)
    rows: list[dict[str, Any]] = [
        {"user_id": 5},
        {"user_id": 6, "status": "open", "priority": 1, "label": "mine"},
    ]
    with world.session() as session:
        report = bulk_insert(session, Ticket, rows)
        session.commit()
        stored = {
            t.user_id: (t.id, t.status, t.priority, t.label)
            for t in session.scalars(select(Ticket))
        }
    assert stored == {
        5: (report.ids[0], "new", 3, "user 5"),
        6: (report.ids[1], "open", 1, "mine"),
    }
    assert [i & GENE_MASK for i in report.ids] == [5, 6]


@pytest.mark.parametrize(
    ("row", "column"),
    [
        pytest.param({"user_id": 1, "created": None}, "seen", id="default-reads-connection"),
        pytest.param({"user_id": 1, "seen": 0}, "created", id="sql-expression-default"),
    ],
)
def test_a_default_that_needs_a_statement_is_refused(
    row: dict[str, Any], column: str, sharded_world: WorldFactory
) -> None:
    """A missing value whose default needs a statement raises, naming the column and row."""
    world = sharded_world(DefaultsBase)
    rows: list[dict[str, Any]] = [{"user_id": 1, "seen": 0, "created": None}] * 2 + [row]
    with world.session() as session:
        with pytest.raises(BulkRowError, match=rf"row 2 .*{column}") as caught:
            bulk_insert(session, Audit, rows)
        assert caught.value.index == 2
        assert _count(session, Audit) == 0


# --------------------------------------------------------------------------- bad rows

BAD_ROWS = [
    pytest.param({"amount": 1}, BulkMissingShardKey, MissingShardKey, id="no-key"),
    pytest.param({}, BulkMissingShardKey, MissingShardKey, id="empty"),
    pytest.param({"user_id": None}, BulkMissingShardKey, MissingShardKey, id="null-key"),
    pytest.param({"user_id": 1.5}, BulkShardKeyTypeError, ShardKeyTypeError, id="float-key"),
    pytest.param({"user_id": True}, BulkShardKeyTypeError, ShardKeyTypeError, id="bool-key"),
    pytest.param({"user_id": -4}, BulkInvalidShardKey, InvalidShardKey, id="negative-key"),
    pytest.param({"id": "12x", "user_id": 1}, BulkInvalidShardKey, InvalidShardKey, id="bad-id"),
    pytest.param(
        {"id": IDS.next_id(gene=1), "user_id": 2},
        BulkShardKeyConflict,
        ShardKeyConflict,
        id="keys-disagree",
    ),
    pytest.param({"user_id": 1, "colour": "red"}, BulkRowError, ValueError, id="unknown-column"),
    pytest.param((1, 2), BulkRowTypeError, TypeError, id="not-a-mapping"),
]


@pytest.mark.parametrize(("bad", "error", "single_row_error"), BAD_ROWS)
def test_a_bad_row_raises_naming_its_index_before_anything_is_written(
    bad: Any,
    error: type[BulkRowError],
    single_row_error: type[Exception],
    sharded_world: WorldFactory,
) -> None:
    """Row 3 of 6 is refused with its index in the message; no row reaches a table."""
    world = sharded_world(SHOP)
    rows = _orders(range(3)) + [bad] + _orders(range(4, 6))
    with world.session() as session:
        with pytest.raises(error, match=r"\brow 3\b") as caught:
            bulk_insert(session, world.Order, rows)
        assert isinstance(caught.value, single_row_error)
        assert caught.value.index == 3
        assert _count(session, world.Order) == 0


def test_an_id_above_the_bigint_range_is_refused_in_a_uniform_load(
    sharded_world: WorldFactory,
) -> None:
    """Among rows that all give id and user_id, an ID above 2**63-1 is refused by its index."""
    world = sharded_world(SHOP)
    rows = [
        {"id": IDS.next_id(gene=u), "user_id": u, "amount": 1, "note": None} for u in range(6)
    ]
    rows[3]["id"] = 2**63 + 3  # gene 3, as user 3's: it routes, but no BIGINT holds it
    with world.session() as session:
        with pytest.raises(BulkRowError, match=r"row 3 .*2\*\*63-1") as caught:
            bulk_insert(session, world.Order, rows)
        assert caught.value.index == 3
        assert _count(session, world.Order) == 0


def test_a_value_its_type_refuses_is_reported_before_anything_is_written(
    sharded_world: WorldFactory,
) -> None:
    """A naive datetime for a UtcDateTime column fails in the check, naming row and column."""
    world = sharded_world(EventBase)
    aware = datetime(2024, 1, 1, tzinfo=timezone.utc)
    rows = [{"user_id": u, "at": aware} for u in range(4)]
    rows.insert(2, {"user_id": 9, "at": datetime(2024, 1, 1)})
    with world.session() as session:
        with pytest.raises(BulkRowError, match=r"row 2 .*\bat\b.*naive") as caught:
            bulk_insert(session, Event, rows)
        assert caught.value.index == 2
        assert _count(session, Event) == 0


def test_a_bad_row_after_a_full_batch_writes_nothing(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """A conflict in the second batch of a load is found before the first is written."""
    world = sharded_world(SHOP, sql_backend)
    rows: list[dict[str, Any]] = [
        {"id": IDS.next_id(gene=u % 8), "user_id": u % 8, "amount": u, "note": None}
        for u in range(BATCH + 5)
    ]
    bad = BATCH + 2
    rows[bad]["user_id"] += 1  # its ID keeps the old user's gene: the keys name two shards
    with world.session() as session:
        with pytest.raises(BulkShardKeyConflict, match=rf"\brow {bad}\b"):
            bulk_insert(session, world.Order, rows, batch_size=BATCH)
        assert _count(session, world.Order) == 0


# --------------------------------------------------------------------------- session, progress


def test_pending_objects_are_flushed_first(sharded_world: WorldFactory) -> None:
    """An autoflushing session flushes what was added before the load; no_autoflush does not."""
    world = sharded_world(SHOP)
    with world.session() as session:
        session.add(world.Order(user_id=1))
        bulk_insert(session, world.Order, _orders(range(2)))
        assert not session.new and _count(session, world.Order) == 3
        session.add(world.Order(user_id=2))
        with session.no_autoflush:
            bulk_insert(session, world.Order, _orders(range(2)))
            assert len(session.new) == 1


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_progress_counts_rise_to_the_total(backend: str, sharded_world: WorldFactory) -> None:
    """progress(done, total) starts at 0, rises batch by batch and ends at the total."""
    world = sharded_world(SHOP, backend)
    calls: list[tuple[int, int]] = []
    with world.session() as session:
        bulk_insert(
            session,
            world.Order,
            _orders(range(50)),
            batch_size=4,
            progress=lambda done, total: calls.append((done, total)),
        )
    done = [d for d, _ in calls]
    assert {t for _, t in calls} == {50}
    assert done[0] == 0 and done[-1] == 50
    assert done == sorted(done) and len(set(done)) == len(done)
    assert len(calls) > 50 // 4  # at least one call per batch of 4 rows, plus the first


def test_progress_bar_draws_the_rows_written() -> None:
    """progress_bar's callback drives a rich bar that ends at done/total."""
    from rich.console import Console

    out = io.StringIO()
    with progress_bar("orders", console=Console(file=out, width=100)) as progress:
        progress(0, 30)
        progress(30, 30)
    assert "orders" in out.getvalue() and "30/30" in out.getvalue()


def test_progress_bar_without_rich_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without rich, progress_bar raises MissingExtra naming the [cli] extra."""
    monkeypatch.setitem(sys.modules, "rich.progress", None)  # as if rich were not installed
    with pytest.raises(MissingExtra, match=r"\[cli\]"), progress_bar():
        pass


# --------------------------------------------------------------------------- arguments


@pytest.fixture
def sqlite_session(sqlite_url: str) -> Iterator[ShardedSession]:
    engine = sa.create_engine(sqlite_url)
    try:
        with ShardedSession(engine) as session:
            yield session
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        pytest.param({"model": SHOP.orders.classes[1]}, "logical model", id="physical-class"),
        pytest.param({"model": TwinOrder}, "sharded model", id="unsharded-class"),
        pytest.param({"rows": {"user_id": 1}}, "list", id="one-dict"),
        pytest.param({"batch_size": 0}, "batch_size", id="batch-size-0"),
        pytest.param({"batch_size": True}, "batch_size", id="batch-size-bool"),
        pytest.param({"progress": "bar"}, "progress", id="progress-str"),
    ],
)
def test_bad_arguments_raise_before_any_work(
    arguments: dict[str, Any], message: str, sqlite_session: ShardedSession
) -> None:
    """A wrong model, rows, batch_size or progress raises InvalidBulkArgument naming it."""
    call: dict[str, Any] = {"model": SHOP.Order, "rows": [], **arguments}
    with pytest.raises(InvalidBulkArgument, match=message):
        bulk_insert(sqlite_session, call.pop("model"), call.pop("rows"), **call)
