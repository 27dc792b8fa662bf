"""SnowflakeType, UtcDateTime and the client-side snowflake primary key default, on every backend."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from snowshard import (
    IdTypeError,
    InvalidId,
    Layout,
    LayoutError,
    ManualClock,
    Snowflake,
    SnowshardError,
)
from snowshard.issuer import IssuerTypeError
from snowshard.layout import MAX_DECIMAL_DIGITS
from snowshard.orm import (
    MAX_ID,
    GeneParentError,
    MissingGeneParent,
    NaiveDatetimeError,
    SnowflakeDefault,
    SnowflakeType,
    UtcDateTime,
    snowflake_default,
    snowflake_pk,
    to_id,
)
from tests.backends import DatabaseFactory

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
LAYOUT = Layout(worker_bits=6, gene_bits=4)  # 41 + 6 + 12 + 4 = 63 bits
GENES = 1 << LAYOUT.gene_bits


@dataclass
class Models:
    base: type[DeclarativeBase]
    order: Any  # id (gene of user_id), user_id (nullable)
    doc: Any  # id as str (no gene), ref: a plain SnowflakeType column
    parent_str: Any  # id (gene of owner), owner: SnowflakeType(as_string=True)


def make_models(generator: Snowflake) -> Models:
    class Base(DeclarativeBase):
        pass

    class Order(Base):
        __tablename__ = "orders"
        id: Mapped[int] = snowflake_pk(generator, gene_from="user_id")
        user_id: Mapped[int | None] = mapped_column(sa.BigInteger)

    class Doc(Base):
        __tablename__ = "docs"
        id: Mapped[str] = snowflake_pk(generator, as_string=True)
        ref: Mapped[int | None] = mapped_column(SnowflakeType())

    class Item(Base):
        __tablename__ = "items"
        id: Mapped[int] = snowflake_pk(generator, gene_from="owner")
        owner: Mapped[str] = mapped_column(SnowflakeType(as_string=True))

    return Models(Base, Order, Doc, Item)


@pytest.fixture
def generator() -> Snowflake:
    clock = ManualClock(T0)
    return Snowflake(LAYOUT, worker=9, clock=clock, sleep=clock.sleep)


@pytest.fixture
def models(generator: Snowflake) -> Models:
    return make_models(generator)


@pytest.fixture
def engine(db_url: str, database_factory: DatabaseFactory, models: Models) -> Engine:
    engine = database_factory.engine(db_url)
    models.base.metadata.create_all(engine)
    return engine


class Statements:
    """Every statement and parameter set sent to the database, in order."""

    def __init__(self, engine: Engine) -> None:
        self.sent: list[tuple[str, Any]] = []
        sa.event.listen(engine, "before_cursor_execute", self._record)

    def _record(self, conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        self.sent.append((statement, params))

    def inserts(self) -> list[tuple[str, Any]]:
        return [(s, p) for s, p in self.sent if s.lstrip().upper().startswith("INSERT")]

    def bound_values(self) -> set[Any]:
        values: set[Any] = set()
        for _, params in self.sent:
            sets = params if isinstance(params, (list, tuple)) and params and isinstance(
                params[0], (dict, list, tuple)
            ) else [params]
            for one in sets:
                values.update(one.values() if isinstance(one, dict) else one)
        return values


@pytest.fixture
def statements(engine: Engine) -> Iterator[Statements]:
    recorder = Statements(engine)
    yield recorder
    sa.event.remove(engine, "before_cursor_execute", recorder._record)


def gene(id_: int | str) -> int:
    return LAYOUT.parse(id_).gene


# --------------------------------------------------------------------------- to_id


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0), (152075078181383514, 152075078181383514), (MAX_ID, MAX_ID), ("42", 42),
     (" 0042 ", 42), (str(MAX_ID), MAX_ID)],
)
def test_to_id_accepts_ints_and_decimal_strings(value: object, expected: int) -> None:
    """Ints and decimal strings in 0..2**63-1 are IDs."""
    assert to_id(value) == expected


BAD_VALUES = [
    pytest.param(-1, InvalidId, id="negative"),
    pytest.param(MAX_ID + 1, InvalidId, id="above-bigint"),
    pytest.param(str(MAX_ID + 1), InvalidId, id="str-above-bigint"),
    pytest.param("1" * 5000, InvalidId, id="str-huge"),
    pytest.param("-5", InvalidId, id="str-negative"),
    pytest.param("12a", InvalidId, id="str-not-decimal"),
    pytest.param("", InvalidId, id="str-empty"),
    pytest.param("١٢", InvalidId, id="str-non-ascii-digits"),
    pytest.param(1.0, IdTypeError, id="float"),
    pytest.param(True, IdTypeError, id="bool"),
    pytest.param(Decimal(7), IdTypeError, id="decimal"),
    pytest.param(b"7", IdTypeError, id="bytes"),
]


@pytest.mark.parametrize(("value", "error"), BAD_VALUES)
def test_to_id_refuses_bad_values_naming_them(value: object, error: type[Exception]) -> None:
    """A bad value raises the specific snowshard error, whose message shows the value."""
    with pytest.raises(error) as caught:
        to_id(value)
    shown = repr(value)
    assert (shown if len(shown) < 50 else shown[:20]) in str(caught.value)


@pytest.mark.parametrize("text", ["12a", " -5", "", "\u0661\u0662", "1" * (MAX_DECIMAL_DIGITS + 1)])
def test_to_id_and_layout_refuse_bad_text_alike(text: str) -> None:
    """A bad decimal ID gets the same InvalidId message from the column type and the layout."""
    with pytest.raises(InvalidId) as from_column:
        to_id(text)
    with pytest.raises(InvalidId) as from_layout:
        LAYOUT.validate(text)
    assert str(from_column.value) == str(from_layout.value)


@pytest.mark.parametrize(("value", "error", "builtin"), [("12a", InvalidId, ValueError), (1.5, IdTypeError, TypeError)])
def test_bound_bad_values_raise_the_public_errors_unwrapped(
    engine: Engine, models: Models, value: object, error: type[SnowshardError], builtin: type[Exception]
) -> None:
    """A bad value bound in a statement raises the core error itself, not StatementError."""
    Doc = models.doc
    with Session(engine) as session, pytest.raises(error) as caught:
        session.execute(sa.select(Doc).where(Doc.ref == value))
    assert isinstance(caught.value, builtin)
    assert not isinstance(caught.value, sa.exc.StatementError)


# --------------------------------------------------------------------------- the type


def test_type_cache_key_tells_as_string_apart() -> None:
    """Equal arguments give equal statement cache keys; as_string changes the key."""
    plain = sa.select(sa.literal(1, SnowflakeType()))
    plain_again = sa.select(sa.literal(1, SnowflakeType()))
    text = sa.select(sa.literal(1, SnowflakeType(as_string=True)))
    assert plain._generate_cache_key() == plain_again._generate_cache_key()
    assert plain._generate_cache_key() != text._generate_cache_key()


@pytest.mark.parametrize(
    ("backend", "ddl"),
    [("postgresql", "id BIGINT"), ("mysql", "id BIGINT"), ("sqlite", "id INTEGER")],
)
def test_type_ddl_is_a_64_bit_integer(backend: str, ddl: str) -> None:
    """The column is a BIGINT, and an INTEGER (64-bit there) on SQLite."""
    dialect = make_url(f"{backend}://").get_dialect()()
    column: sa.Column[Any] = sa.Column("id", SnowflakeType(as_string=True))
    assert str(sa.schema.CreateColumn(column).compile(dialect=dialect)) == ddl


def test_sqlite_primary_key_is_the_rowid(
    sqlite_url: str, database_factory: DatabaseFactory
) -> None:
    """On SQLite a snowflake primary key needs no separate index: it is the rowid."""
    column: sa.Column[Any] = sa.Column("id", SnowflakeType(), primary_key=True, autoincrement=False)
    table = sa.Table("t", sa.MetaData(), column)
    engine = database_factory.engine(sqlite_url)
    table.create(engine)
    with engine.connect() as conn:
        indexes = conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'index'")
        assert indexes.all() == []
        plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN SELECT * FROM t WHERE id = 5").all()
    assert "INTEGER PRIMARY KEY" in plan[0][-1]


def test_arithmetic_operands_are_not_checked_as_ids() -> None:
    """``id * -1`` binds -1 as a plain BIGINT; only comparisons check IDs."""
    column: sa.ColumnClause[Any] = sa.column("id", SnowflakeType())
    assert type((column * -1).right.type) is sa.BigInteger
    assert isinstance((column == 5).right.type, SnowflakeType)


def test_int_ids_round_trip_to_bigint_limits(engine: Engine) -> None:
    """0, a typical snowflake ID and 2**63-1 are stored and read back as the same ints."""
    table = sa.Table("ids", sa.MetaData(), sa.Column("id", SnowflakeType(), primary_key=True,
                                                        autoincrement=False))
    table.create(engine)
    values = [0, 152075078181383514, MAX_ID]
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": v} for v in values])
        read = conn.execute(sa.select(table.c.id).order_by(table.c.id)).scalars().all()
    assert read == values
    assert all(type(v) is int for v in read)


def test_as_string_reads_decimal_strings(engine: Engine, models: Models) -> None:
    """With as_string=True, IDs bound as int or str come back as decimal str."""
    Doc = models.doc
    with Session(engine) as session:
        session.add_all([Doc(id=152075078181383514), Doc(id=str(MAX_ID))])
        session.commit()
    with Session(engine) as session:
        read = session.scalars(sa.select(Doc.id).order_by(Doc.id)).all()
    assert read == ["152075078181383514", str(MAX_ID)]


def test_as_string_filters_by_int_or_str(engine: Engine, models: Models) -> None:
    """``Doc.id == "123"`` and ``Doc.id == 123`` find the same row."""
    Doc = models.doc
    with Session(engine) as session:
        session.add_all([Doc(id=123), Doc(id=124)])
        session.commit()
        by_str = session.scalars(sa.select(Doc.id).where(Doc.id == "123")).all()
        by_int = session.scalars(sa.select(Doc.id).where(Doc.id.in_([123]))).all()
    assert by_str == by_int == ["123"]


@pytest.mark.parametrize(("value", "error"), [
    pytest.param(-1, InvalidId, id="negative"),
    pytest.param(1.5, IdTypeError, id="float"),
    pytest.param("12a", InvalidId, id="not-decimal"),
    pytest.param(2**63, InvalidId, id="above-bigint"),
])
def test_bad_insert_value_raises_before_sql(
    engine: Engine, models: Models, statements: Statements, value: object, error: type[Exception]
) -> None:
    """Flushing a bad ID raises the snowshard error itself and sends no INSERT."""
    Doc = models.doc
    with Session(engine) as session:
        session.add(Doc(ref=value))
        with pytest.raises(error, match=repr(value).replace(".", r"\.")):
            session.flush()
    assert statements.inserts() == []


def test_bad_comparison_value_raises_before_sql(
    engine: Engine, models: Models, statements: Statements
) -> None:
    """``WHERE id = 'abc'`` raises InvalidId and sends no SELECT."""
    Doc = models.doc
    with Session(engine) as session, pytest.raises(InvalidId, match="'abc'"):
        session.execute(sa.select(Doc).where(Doc.id == "abc"))
    assert statements.sent == []


# --------------------------------------------------------------------------- the default


def test_pk_is_assigned_client_side_and_known_after_flush(
    engine: Engine, models: Models, statements: Statements
) -> None:
    """After flush the object has its ID, which the INSERT itself carried."""
    Order = models.order
    with Session(engine) as session:
        order = Order(user_id=1820)
        session.add(order)
        session.flush()
        assert isinstance(order.id, int)
        order_id = order.id
        assert order_id in statements.bound_values()
        session.commit()
    with Session(engine) as session:
        assert session.scalar(sa.select(Order.user_id).where(Order.id == order_id)) == 1820


def test_pk_carries_gene_of_parent_column(engine: Engine, models: Models) -> None:
    """An ID's gene is the low bits of the row's ``gene_from`` value."""
    Order = models.order
    with Session(engine) as session:
        order = Order(user_id=1820)
        session.add(order)
        session.commit()
        assert gene(order.id) == 1820 % GENES


def test_bulk_add_all_gets_distinct_ids_with_genes(
    engine: Engine, models: Models, statements: Statements
) -> None:
    """600 rows added at once get 600 distinct IDs, each with its own row's gene."""
    Order = models.order
    users = [(i * 7919) % 100_003 for i in range(600)]
    with Session(engine) as session:
        session.add_all([Order(user_id=u) for u in users])
        session.commit()
    with Session(engine) as session:
        rows = session.execute(sa.select(Order.id, Order.user_id)).all()
    assert len({id_ for id_, _ in rows}) == 600
    assert sorted(u for _, u in rows) == sorted(users)
    assert all(gene(id_) == user % GENES for id_, user in rows)
    # batched (insertmanyvalues / executemany), not one INSERT per row
    assert len(statements.inserts()) < 10


