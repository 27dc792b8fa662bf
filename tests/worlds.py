"""Sharded worlds for the tests: the usual models on fresh databases, and the SQL they get.

A *shop* (:func:`declare_shop`) is a fresh declarative base holding the models most
sharding tests need:

* ``User``: unsharded (table ``users``); ``User.orders`` reads a user's orders;
* ``Order``: sharded by gene on ``(id, user_id)`` by default, so an order's ID carries the
  gene of its user and either key finds its table (``orders_00`` ..);
* ``Item``: bound to ``Order``: the same count, keys, strategy and databases, so an order
  and its items have the same shard number and join table by table (``items_00`` ..).

A *twin shop* (:func:`declare_twin_shop`) holds the same orders and items twice: sharded,
and as plain one-table *twins*, next to an unsharded ``notes`` table (in the bind only)
and a ``statuses`` table, a reference table (:class:`~snowshard.sharding.Reference`) on the
sharded side and a plain twin on the other. :func:`fill_twin_shop` writes the same rows to
both sides, so a statement built for each side (:class:`Models`) must give the same
answer: the differential and support-table tests compare them.

A *world* (:func:`open_world`, or the ``sharded_world`` fixture of ``tests/conftest.py``)
is a declarative base on real, brand-new databases of one backend: one database per
database key its sharded tables name, every table created, and every engine watched by a
:class:`SqlLog`. Unsharded tables live with the session's ``bind``: the ``default``
database, or the first one named when no sharded table is in ``default`` (unless
``bind_apart=True`` gives them a database of their own).

A :class:`SqlLog` (the ``sql_log`` fixture) records each statement an engine sends to
its database, with the tables the statement names, read from the statement SQLAlchemy
compiled rather than from the SQL text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import BigInteger, Integer, String, event, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    declared_attr,
    foreign,
    mapped_column,
    relationship,
)
from sqlalchemy.sql.elements import ColumnClause
from sqlalchemy.sql.visitors import iterate

from snowshard import Layout, Snowflake
from snowshard.clock import ManualClock
from snowshard.orm import snowflake_pk
from snowshard.sharding import (
    Reference,
    Sharded,
    ShardedModel,
    ShardedSession,
    Shards,
    create_all,
    sharded_model,
    tables_by_database,
)
from snowshard.sharding.generations import Generation
from snowshard.sharding.model import MODEL_INFO
from snowshard.spec import DEFAULT_DATABASE, ShardInfo
from tests.backends import DatabaseFactory

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "IDS",
    "LAYOUT",
    "NULL_KEY_GENES",
    "REFERENCE_STATUSES",
    "SHARD_INFO",
    "binary_string",
    "logical_tables",
    "named_tables",
    "STATUSES",
    "TWIN_SWITCH",
    "TWIN_USERS",
    "TwoEras",
    "Models",
    "Sent",
    "Shop",
    "SqlLog",
    "TwinShop",
    "World",
    "WorldFactory",
    "declare_shop",
    "declare_twin_shop",
    "distinct_on",
    "fill_twin_shop",
    "open_world",
    "split_databases",
    "twin_generations",
]

LAYOUT = Layout(worker_bits=6, gene_bits=4)
"""The layout of the tests' IDs: 4 gene bits, so ``Gene(n)`` routes up to 16 tables."""

IDS = Snowflake(LAYOUT, worker=3)
"""One generator for every shop: its IDs never repeat within the test process."""

def distinct_on(statement: Any, *values: Any) -> Any:
    """``statement`` with PostgreSQL's DISTINCT ON ``values``, as this SQLAlchemy spells it
    (2.1: the ``postgresql.distinct_on`` syntax extension; 2.0: ``select.distinct(*values)``)."""
    try:
        from sqlalchemy.dialects.postgresql import distinct_on as extension
    except ImportError:  # SQLAlchemy 2.0
        return statement.distinct(*values)
    return statement.ext(extension(*values))


