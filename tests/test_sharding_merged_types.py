"""What SQLAlchemy's types do to values a merge computes (``snowshard.sharding.merged_types``)."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import Float, Integer, Numeric, column, distinct, func
from sqlalchemy.types import NullType

from snowshard.sharding import merged_types as types


def test_average_shown_as_floats_when_the_sources_gave_floats() -> None:
    """A NUMERIC average is handed out as a float where the sources' AVGs were floats."""
    assert types.shown_as(Decimal("5.8888888888888889"), [5.5, None]) == 5.888888888888889


def test_average_shown_as_decimals_of_the_sources_scale() -> None:
    """A REAL average is handed out as a Decimal of the sources' scale: 1.875 -> 1.88."""
    assert types.shown_as(1.875, [Decimal("1.25"), Decimal("2.50")]) == Decimal("1.88")


def test_average_kept_when_the_sources_gave_its_own_form() -> None:
    """A Decimal average beside Decimal sources, and one with no source value, is kept."""
    assert str(types.shown_as(Decimal("5.4444"), [Decimal("5.5000")])) == "5.4444"
    assert types.shown_as(Decimal("5.4444"), [None]) == Decimal("5.4444")


def test_numeric_reader_reads_a_postgresql_float_as_a_decimal_of_the_scale() -> None:
    """Numeric(3, 1) over a float8 value: Decimal('8.2'), as SQLAlchemy reads it."""
    read = types.numeric_reader(Numeric(3, 1), "postgresql")
    assert read is not None and str(read(8.166666666666668)) == "8.2"


def test_numeric_reader_reads_decimals_as_floats_for_float_types() -> None:
    """Float over a DECIMAL or NUMERIC value: a float, on MariaDB and PostgreSQL."""
    for dialect in ("mysql", "postgresql"):
        read = types.numeric_reader(Float(), dialect)
        assert read is not None and read(Decimal("5.8889")) == 5.8889


def test_numeric_reader_leaves_other_types_and_dialects() -> None:
    """Numeric on MariaDB, Integer anywhere and any type on SQLite need no reader."""
    assert types.numeric_reader(Numeric(3, 1), "mysql") is None
    assert types.numeric_reader(Integer(), "postgresql") is None
    assert types.numeric_reader(Float(), "sqlite") is None


def test_distinct_sum_typed_float_is_read_as_a_float() -> None:
    """sum(DISTINCT x, type_=Float) on PostgreSQL turns the merged NUMERIC into a float;
    the untyped one keeps it."""
    x = column("x", Integer)
    first = lambda values: values[0]  # noqa: E731
    typed = types.typed_distinct(first, func.sum(distinct(x), type_=Float), "postgresql")
    plain = types.typed_distinct(first, func.sum(distinct(x)), "postgresql")
    assert typed([Decimal("78")]) == 78.0 and isinstance(typed([Decimal("78")]), float)
    assert isinstance(plain([Decimal("78")]), Decimal)


def test_numeric_sums_are_sent_raw_and_others_as_they_are() -> None:
    """A SUM or GROUP BY key of a Numeric or Float type is sent untyped; an integer SUM or
    key, a DISTINCT SUM and a count are sent as they are."""
    x = column("x", Numeric(10, 2))
    assert types.is_raw_sum(func.sum(x))
    assert types.is_raw_sum(func.sum(column("n", Integer), type_=Float))
    assert not types.is_raw_sum(func.sum(column("n", Integer)))
    assert not types.is_raw_sum(func.sum(distinct(x)))
    assert isinstance(types.raw_helper(func.sum(x), "sum").type, NullType)
    assert isinstance(types.raw_helper(x, None).type, NullType)  # a numeric GROUP BY key
    assert isinstance(types.raw_helper(func.count(x), "count").type, Integer)
    assert isinstance(types.raw_helper(column("n", Integer), None).type, Integer)


def test_read_as_rounds_a_sqlite_real_sum_once_to_the_scale() -> None:
    """A merged REAL sum of 6.125 typed Numeric(10, 2) reads on SQLite as '%.2f' does:
    6.12; an integer sum typed Float reads as a float on PostgreSQL."""
    first = lambda values: values[0]  # noqa: E731
    assert str(types.read_as(first, Numeric(10, 2), "sqlite")([6.125])) == "6.12"
    assert types.read_as(first, Float(), "postgresql")([212]) == 212.0