def test_orm_bulk_insert_statement_gets_genes(engine: Engine, models: Models) -> None:
    """``session.execute(insert(Order), rows)`` issues one gene-carrying ID per row."""
    Order = models.order
    users = list(range(1000, 1500))
    with Session(engine) as session:
        session.execute(sa.insert(Order), [{"user_id": u} for u in users])
        session.commit()
        rows = session.execute(sa.select(Order.id, Order.user_id)).all()
    assert len({id_ for id_, _ in rows}) == len(users)
    assert all(gene(id_) == user % GENES for id_, user in rows)


def test_core_executemany_gets_genes(engine: Engine, models: Models) -> None:
    """A Core ``conn.execute(table.insert(), rows)`` runs the default per row too."""
    table = models.order.__table__
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"user_id": u} for u in (3, 18, 33)])
        rows = conn.execute(sa.select(table.c.id, table.c.user_id)).all()
    assert sorted(gene(id_) for id_, _ in rows) == [1, 2, 3]
    assert all(gene(id_) == user % GENES for id_, user in rows)


@pytest.mark.parametrize("core", [False, True], ids=["orm", "core"])
def test_values_list_insert_gets_genes(
    engine: Engine, models: Models, statements: Statements, core: bool
) -> None:
    """``insert(...).values([...])`` (one multi-row INSERT) issues a gene-carrying ID per row,
    from an ORM entity (whose rows SQLAlchemy keys by column) as from a Core table."""
    Order = models.order
    users = [3, 18, 33, 7]
    with Session(engine) as session:
        target = Order.__table__ if core else Order
        session.execute(sa.insert(target).values([{"user_id": u} for u in users]))
        session.commit()
        rows = session.execute(sa.select(Order.id, Order.user_id)).all()
    assert sorted(u for _, u in rows) == sorted(users)
    assert len({id_ for id_, _ in rows}) == len(users)
    assert all(gene(id_) == user % GENES for id_, user in rows)
    assert len(statements.inserts()) == 1