def binary_string(length: int) -> Any:
    """``String(length)`` compared by code point on every backend (SQLite's default
    ``BINARY``, PostgreSQL's ``C``, MariaDB's ``utf8mb4_nopad_bin``), so merges across
    shards may order and group it (:mod:`snowshard.sharding.collation`)."""
    return (
        String(length)
        .with_variant(String(length, collation="C"), "postgresql")
        .with_variant(String(length, collation="utf8mb4_nopad_bin"), "mysql", "mariadb")
    )


SHARD_INFO = "snowshard"
"""``Table.info`` key of a physical table of a sharded model: its ``ShardInfo``."""


# --------------------------------------------------------------------------- SQL log


@dataclass(frozen=True)
class Sent:
    """One statement as an engine sent it to its database."""

    database: str
    statement: str
    params: Any
    tables: AbstractSet[str]
    """Every table the statement names (a frozenset)."""
    shards: AbstractSet[str]
    """The physical tables of sharded models among :attr:`tables`."""

    @property
    def verb(self) -> str:
        """The statement's first word, upper-cased: SELECT, INSERT, UPDATE, DELETE..."""
        return self.statement.lstrip().split(None, 1)[0].upper()


def named_tables(context: Any) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(every table, the physical tables of sharded models, the logical tables of sharded
    models) of the statement an execution context compiled, in one walk of it.

    The ORM compiles the statement its compile state built (with eager-load joins and
    the like), so that one is read when there is one; DDL names the table it creates,
    alters or drops. Logical tables (which no database holds: a sharded session must
    never send one, as an old unsharded table of that name would be read silently) count
    through columns too. Statements sent as plain SQL text name no table here.
    """
    compiled = getattr(context, "compiled", None)
    if compiled is None:
        return frozenset(), frozenset(), frozenset()
    state = getattr(compiled, "compile_state", None)
    statement = state.statement if state is not None else compiled.statement
    target = getattr(statement, "element", None)  # of DDL: a table, or an index of one
    tables: set[sa.Table] = set()
    through_columns: set[sa.Table] = set()
    for element in [getattr(target, "table", target), *iterate(statement)]:
        if isinstance(element, sa.Table):
            tables.add(element)
        elif isinstance(element, ColumnClause) and isinstance(element.table, sa.Table):
            through_columns.add(element.table)
    return (
        frozenset(t.name for t in tables),
        frozenset(t.name for t in tables if isinstance(t.info.get(SHARD_INFO), ShardInfo)),
        frozenset(t.name for t in tables | through_columns if MODEL_INFO in t.info),
    )


def logical_tables(context: Any) -> frozenset[str]:
    """The logical tables of sharded models that the statement an execution context
    compiled names (:func:`named_tables`)."""
    return named_tables(context)[2]


class SqlLog:
    """The statements sent by the engines it watches, in order, with database and tables."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self.logical: list[str] = []
        """Statements that named a logical table (:func:`logical_tables`), never cleared."""
        self._listeners: list[tuple[Engine, Callable[..., None]]] = []

    def watch(self, engine: Engine | AsyncEngine, database: str = DEFAULT_DATABASE) -> None:
        """Record what ``engine`` (sync or asyncio) sends, as sent to ``database``."""
        target = engine if isinstance(engine, Engine) else engine.sync_engine

        def record(
            conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
        ) -> None:
            tables, shards, logical = named_tables(context)
            self.sent.append(Sent(database, statement, params, tables, shards))
            if logical:
                self.logical.append(f"{sorted(logical)}: {' '.join(statement.split())[:200]}")

        event.listen(target, "before_cursor_execute", record)
        self._listeners.append((target, record))

    def close(self) -> None:
        """Stop watching every engine."""
        while self._listeners:
            target, record = self._listeners.pop()
            event.remove(target, "before_cursor_execute", record)

    def clear(self) -> None:
        """Forget what was recorded so far."""
        self.sent.clear()

    def __len__(self) -> int:
        return len(self.sent)

    def __iter__(self) -> Iterator[Sent]:
        return iter(self.sent)

    def statements(self, database: str | None = None) -> list[str]:
        """The SQL text of each statement (sent to ``database``, if given)."""
        return [s.statement for s in self.sent if database is None or s.database == database]

    def tables(self) -> list[AbstractSet[str]]:
        """The physical tables of sharded models each statement named, in order."""
        return [s.shards for s in self.sent]

    def touched(self) -> set[str]:
        """Every physical table of a sharded model named by any statement."""
        return {name for s in self.sent for name in s.shards}

    def databases(self) -> set[str]:
        """The databases statements were sent to."""
        return {s.database for s in self.sent}


