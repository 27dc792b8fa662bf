"""Declaring sharded models: physical tables and classes, validation, construction."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest
import sqlalchemy as sa
from sqlalchemy import BigInteger, ForeignKey, Index, String
from sqlalchemy.ext.hybrid import hybrid_property
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    column_property,
    declared_attr,
    mapped_column,
    query_expression,
)
from sqlalchemy.orm.exc import StaleDataError

from snowshard.orm import snowflake_pk
from snowshard.sharding import (
    Generation,
    InvalidShardKey,
    MissingShardKey,
    ShardConfigError,
    Sharded,
    ShardedSession,
    ShardInfo,
    ShardKeyConflict,
    ShardKeyTypeError,
    Shards,
    UnknownShard,
    create_all,
    sharded_model,
)
from snowshard.strategies import Gene, Mix, Mod, StrategyError
from tests.worlds import IDS, WorldFactory


def declare(
    shards: Shards, *, extra: Optional[dict[str, Any]] = None
) -> tuple[type[DeclarativeBase], Any]:
    """A fresh Base with User and a sharded Order declared with ``shards``."""

    class Base(DeclarativeBase):
        pass

    class User(Base):
        __tablename__ = "users"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True)

    namespace: dict[str, Any] = {
        "__tablename__": "orders",
        "__shards__": shards,
        "__annotations__": {
            "id": Mapped[int],
            "user_id": Mapped[int],
            "note": Mapped[Optional[str]],
            **({"memo": Mapped[Optional[str]]} if "memo" in (extra or {}) else {}),
        },
        "id": snowflake_pk(IDS, gene_from="user_id"),
        "user_id": mapped_column(BigInteger, ForeignKey("users.id"), index=True),
        "note": mapped_column(String(20)),
        **(extra or {}),
    }
    order = type("Order", (Sharded, Base), namespace)
    return Base, order


def test_physical_tables_are_in_the_metadata_with_their_shard_info() -> None:
    """Base.metadata holds orders_00..orders_15, each tagged ShardInfo(spec, index)."""
    base, order = declare(Shards(16, key=("id", "user_id")))
    names = [f"orders_{i:02d}" for i in range(16)]
    assert sorted(base.metadata.tables) == sorted(names + ["users"])
    for index, name in enumerate(names):
        info = base.metadata.tables[name].info["snowshard"]
        assert info == ShardInfo(sharded_model(order).spec, index)
        assert info.spec.table_name(index) == name


def test_logical_table_is_not_created() -> None:
    """The logical table 'orders' is mapped but kept out of MetaData.tables."""
    base, order = declare(Shards(4, key="user_id"))
    assert order.__table__.name == "orders"
    assert "orders" not in base.metadata.tables


def test_physical_classes_subclass_the_logical_model() -> None:
    """Order_00..Order_03 are Order subclasses mapped to their own tables."""
    _, order = declare(Shards(4, key="user_id"))
    model = sharded_model(order)
    assert [c.__name__ for c in model.classes] == ["Order_00", "Order_01", "Order_02", "Order_03"]
    assert all(issubclass(c, order) for c in model.classes)
    assert [c.__table__.name for c in model.classes] == model.spec.table_names
    assert sharded_model(model.classes[2]) is model


def test_named_indexes_get_the_physical_table_name() -> None:
    """An explicitly named index is renamed per table, so names stay unique per database."""
    extra = {"__table_args__": (Index("ix_orders_note", "note"),)}
    base, _ = declare(Shards(2, key="user_id"), extra=extra)
    names = {i.name for t in base.metadata.tables.values() for i in t.indexes}
    assert {"ix_orders_00_note", "ix_orders_01_note"} <= names
    assert "ix_orders_note" not in names


def test_foreign_keys_to_unsharded_tables_are_created(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """Physical tables keep foreign keys to unsharded tables; create_all succeeds."""
    base, _ = declare(Shards(2, key="user_id"))
    world = sharded_world(base, sql_backend)
    with world.bind.connect() as conn:
        fks = sa.inspect(conn).get_foreign_keys("orders_01")
    assert [(fk["constrained_columns"], fk["referred_table"]) for fk in fks] == [
        (["user_id"], "users")
    ]


@pytest.mark.parametrize(
    ("count", "expected"), [(16, Gene(16)), (10, Mod(10))], ids=["power-of-two", "other"]
)
def test_default_strategy(count: int, expected: Any) -> None:
    """Without a strategy: Gene(n) for a power of two, Mod(n) otherwise."""
    _, order = declare(Shards(count, key="user_id"))
    assert sharded_model(order).strategy == expected


@pytest.mark.parametrize(
    ("shards", "message"),
    [
        (Shards(16, key="user_id", strategy=Gene(8)), "has 8 shards, but __shards__ declares 16"),
        (Shards(4, key="customer_id"), "'customer_id' is not a column"),
        (Shards(16, key=("id", "user_id"), strategy=Mix(16)), "does not send user_id"),
        (Shards(32, key=("id", "user_id")), "does not send user_id"),
        (Shards(4, key=("note", "user_id")), "must name the same shard"),
        (Shards(4, key="user_id", pattern="orders"), "duplicate table names"),
        (Shards(4, key="user_id", databases={"a": [0, 1]}), r"tables \[2, 3\] are in no database"),
    ],
    ids=[
        "count",
        "unknown-key",
        "mix-two-keys",
        "too-many-for-gene",
        "unrelated-keys",
        "pattern",
        "databases",
    ],
)
def test_bad_declarations_raise_shard_config_error(shards: Shards, message: str) -> None:
    """Each inconsistent declaration raises ShardConfigError naming what to fix."""
    with pytest.raises(ShardConfigError, match=message):
        declare(shards)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"strategy": object()}, StrategyError, "must be a shard strategy"),
        ({"key": ()}, ShardConfigError, r"must name a column attribute .* got \(\)"),
        ({"key": None}, ShardConfigError, "got None"),
        ({"fan_out": "no"}, ShardConfigError, "True or False, got 'no'"),
    ],
    ids=["no-shard_of", "no-key", "key-none", "fan_out-str"],
)
def test_bad_shards_arguments_are_refused_when_built(
    arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    """Shards(...) checks its own arguments at once, before any model uses it."""
    with pytest.raises(error, match=message):
        Shards(**{"count": 4, "key": "user_id", **arguments})


@pytest.mark.parametrize(
    "prop",
    [
        declared_attr(lambda cls: column_property(cls.note + "!")),
        query_expression(),
    ],
    ids=["column_property", "query_expression"],
)
def test_sql_expression_properties_are_refused(prop: Any) -> None:
    """A column_property() or query_expression() would name the logical table in SQL (or
    read an old unsharded table of that name): refused at class creation, naming the
    attribute and the hybrid_property way out."""
    with pytest.raises(ShardConfigError, match="Order.extra: .*hybrid_property"):
        declare(Shards(4, key="user_id"), extra={"extra": prop})


def test_deferred_columns_and_hybrids_are_accepted() -> None:
    """Deferred columns are columns of the table, hybrids are Python: both are declared."""
    note = hybrid_property(lambda self: self.note)
    _, order = declare(
        Shards(4, key="user_id"),
        extra={"memo": mapped_column(String(20), deferred=True), "shown": note},
    )
    assert "memo" in sa.inspect(order).column_attrs and "shown" in sa.inspect(order).all_orm_descriptors


def test_missing_declaration_is_an_error() -> None:
    """A Sharded subclass without __shards__ is refused at class creation."""

    class Base(DeclarativeBase):
        pass

    with pytest.raises(ShardConfigError, match="has no __shards__"):
        type(
            "Order",
            (Sharded, Base),
            {
                "__tablename__": "orders",
                "id": mapped_column(BigInteger, primary_key=True),
                "__annotations__": {"id": Mapped[int]},
            },
        )


def test_constructor_returns_the_physical_class_of_the_key() -> None:
    """Order(user_id=1820) is an Order_12 under Gene(16), as 1820 % 16 == 12."""
    _, order = declare(Shards(16, key=("id", "user_id")))
    row = order(user_id=1820)
    assert type(row).__name__ == "Order_12" and isinstance(row, order)


def test_constructor_accepts_an_id_of_the_same_shard() -> None:
    """Both keys given and agreeing: the row goes to their common shard."""
    _, order = declare(Shards(16, key=("id", "user_id")))
    row = order(id=IDS.next_id(gene=7), user_id=7)
    assert type(row).__name__ == "Order_07"


def test_model_keyed_by_its_id_issues_the_id_at_construction() -> None:
    """With key='id', Order(...) gets its snowflake ID at once and the class of its shard."""
    _, order = declare(Shards(16, key="id", strategy=Mix(16)))
    row = order(user_id=5)
    assert row.id is not None
    assert type(row) is sharded_model(order).classes[Mix(16).shard_of(row.id)]
    assert row.id % 16 == 5


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({}, MissingShardKey, "no shard key"),
        ({"note": "x"}, MissingShardKey, "no shard key"),
        ({"user_id": 1.5}, ShardKeyTypeError, "must be an int"),
        ({"user_id": True}, ShardKeyTypeError, "must be an int"),
        ({"user_id": -3}, InvalidShardKey, ">= 0"),
        ({"user_id": "12a"}, InvalidShardKey, "not a decimal integer"),
        ({"user_id": 3, "id": IDS.next_id(gene=4)}, ShardKeyConflict, "the keys must agree"),
    ],
    ids=["nothing", "no-key", "float", "bool", "negative", "not-decimal", "conflict"],
)
def test_bad_keys_at_construction(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    """A missing, mistyped or contradictory shard key is refused by the constructor."""
    _, order = declare(Shards(16, key=("id", "user_id")))
    with pytest.raises(error, match=message):
        order(**kwargs)


def test_positional_constructor_arguments_are_refused() -> None:
    """Order(...) takes keywords only, so the key can be seen."""
    _, order = declare(Shards(4, key="user_id"))
    with pytest.raises(MissingShardKey, match="keyword arguments only"):
        order(1)


def test_strategy_returning_an_unknown_shard_is_caught() -> None:
    """A custom strategy answering outside 0..count-1 raises UnknownShard."""

    class Broken:
        count = 4

        def shard_of(self, value: object) -> int:
            return 9

    _, order = declare(Shards(4, key="user_id", strategy=Broken()))
    with pytest.raises(UnknownShard, match=r"returned 9.*0\.\.3"):
        order(user_id=1)


def test_shard_index_outside_the_tables_is_unknown() -> None:
    """Asking for the database of shard 7 of a 4-table model raises UnknownShard."""
    _, order = declare(Shards(4, key="user_id"))
    with pytest.raises(UnknownShard, match="shards 0..3, not 7"):
        sharded_model(order).database_of(7)


def test_a_versioned_model_counts_each_rows_version_and_refuses_stale_updates(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """version_id_col: each table versions its rows; a stale write raises StaleDataError."""

    class Base(DeclarativeBase):
        pass

    class Versioned(Sharded, Base):
        __tablename__ = "versioned"
        __shards__ = Shards(4, key=("id", "user_id"))
        id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger)
        note: Mapped[Optional[str]] = mapped_column(String(20))
        version: Mapped[int] = mapped_column(sa.Integer, nullable=False)
        __mapper_args__ = {"version_id_col": version}

    world = sharded_world(Base, sql_backend)
    with world.session() as session:
        rows = [Versioned(user_id=u, note="a") for u in range(4)]
        session.add_all(rows)
        session.commit()
        assert [r.version for r in rows] == [1, 1, 1, 1]
        for row in rows:
            row.note = "b"
        session.commit()
        assert [r.version for r in rows] == [2, 2, 2, 2]
        ids = [r.id for r in rows]
    with world.session() as first, world.session() as second:
        mine, theirs = first.get(Versioned, ids[3]), second.get(Versioned, ids[3])
        mine.note = "c"
        first.commit()
        theirs.note = "d"
        with pytest.raises(StaleDataError, match="versioned_03"):
            second.commit()
    with world.session() as session:
        stored = session.get(Versioned, ids[3])
        assert (stored.note, stored.version) == ("c", 3)


def _with_unique(shards: Shards, args: tuple[Any, ...] = (), **email: Any) -> Any:
    """A fresh sharded ``Account`` (id, org, email) with ``args`` as its __table_args__."""

    class Base(DeclarativeBase):
        pass

    namespace: dict[str, Any] = {
        "__tablename__": "accounts",
        "__shards__": shards,
        "__table_args__": args,
        "__annotations__": {"id": Mapped[int], "org": Mapped[int], "email": Mapped[str]},
        "id": snowflake_pk(IDS, gene_from=email.pop("gene_from", "org")),
        "org": mapped_column(BigInteger),
        "email": mapped_column(String(80), **email),
    }
    return type("Account", (Sharded, Base), namespace)


BY_ORG = Shards(4, key=("id", "org"))
BY_ORG_LATER_8 = Shards(4, key=("id", "org"), generations=[Generation("2027-01-01T00:00:00Z", 8)])


@pytest.mark.parametrize(
    "declare_it",
    [
        pytest.param(lambda: _with_unique(BY_ORG, unique=True), id="unique column"),
        pytest.param(
            lambda: _with_unique(BY_ORG, (Index("ix_email", "email", unique=True),)),
            id="unique index",
        ),
        pytest.param(
            lambda: _with_unique(Shards(4, key="org"), (sa.UniqueConstraint("id", "email"),)),
            id="ID not a key",
        ),
        pytest.param(
            lambda: _with_unique(
                BY_ORG_LATER_8,
                (sa.UniqueConstraint("org", "email"),),
            ),
            id="parent key across generations",
        ),
    ],
)
def test_a_unique_constraint_each_table_would_hold_alone_is_refused(declare_it: Any) -> None:
    """UNIQUE without a column that picks the table would let other tables hold equal rows."""
    with pytest.raises(ShardConfigError) as raised:
        declare_it()
    message = str(raised.value)
    assert "would hold within each of its" in message
    assert "info={'snowshard_per_table': True}" in message


@pytest.mark.parametrize(
    "declare_it",
    [
        pytest.param(
            lambda: _with_unique(BY_ORG, (sa.UniqueConstraint("org", "email"),)),
            id="with the parent key",
        ),
        pytest.param(
            lambda: _with_unique(Shards(4, key="id"), unique=True, gene_from="email"),
            id="the ID's gene source",
        ),
        pytest.param(
            lambda: _with_unique(
                BY_ORG_LATER_8,
                (sa.UniqueConstraint("id", "email"),),
            ),
            id="the ID, with generations",
        ),
        pytest.param(
            lambda: _with_unique(
                BY_ORG, (sa.UniqueConstraint("email", info={"snowshard_per_table": True}),)
            ),
            id="marked per table",
        ),
    ],
)
def test_a_unique_constraint_that_holds_across_tables_is_accepted(declare_it: Any) -> None:
    """A column that picks the table in it (or a per-table mark) makes it declarable."""
    model = sharded_model(declare_it())
    assert any(
        isinstance(c, sa.UniqueConstraint) or getattr(c, "unique", False)
        for t in model.tables
        for c in (*t.constraints, *t.indexes)
    )


def test_rows_and_physical_classes_pickle_and_come_back(tmp_path: Any) -> None:
    """A loaded row pickles, comes back as its physical class, and merges into a session."""
    from examples.sharded_sqlite import Base, Order

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'pickle.db'}")
    create_all(Base.metadata, bind=engine)
    with ShardedSession(engine) as session:
        order = Order(user_id=1820, total=7)
        session.add(order)
        session.commit()
        assert order.total == 7  # loaded again after the commit, so it pickles loaded
        data = pickle.dumps(order)
    back = pickle.loads(data)
    assert type(back) is type(order) and (back.id, back.total) == (order.id, 7)
    assert pickle.loads(pickle.dumps(type(order))) is type(order)
    back.total = 8
    with ShardedSession(engine) as session:
        session.merge(back)
        session.commit()
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT total FROM orders_12")).scalars().all() == [8]
    engine.dispose()


def test_a_pickled_row_comes_back_in_another_interpreter() -> None:
    """A fresh Python process, which builds the classes anew, unpickles the row."""
    from examples.sharded_sqlite import Order

    order = Order(user_id=1820, total=7)
    script = (
        "import pickle, sys\n"
        "row = pickle.loads(sys.stdin.buffer.read())\n"
        "print(type(row).__name__, type(row).__table__.name, row.user_id, row.total)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], input=pickle.dumps(order), capture_output=True,
        cwd=Path(__file__).resolve().parent.parent, check=True,
    )  # fmt: skip
    assert done.stdout.decode().split() == ["Order_12", "orders_12", "1820", "7"]