def test_values_list_insert_of_string_ids(engine: Engine, models: Models) -> None:
    """A str-typed key without a gene is issued for every row of a ``values([...])`` list."""
    table = models.doc.__table__
    with engine.begin() as conn:
        conn.execute(sa.insert(table).values([{"ref": 1}, {"ref": 2}, {"ref": 3}]))
        ids = conn.execute(sa.select(table.c.id)).scalars().all()
    assert len(set(ids)) == 3 and all(isinstance(i, str) and i.isdigit() for i in ids)


def test_values_list_gene_parent_given_as_sql_raises(
    engine: Engine, models: Models, statements: Statements
) -> None:
    """A gene column given as a SQL expression has no value before the INSERT runs:
    MissingGeneParent says so, and nothing is inserted."""
    rows = [{"user_id": 3}, {"user_id": sa.literal_column("18")}]
    with Session(engine) as session, pytest.raises(MissingGeneParent, match="SQL expression"):
        session.execute(sa.insert(models.order).values(rows))
    assert statements.inserts() == []


def test_as_string_pk_default_is_a_str_in_the_identity_map(engine: Engine, models: Models) -> None:
    """A str-typed key is issued as str, so a later load finds the same object."""
    Doc = models.doc
    with Session(engine) as session:
        doc = Doc()
        session.add(doc)
        session.commit()
        assert isinstance(doc.id, str) and doc.id.isdigit()
        assert session.scalars(sa.select(Doc)).one() is doc