# --------------------------------------------------------------------------- shop


def split_databases(count: int, databases: int) -> dict[str, list[int]]:
    """``count`` tables in ``databases`` contiguous runs named a, b, c...; {} for one."""
    if not 1 <= databases <= min(count, 26):
        raise ValueError(f"databases must be 1..{min(count, 26)} for {count} tables")
    if databases == 1:
        return {}
    bounds = [count * i // databases for i in range(databases + 1)]
    return {chr(ord("a") + i): list(range(bounds[i], bounds[i + 1])) for i in range(databases)}


@dataclass(frozen=True)
class Shop:
    """The usual models on one fresh declarative base (module docstring)."""

    base: type[DeclarativeBase]
    User: Any
    Order: Any
    Item: Any

    @property
    def metadata(self) -> sa.MetaData:
        return self.base.metadata

    @property
    def orders(self) -> ShardedModel:
        """What snowshard knows of ``Order``: its strategy, tables, databases."""
        return sharded_model(self.Order)


def declare_shop(
    count: int = 4,
    *,
    key: str | tuple[str, ...] = ("id", "user_id"),
    strategy: Any = None,
    databases: int | Mapping[str, Sequence[int]] = 1,
    fan_out: bool = True,
    ids: Snowflake = IDS,
) -> Shop:
    """A fresh base with ``User``, ``Order`` and ``Item`` (module docstring).

    ``count``, ``key``, ``strategy`` and ``fan_out`` are those of ``Shards``; ``databases``
    is its mapping, or a number of databases to split the tables over (see
    :func:`split_databases`). IDs come from ``ids``, with the gene of ``user_id``.
    """
    spread = split_databases(count, databases) if isinstance(databases, int) else databases

    def shards() -> Shards:
        return Shards(count, key=key, strategy=strategy, databases=spread, fan_out=fan_out)

    class Base(DeclarativeBase):
        pass

    class User(Base):
        __tablename__ = "users"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        name: Mapped[str] = mapped_column(String(40), default="")
        orders: Mapped[list[Any]] = relationship(
            "Order",
            primaryjoin="User.id == foreign(Order.user_id)",
            viewonly=True,
            order_by="Order.id",
        )

    class Order(Sharded, Base):
        __tablename__ = "orders"
        __shards__ = shards()
        id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger, index=True)
        amount: Mapped[int] = mapped_column(Integer, default=0)
        # compared by code point on every backend, so merges may order and group it
        note: Mapped[str | None] = mapped_column(binary_string(20))

    class Item(Sharded, Base):
        __tablename__ = "items"
        __shards__ = shards()
        id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger)
        order_id: Mapped[int] = mapped_column(BigInteger)
        qty: Mapped[int] = mapped_column(Integer, default=1)

    Base.registry.configure()
    return Shop(Base, User, Order, Item)


# --------------------------------------------------------------------------- twin shop

TWIN_USERS = (3, 4, 7, 8, 12, 17, 21, 30)
"""The users of a twin shop's orders (order ``i`` belongs to ``TWIN_USERS[i % 8]``)."""