def test_gene_from_decimal_str_counts_as_its_number(engine: Engine, models: Models) -> None:
    """An as_string parent ID ``"1820"`` gives the gene of 1820, not of its text's hash."""
    Item = models.parent_str
    with Session(engine) as session:
        item = Item(owner="1820")
        session.add(item)
        session.commit()
        assert gene(item.id) == 1820 % GENES


def test_null_gene_parent_raises_before_sql(
    engine: Engine, models: Models, statements: Statements
) -> None:
    """A NULL ``user_id`` raises MissingGeneParent naming the column; nothing is inserted."""
    Order = models.order
    with Session(engine) as session:
        session.add_all([Order(user_id=5), Order(user_id=None)])
        with pytest.raises(MissingGeneParent, match=r"orders\.id .*'user_id', which is NULL"):
            session.flush()
    assert statements.inserts() == []


def test_absent_gene_parent_raises(engine: Engine, models: Models) -> None:
    """An INSERT without the gene column raises MissingGeneParent saying it is missing."""
    table = models.order.__table__
    with engine.begin() as conn, pytest.raises(MissingGeneParent, match="is missing"):
        conn.execute(table.insert())


def test_bad_gene_parent_value_raises_gene_parent_error(models: Models, engine: Engine) -> None:
    """A negative parent key raises GeneParentError (a ValueError) before any SQL."""
    Order = models.order
    with Session(engine) as session:
        session.add(Order(user_id=-4))
        with pytest.raises(GeneParentError, match="-4") as caught:
            session.flush()
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, SnowshardError)


def test_gene_from_needs_gene_bits() -> None:
    """gene_from with a layout of gene_bits=0 is refused when the default is made."""
    with pytest.raises(LayoutError, match="gene_bits=0"):
        snowflake_default(Snowflake(Layout(), worker=1), gene_from="user_id")


def test_default_needs_an_id_issuer() -> None:
    """Anything but an ID issuer as generator is an IssuerTypeError (a TypeError) at once."""
    with pytest.raises(IssuerTypeError, match="IdIssuer") as caught:
        snowflake_default(lambda: 5)  # type: ignore[arg-type]
    assert isinstance(caught.value, TypeError)


def test_snowflake_pk_refuses_keywords_it_sets(generator: Snowflake) -> None:
    """Passing ``default=`` or ``primary_key=`` to snowflake_pk is an error."""
    with pytest.raises(TypeError, match="default"):
        snowflake_pk(generator, default=1)


def test_snowflake_pk_builds_a_client_side_bigint_key(models: Models) -> None:
    """snowflake_pk gives a non-autoincrement BIGINT primary key with the default."""
    column = models.order.__table__.c.id
    assert column.primary_key and column.autoincrement is False
    assert isinstance(column.type, SnowflakeType) and not column.type.as_string
    assert isinstance(column.default.arg, SnowflakeDefault)
    assert column.default.arg.gene_from == "user_id"


# --------------------------------------------------------------------------- UtcDateTime

AT_UTC = datetime(2026, 11, 23, 14, 5, 6, 123456, tzinfo=timezone.utc)
AT_PLUS_0530 = datetime(2026, 11, 23, 19, 35, 6, 654321, tzinfo=timezone(timedelta(hours=5,
                                                                                    minutes=30)))


def utc_table() -> sa.Table:
    return sa.Table("stamps", sa.MetaData(),
                    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
                    sa.Column("at", UtcDateTime()))


@pytest.mark.parametrize("backend", ["mysql", "mariadb"])
def test_utc_datetime_ddl_keeps_microseconds_on_mysql(backend: str) -> None:
    """On MySQL/MariaDB a UtcDateTime column is DATETIME(6), not second-precision DATETIME."""
    dialect = make_url(f"{backend}://").get_dialect()()
    column: sa.Column[Any] = sa.Column("at", UtcDateTime())
    assert str(sa.schema.CreateColumn(column).compile(dialect=dialect)) == "at DATETIME(6)"


def test_utc_datetime_round_trips_to_the_microsecond_as_utc(engine: Engine) -> None:
    """Aware datetimes (UTC or not) come back equal to the microsecond, in UTC, and match."""
    table = utc_table()
    table.create(engine)
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": 1, "at": AT_UTC}, {"id": 2, "at": AT_PLUS_0530}])
        read = conn.execute(sa.select(table.c.at).order_by(table.c.id)).scalars().all()
        found = conn.execute(sa.select(table.c.id).where(table.c.at == AT_PLUS_0530)).all()
    assert read == [AT_UTC, AT_PLUS_0530]
    assert [v.microsecond for v in read] == [123456, 654321]
    assert all(v.tzinfo is timezone.utc for v in read)
    assert read[1].replace(tzinfo=None) == datetime(2026, 11, 23, 14, 5, 6, 654321)
    assert found == [(2,)]


def test_utc_datetime_refuses_naive_values_before_sql(
    engine: Engine, statements: Statements
) -> None:
    """A naive datetime bound to a UtcDateTime column raises NaiveDatetimeError, no SQL sent."""
    table = utc_table()
    table.create(engine)
    naive = datetime(2026, 11, 23, 14, 5, 6, 123456)
    with engine.begin() as conn, pytest.raises(NaiveDatetimeError) as caught:
        conn.execute(table.insert(), {"id": 1, "at": naive})
    assert statements.inserts() == []
    message = str(caught.value)
    assert naive.isoformat() in message and "give it a timezone" in message
    assert isinstance(caught.value, SnowshardError) and isinstance(caught.value, ValueError)