STATUSES = ("new", "paid", "sent", None)
"""The statuses of a twin shop's orders (order ``i`` has ``STATUSES[i % 4]``)."""

REFERENCE_STATUSES = (
    {"code": "new", "grp": "open", "rank": 2},
    {"code": "paid", "grp": "done", "rank": None},
    {"code": "lost", "grp": "open", "rank": 1},
)
"""The rows of ``statuses``: no row for ``sent`` (or NULL), and ``lost``, which no order has."""


@dataclass(frozen=True)
class Models:
    """One side of a twin shop: what a statement is built from (the same names on each side)."""

    Order: Any
    """``orders``: id, user_id, amount (NULL in some rows), status (NULL in some rows); the
    relationships ``items`` (on the shard key and ``order_id``) and ``status_row``."""
    Item: Any
    """``items``: id, user_id, order_id, qty; one or two per order."""
    Note: Any
    """``notes``: id (a user id), label; unsharded, plain on both sides."""
    Status: Any
    """``statuses``: code (key), grp, rank (NULL in one row); a reference table when sharded."""


@dataclass(frozen=True)
class TwinShop:
    """Sharded models and their unsharded twins on one declarative base (module docstring)."""

    base: type[DeclarativeBase]
    sharded: Models
    twin: Models
    ids: Any = IDS
    """The issuer of the sharded models' IDs."""
    nullable_keys: bool = False
    """Whether ``user_id`` may be NULL (and :func:`fill_twin_shop` writes rows where it is)."""

    @property
    def metadata(self) -> sa.MetaData:
        return self.base.metadata


def _items_of(order: Any, item: Any) -> Any:
    """The ON clause of ``Order.items``: an order's items, tied by the shard key too."""
    return sa.and_(foreign(item.user_id) == order.user_id, foreign(item.order_id) == order.id)


def declare_twin_shop(
    count: int = 4,
    *,
    databases: int | Mapping[str, Sequence[int]] = 1,
    ids: Any = IDS,
    nullable_keys: bool = False,
    generations: Sequence[Generation] = (),
) -> TwinShop:
    """A fresh base with sharded ``orders``/``items`` (alike, on ``(id, user_id)``), their
    plain twins, ``notes``, and ``statuses`` as a reference table and as a plain twin.

    ``databases`` is as for :func:`declare_shop`. ``nullable_keys``: ``user_id`` may be
    NULL on both sides. ``generations``: the layouts of ``orders`` and ``items`` after
    their first (give an ``ids`` issuing IDs on both sides of each switch, such as
    :class:`TwoEras`).
    """
    spread = split_databases(count, databases) if isinstance(databases, int) else databases

    class Base(DeclarativeBase):
        pass

    def shards() -> Shards:
        return Shards(count, key=("id", "user_id"), databases=spread, generations=list(generations))

    class Order(Sharded, Base):
        __tablename__ = "orders"
        __shards__ = shards()
        id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger, nullable=nullable_keys)
        amount: Mapped[int | None] = mapped_column(Integer)
        status: Mapped[str | None] = mapped_column(binary_string(8))

        @declared_attr
        def items(cls) -> Mapped[list[Item]]:
            return relationship("Item", primaryjoin=lambda: _items_of(cls, Item), viewonly=True)

        @declared_attr
        def status_row(cls) -> Mapped[Status | None]:
            on = lambda: foreign(cls.status) == Status.code  # noqa: E731
            return relationship("Status", primaryjoin=on, viewonly=True)

    class Item(Sharded, Base):
        __tablename__ = "items"
        __shards__ = shards()
        id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger, nullable=nullable_keys)
        order_id: Mapped[int] = mapped_column(BigInteger)
        qty: Mapped[int] = mapped_column(Integer)

    class Status(Reference, Base):
        __tablename__ = "statuses"
        code: Mapped[str] = mapped_column(binary_string(8), primary_key=True)
        grp: Mapped[str] = mapped_column(binary_string(8))
        rank: Mapped[int | None] = mapped_column(Integer)

    class OrderTwin(Base):
        __tablename__ = "orders_twin"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        user_id: Mapped[int] = mapped_column(BigInteger, nullable=nullable_keys)
        amount: Mapped[int | None] = mapped_column(Integer)
        status: Mapped[str | None] = mapped_column(binary_string(8))
        items: Mapped[list[ItemTwin]] = relationship(
            "ItemTwin", primaryjoin=lambda: _items_of(OrderTwin, ItemTwin), viewonly=True
        )
        status_row: Mapped[StatusTwin | None] = relationship(
            "StatusTwin",
            primaryjoin=lambda: foreign(OrderTwin.status) == StatusTwin.code,
            viewonly=True,
        )

    class ItemTwin(Base):
        __tablename__ = "items_twin"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        user_id: Mapped[int] = mapped_column(BigInteger, nullable=nullable_keys)
        order_id: Mapped[int] = mapped_column(BigInteger)
        qty: Mapped[int] = mapped_column(Integer)

    class StatusTwin(Base):
        __tablename__ = "statuses_twin"
        code: Mapped[str] = mapped_column(binary_string(8), primary_key=True)
        grp: Mapped[str] = mapped_column(binary_string(8))
        rank: Mapped[int | None] = mapped_column(Integer)

    class Note(Base):
        __tablename__ = "notes"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        label: Mapped[str] = mapped_column(binary_string(8))

    Base.registry.configure()
    return TwinShop(
        Base,
        Models(Order, Item, Note, Status),
        Models(OrderTwin, ItemTwin, Note, StatusTwin),
        ids,
        nullable_keys,
    )


def fill_twin_shop(session: ShardedSession, shop: TwinShop) -> None:
    """The same rows on both sides, committed: 40 orders, 60 items, 4 notes, 3 statuses;
    with nullable keys, 5 orders and 3 items more whose ``user_id`` is NULL
    (:data:`NULL_KEY_GENES`)."""
    s, t = shop.sharded, shop.twin
    orders = [
        s.Order(
            user_id=TWIN_USERS[i % len(TWIN_USERS)],
            amount=None if i % 9 == 4 else (i * 7) % 13,
            status=STATUSES[i % len(STATUSES)],
        )
        for i in range(40)
    ]
    session.add_all(orders)
    session.flush()
    items = [
        s.Item(user_id=o.user_id, order_id=o.id, qty=(n + k) % 5 + 1)
        for n, o in enumerate(orders)
        for k in range(1 + n % 2)
    ]
    session.add_all(items)
    session.add_all(s.Status(**row) for row in REFERENCE_STATUSES)
    session.flush()
    columns = ("id", "user_id", "amount", "status")
    session.execute(insert(t.Order), [{c: getattr(o, c) for c in columns} for o in orders])
    columns = ("id", "user_id", "order_id", "qty")
    session.execute(insert(t.Item), [{c: getattr(i, c) for c in columns} for i in items])
    if shop.nullable_keys:
        _add_null_keys(session, shop, [o.id for o in orders])
    session.execute(insert(t.Status), list(REFERENCE_STATUSES))
    session.execute(insert(s.Note), [{"id": u, "label": f"u{u}"} for u in TWIN_USERS[::2]])
    session.commit()


TWIN_SWITCH = datetime(2027, 1, 1, tzinfo=timezone.utc)
"""When the second layout of a twin shop with generations (:func:`twin_generations`) starts."""


class TwoEras:
    """An ID issuer (:data:`LAYOUT`) whose IDs fall ``earlier`` before :data:`TWIN_SWITCH` and
    one second after it, ``run`` at a time alternately (the earlier era first, or the later
    one with ``later_first``), each era on its own manual clock and worker (``workers``).

    The defaults give a twin shop with generations each user's rows in both eras (its order
    ``i`` belongs to user ``i % 8``).
    """

    def __init__(
        self,
        *,
        run: int = 3,
        workers: tuple[int, int] = (4, 5),
        earlier: timedelta = timedelta(days=30),
        later_first: bool = False,
    ) -> None:
        switch_ms = int(TWIN_SWITCH.timestamp() * 1000)
        before_ms = switch_ms - int(earlier.total_seconds() * 1000)
        self._clocks = [ManualClock(before_ms), ManualClock(switch_ms + 1000)]
        self._eras = [
            Snowflake(LAYOUT, worker=worker, clock=clock, sleep=clock.sleep)
            for worker, clock in zip(workers, self._clocks)
        ]
        self._run = run
        self._issued = run if later_first else 0

    @property
    def layout(self) -> Layout:
        return LAYOUT

    def next_id(self, gene: object = None) -> int:
        era = self._issued // self._run % 2
        self._issued += 1
        self._clocks[era].advance(1)
        return self._eras[era].next_id(gene)


def twin_generations(databases: int) -> list[Generation]:
    """A second layout for a twin shop of 4 tables: 8 tables from :data:`TWIN_SWITCH`, spread
    over ``databases`` as the first layout's are."""
    return [Generation(TWIN_SWITCH, 8, databases=split_databases(8, databases))]


NULL_KEY_GENES = (0, 1, 3, 3, 2)
"""The genes of the IDs of a nullable-key twin shop's orders whose ``user_id`` is NULL
(such a row is stored by its ID: one in each of tables 0-2 and two in table 3 of four)."""


def _add_null_keys(session: ShardedSession, shop: TwinShop, order_ids: list[int]) -> None:
    """Orders and items whose ``user_id`` is NULL, on both sides (:func:`fill_twin_shop`)."""
    orders = [
        {"id": shop.ids.next_id(gene=g), "user_id": None, "amount": a, "status": c}
        for g, a, c in zip(
            NULL_KEY_GENES, (3, None, 5, 12, 5), ("new", "paid", None, "sent", "new")
        )
    ]
    items = [
        {"id": shop.ids.next_id(gene=g), "user_id": None, "order_id": o, "qty": q}
        for g, o, q in ((3, orders[0]["id"], 4), (0, orders[3]["id"], 5), (1, order_ids[2], 4))
    ]
    for side in (shop.sharded, shop.twin):
        session.execute(insert(side.Order), orders)
        session.execute(insert(side.Item), items)


# --------------------------------------------------------------------------- world


@dataclass
class World:
    """A declarative base on brand-new databases of one backend (module docstring)."""

    backend: str
    base: type[DeclarativeBase]
    engines: dict[str, Engine]
    """Database key -> engine; ``default`` (when there is one) also holds unsharded tables."""
    log: SqlLog = field(default_factory=SqlLog)
    shop: Shop | None = None

    @property
    def bind(self) -> Engine:
        """The engine of unsharded tables: ``default``'s, else the first database's."""
        if DEFAULT_DATABASE in self.engines:
            return self.engines[DEFAULT_DATABASE]
        return next(iter(self.engines.values()))

    @property
    def databases(self) -> dict[str, Engine]:
        """The ``databases=`` of a :class:`ShardedSession` (every named database)."""
        return {k: e for k, e in self.engines.items() if k != DEFAULT_DATABASE}

    @property
    def User(self) -> Any:
        return self._shop.User

    @property
    def Order(self) -> Any:
        return self._shop.Order

    @property
    def Item(self) -> Any:
        return self._shop.Item

    @property
    def _shop(self) -> Shop:
        if self.shop is None:
            raise AttributeError("this world was opened on a base, not on a shop")
        return self.shop

    def session(self, **kw: Any) -> ShardedSession:
        """A new :class:`ShardedSession` over every database (``kw`` as for Session)."""
        return ShardedSession(self.bind, databases=self.databases, **kw)

    def rows_by_table(self, model: Any) -> dict[str, set[int]]:
        """Primary keys in each physical table of ``model``, read with Core from its database."""
        found: dict[str, set[int]] = {}
        sharded = sharded_model(model)
        for shard, table in enumerate(sharded.tables):
            engine = self.engines.get(sharded.database_of(shard), self.bind)
            with engine.connect() as conn:
                found[table.name] = set(conn.execute(sa.select(*table.primary_key)).scalars())
        return found


def _database_keys(metadata: sa.MetaData, bind_apart: bool = False) -> list[str]:
    """The databases a metadata's tables need, the one of unsharded tables first.

    Unsharded tables live with the ``bind``: the ``default`` database when some sharded
    table is in it (or no table names a database, or ``bind_apart``), else the first
    database named.
    """
    grouped = tables_by_database(metadata)
    keys = [k for k in grouped if k is not None and k != DEFAULT_DATABASE]
    if DEFAULT_DATABASE in grouped or not keys or bind_apart:
        keys.insert(0, DEFAULT_DATABASE)
    return keys


def open_world(
    factory: DatabaseFactory,
    models: Shop | type[DeclarativeBase],
    backend: str = "sqlite",
    *,
    log: SqlLog | None = None,
    bind_apart: bool = False,
    pg_locale: str | Sequence[str] | None = None,
) -> World:
    """Create the databases and tables of ``models`` on ``backend``; ``factory`` drops them.

    ``models`` is a :class:`Shop` or a declarative base. The log is cleared once the
    tables exist, so it starts with the test's own statements. ``bind_apart``: unsharded
    tables get a ``default`` database of their own, even when every sharded table names
    another one. ``pg_locale``: the PostgreSQL databases' default collation
    (:func:`~tests.backends.icu_locale`, :func:`~tests.backends.libc_locale`; one for all,
    or a list the databases take in turn).
    """
    shop = models if isinstance(models, Shop) else None
    base = models.base if isinstance(models, Shop) else models
    keys = _database_keys(base.metadata, bind_apart)
    urls = factory(backend, len(keys), pg_locale=pg_locale)
    world = World(backend, base, {}, log if log is not None else SqlLog(), shop)
    for key, url in zip(keys, urls):
        engine = factory.engine(url)
        world.engines[key] = engine
        world.log.watch(engine, key)
    create_all(base.metadata, bind=world.bind, databases=world.databases)
    world.log.clear()
    return world


class WorldFactory:
    """``sharded_world(models, backend="sqlite") -> World`` (the conftest fixture)."""

    def __init__(self, factory: DatabaseFactory, log: SqlLog) -> None:
        self._factory = factory
        self._log = log

    def __call__(
        self, models: Shop | type[DeclarativeBase], backend: str = "sqlite"
    ) -> World:
        return open_world(self._factory, models, backend, log=self._log)


# --------------------------------------------------------------------------- plain twin


class PlainBase(DeclarativeBase):
    """The declarative base of :class:`PlainOrder`."""


class PlainOrder(PlainBase):
    """An unsharded twin of :func:`declare_shop`'s ``Order``: the same rows in one plain
    table (:func:`copy_orders_to_plain`)."""

    __tablename__ = "plain_orders"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(BigInteger)
    amount: Mapped[int] = mapped_column(Integer)
    note: Mapped[str | None] = mapped_column(String(20))


def copy_orders_to_plain(world: World) -> None:
    """Create :class:`PlainOrder` in the world's unsharded database and copy every order of
    its shop into it."""
    Order = world.Order
    with world.session() as session:
        rows = [
            r._asdict()
            for r in session.execute(select(Order.id, Order.user_id, Order.amount, Order.note))
        ]
    PlainBase.metadata.create_all(world.bind)
    with world.bind.begin() as conn:
        conn.execute(sa.insert(PlainOrder), rows)
