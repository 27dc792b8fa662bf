"""Division and CAST over aggregates merged across databases exactly as each database computes
them: same values, same Python types, same decimal scale as one unsharded table."""

from __future__ import annotations

import heapq
import random
from decimal import Decimal
from functools import cmp_to_key
from operator import itemgetter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
import sqlalchemy as sa
from sqlalchemy import (
    Double,
    Float,
    Integer,
    Numeric,
    String,
    cast,
    distinct,
    func,
    literal,
    literal_column,
    select,
    text,
    tuple_,
    type_coerce,
)
from sqlalchemy.orm import mapped_column

from snowshard.sharding import UnsupportedShardQuery
from snowshard.sharding.driver_errors import ShardOperationError
from snowshard.sharding.arith import MergedDivisionByZero
from snowshard.sharding.merge import MergePlan, sort_key
from tests.shop_setup import Setup, refused_before_sql
from tests.twin_world import TwinWorld, twin_world_fixture


def _exact(rows: Any) -> list[tuple[Any, ...]]:
    """Rows as (type name, text) pairs, so that 3.5 and 3.5000 differ."""
    found = [tuple((type(v).__name__, str(v)) for v in row) for row in rows]
    return sorted(found)


def _both(shop: Setup, build: Any) -> tuple[list[Any], list[Any]]:
    s = shop.schema
    with shop.session() as session:
        got = _exact(session.execute(build(s.Order)))
        twin = _exact(session.execute(build(s.OrderTwin)))
    return got, twin


def _grouped(*columns: Any) -> Any:
    def build(m: Any) -> Any:
        return select(m.status, *[c(m) for c in columns]).group_by(m.status)

    return build


def test_cast_of_avg_times_100_is_exact(shop: Setup) -> None:
    """cast(avg(x) * 100, Integer) per group equals the database's own rounding (refused on
    MariaDB, which computes AVG inside expressions with more digits than it returns)."""
    build = _grouped(lambda m: cast(func.avg(m.amount) * 100, Integer))
    if shop.name.startswith("mysql"):
        with shop.session() as session, pytest.raises(UnsupportedShardQuery, match="AVG"):
            session.execute(build(shop.schema.Order))
        return
    got, twin = _both(shop, build)
    assert got == twin and len(got) == 4


def test_sum_divided_by_count_is_exact(shop: Setup) -> None:
    """sum(x) / count() has the database's type and scale (NUMERIC, DECIMAL or REAL)."""
    got, twin = _both(shop, _grouped(lambda m: func.sum(m.amount) / func.count()))
    assert got == twin and len(got) == 4


def test_floor_division_is_exact(shop: Setup) -> None:
    """sum(x) // count() truncates or floors as the database does."""
    got, twin = _both(shop, _grouped(lambda m: func.sum(m.amount) // func.count()))
    assert got == twin and len(got) == 4


def test_avg_divided_by_a_constant_is_exact(shop: Setup) -> None:
    """avg(x) / 3 keeps the database's scale (refused on MariaDB, as above)."""
    build = _grouped(lambda m: func.avg(m.amount) / 3)
    if shop.name.startswith("mysql"):
        with shop.session() as session, pytest.raises(UnsupportedShardQuery, match="AVG"):
            session.execute(build(shop.schema.Order))
        return
    got, twin = _both(shop, build)
    assert got == twin and len(got) == 4


def test_avg_typed_float_is_the_float_one_table_gives(shop: Setup) -> None:
    """avg(x, type_=Float), per group and overall, is the float SQLAlchemy makes of the
    database's AVG (PostgreSQL's NUMERIC, MariaDB's DECIMAL of 4 decimals), not a Decimal."""
    for build in (
        _grouped(lambda m: func.avg(m.amount, type_=Float)),
        lambda m: select(func.avg(m.amount, type_=Float), func.avg(m.user_id, type_=Float)),
    ):
        got, twin = _both(shop, build)
        assert got == twin and got and all(v[0] in ("float", "NoneType") for v in got[0])


def test_avg_of_a_numeric_expression_has_one_tables_type(shop: Setup) -> None:
    """avg(cast(x, Numeric(10, 2))) per group and overall has the type and scale one table
    gives: SQLite's REAL as a float (the AVG is untyped), a NUMERIC or DECIMAL elsewhere."""
    average = lambda m: func.avg(cast(m.amount, Numeric(10, 2)))  # noqa: E731
    for build in (_grouped(average), lambda m: select(average(m))):
        got, twin = _both(shop, build)
        assert got == twin and got


def test_avg_of_floats_typed_numeric_has_one_tables_type(shop: Setup) -> None:
    """avg of a NUMERIC-typed expression that the database computes in floating point
    (a float bound value on PostgreSQL, REAL on SQLite) and of REAL values typed
    Numeric(10, 4) equals one table's: the AVG's float, or its Decimal of scale 4 (quarters:
    their float sums are exact in any order)."""
    for build in (
        _grouped(
            lambda m: func.avg(cast(m.amount, Numeric(10, 2)) * literal(0.25, Numeric(10, 2)))
        ),
        _grouped(lambda m: func.avg(cast(m.amount, Float) / 4, type_=Numeric(10, 4))),
    ):
        got, twin = _both(shop, build)
        assert got == twin and len(got) == 4


def test_distinct_sum_and_avg_typed_float_give_one_tables_types(shop: Setup) -> None:
    """sum/avg(DISTINCT x, type_=Float) beside the untyped sum(DISTINCT x) of the same x,
    per group and overall, have one table's types (floats where typed, on SQLite whatever
    the type's processor makes of the database's value)."""
    columns = (
        lambda m: func.sum(distinct(m.amount)),
        lambda m: func.sum(distinct(m.amount), type_=Float),
        lambda m: func.avg(distinct(m.amount), type_=Float),
    )
    for build in (_grouped(*columns), lambda m: select(*(c(m) for c in columns))):
        got, twin = _both(shop, build)
        assert got == twin and got


@pytest.mark.parametrize(
    "build",
    [
        _grouped(lambda m: func.avg(m.amount) * 2),
        _grouped(lambda m: func.avg(m.amount) + 0.5),
        _grouped(lambda m: func.coalesce(func.avg(m.amount), 0)),
        lambda m: select(m.status).group_by(m.status).having(func.avg(m.amount) > 5),
        lambda m: _grouped(lambda n: func.count())(m).order_by(func.avg(m.amount) * 2),
    ],
    ids=["times-2", "plus-float", "coalesce", "having", "order-by-expression"],
)
def test_avg_inside_an_expression_is_exact_or_refused_on_mariadb(shop: Setup, build: Any) -> None:
    """AVG inside arithmetic, COALESCE, HAVING or an ORDER BY expression equals one table's
    on PostgreSQL and SQLite, and is refused before any SQL on MariaDB, which computes it
    there with more digits than it returns (5.444444444 * 2, not 5.4444 * 2)."""
    if shop.name.startswith("mysql"):
        refused_before_sql(shop, build(shop.schema.Order), "more digits than it returns")
        return
    got, twin = _both(shop, build)
    assert got == twin and got


def test_bare_avg_columns_and_order_are_merged_on_every_backend(shop: Setup) -> None:
    """AVG as a column of its own and as an ORDER BY item of its own stays merged, MariaDB
    included, and equals one table's."""
    got, twin = _both(
        shop,
        lambda m: select(m.user_id, func.avg(m.amount))
        .group_by(m.user_id)
        .order_by(func.avg(m.amount).desc(), m.user_id),
    )
    assert got == twin and len(got) == 8


def test_computed_numeric_column_over_a_float_has_one_tables_type(shop: Setup) -> None:
    """avg(x) * a Numeric(3, 1) float bound value, and avg(x, type_=Float) * 2, have one
    table's type and value where merged (PostgreSQL computes the first in float8, which
    SQLAlchemy reads as a Decimal of scale 1; the second in NUMERIC, read as a float)."""
    for build in (
        _grouped(lambda m: func.avg(m.amount) * literal(1.5, Numeric(3, 1))),
        _grouped(lambda m: func.avg(m.amount, type_=Float) * 2),
    ):
        if shop.name.startswith("mysql"):
            refused_before_sql(shop, build(shop.schema.Order), "more digits than it returns")
            continue
        got, twin = _both(shop, build)
        assert got == twin and len(got) == 4


def test_sum_of_floats_typed_numeric_rounds_once_as_one_table(shop: Setup) -> None:
    """SUM of eighths typed Numeric(10, 2) (REAL on SQLite, float8 on PostgreSQL) is read to
    two decimals once, from the whole sum, as one table's: per-source rounding made 6.125
    (read as 6.12) into 3.375 + 2.75 read as 3.38 + 2.75 = 6.13."""
    eighths = lambda m: type_coerce(cast(m.amount, Float) / 8, Numeric(10, 2))  # noqa: E731
    for build in (
        _grouped(lambda m: func.sum(eighths(m))),
        _grouped(lambda m: func.sum(eighths(m)) * 2, lambda m: func.sum(m.amount, type_=Float)),
    ):
        got, twin = _both(shop, build)
        assert got == twin and len(got) == 4


def test_group_by_a_numeric_typed_float_groups_raw_values(shop: Setup) -> None:
    """GROUP BY amount / user_id typed Numeric(10, 1) groups the values the database
    computes (REAL on SQLite, float8 on PostgreSQL, DOUBLE on MariaDB), as one table
    does, though SQLAlchemy reads several of them as one Decimal (SQLite, PostgreSQL; its
    Numeric passes MariaDB's floats on): one group per raw value."""
    ratio = lambda m: type_coerce(cast(m.amount, Float) / m.user_id, Numeric(10, 1))  # noqa: E731
    got, twin = _both(shop, lambda m: select(ratio(m), func.count()).group_by(ratio(m)))
    assert got == twin and got
    if not shop.name.startswith("mysql"):  # read as Decimals there: equal keys repeat
        assert len(got) > len({row[0] for row in got})


def test_count_distinct_of_a_numeric_typed_float_counts_raw_values(shop: Setup) -> None:
    """count(DISTINCT amount / user_id typed Numeric(10, 1)), overall and per group, counts
    the values the database tells apart, not the fewer Decimals SQLAlchemy reads them as."""
    ratio = lambda m: type_coerce(cast(m.amount, Float) / m.user_id, Numeric(10, 1))  # noqa: E731
    for build in (
        lambda m: select(func.count(distinct(ratio(m)))),
        _grouped(lambda m: func.count(distinct(ratio(m)))),
    ):
        got, twin = _both(shop, build)
        assert got == twin and got


def test_sum_of_numeric_typed_float_adds_exactly(shop: Setup) -> None:
    """SUM of thirds of NUMERIC values typed Float adds the exact sums, then reads a float,
    as one table does (PostgreSQL and MariaDB; SQLite adds REALs, whose sum depends on the
    order of the additions: equal types, values within a few ulps)."""
    thirds = lambda m: cast(m.amount, Numeric(10, 2)) / 3  # noqa: E731
    got, twin = _both(shop, _grouped(lambda m: func.sum(thirds(m), type_=Float)))
    assert len(got) == len(twin) == 4
    if not shop.name.startswith("sqlite"):
        assert got == twin
        return
    for (key, (kind, text)), (twin_key, (twin_kind, twin_text)) in zip(got, twin):
        assert (key, kind) == (twin_key, twin_kind)
        assert float(text) == pytest.approx(float(twin_text))


def test_cast_of_a_division_is_exact_without_groups(shop: Setup) -> None:
    """cast(sum(x) * 7 / count(), Integer) over every row gives one equal row."""
    got, twin = _both(
        shop,
        lambda m: select(cast(func.sum(m.amount) * 7 / func.count(), Integer)).select_from(m),
    )
    assert got == twin and len(got) == 1


def test_cast_to_a_string_is_refused_before_any_sql(shop: Setup) -> None:
    """CAST to VARCHAR of an aggregate is refused, naming CAST, before SQL runs."""
    shop.sent.clear()
    statement = select(cast(func.sum(shop.schema.Order.amount), String(10)))
    with shop.session() as session, pytest.raises(UnsupportedShardQuery, match="CAST"):
        session.execute(statement.select_from(shop.schema.Order))
    assert shop.sent == []


def test_coalesce_of_a_null_sum_has_the_sums_type(shop: Setup) -> None:
    """COALESCE(SUM(x), 0) where every x is NULL is the sum's type's 0 (a DECIMAL on
    MariaDB, an integer on PostgreSQL and SQLite), as one table gives it."""
    got, twin = _both(
        shop,
        lambda m: select(m.status, func.coalesce(func.sum(m.amount), 0) + func.count())
        .where(m.amount.is_(None))
        .group_by(m.status),
    )
    assert got == twin and got


def test_count_distinct_of_a_column_merges_by_its_values(shop: Setup) -> None:
    """count(DISTINCT status) per group and overall equals one table's: the sources group
    by the value too and the merge counts the distinct values (NULLs not counted)."""
    for build in (
        _grouped(lambda m: func.count(distinct(m.amount)), lambda m: func.avg(m.amount)),
        lambda m: select(func.count(distinct(m.status)), func.count()).select_from(m),
    ):
        got, twin = _both(shop, build)
        assert got == twin and got


def test_count_distinct_of_the_shard_key_sums_the_sources_counts(shop: Setup) -> None:
    """count(DISTINCT user_id), the shard key, is counted by each source (equal keys live in
    one table) and summed: no source sends its keys."""
    shop.sent.clear()
    got, twin = _both(shop, _grouped(lambda m: func.count(distinct(m.user_id))))
    assert got == twin and got
    assert not any("GROUP BY orders.status, orders.user_id" in sql for sql in shop.sent)


def test_count_distinct_of_nothing_is_one_row_of_zero(shop: Setup) -> None:
    """Without GROUP BY, count(DISTINCT x) over no rows is one row (0), as one table says,
    though every source (grouped by x) sends none."""
    got, twin = _both(
        shop,
        lambda m: select(func.count(distinct(m.status)), func.sum(m.amount)).where(m.id < 0),
    )
    assert got == twin == [(("int", "0"), ("NoneType", "None"))]


def test_sum_and_avg_of_distinct_integers_merge_by_their_values(shop: Setup) -> None:
    """sum(DISTINCT x) and avg(DISTINCT x) of integers, per group, overall and over no
    rows, equal one table's, types and scale included (NUMERIC on PostgreSQL, DECIMAL
    with 4 decimals on MariaDB, float on SQLite)."""
    for build in (
        _grouped(lambda m: func.sum(distinct(m.amount)), lambda m: func.avg(distinct(m.amount))),
        lambda m: select(func.sum(distinct(m.amount)), func.avg(distinct(m.user_id))),
        lambda m: select(func.avg(distinct(m.amount)), func.count()).where(m.id < 0),
    ):
        got, twin = _both(shop, build)
        assert got == twin and got


def test_min_and_max_of_distinct_values_merge_as_min_and_max(shop: Setup) -> None:
    """min/max(DISTINCT x) of integers and strings, per group, in HAVING and ORDER BY and
    over every row, equal one table's."""

    def grouped(m: Any) -> Any:
        most = func.max(distinct(m.amount))
        return (
            select(m.status, func.min(distinct(m.amount)), most.label("most"))
            .group_by(m.status)
            .having(func.min(distinct(m.user_id)) > 0)
            .order_by(most.desc(), m.status)
        )

    got, twin = _both(shop, grouped)
    assert got == twin and len(got) == 4
    got, twin = _both(
        shop,
        lambda m: select(func.min(distinct(m.status)), func.max(distinct(m.status))),
    )
    assert got == twin and len(got) == 1


def test_other_aggregates_of_distinct_values_are_refused(shop: Setup) -> None:
    """sum(DISTINCT a, b), sum(DISTINCT) of a non-integer and count(DISTINCT) of a row
    value are refused before any SQL runs."""
    order = shop.schema.Order
    shop.sent.clear()
    for statement, match in (
        (select(func.sum(distinct(order.amount), order.user_id)), "several values"),
        (select(func.sum(distinct(cast(order.amount, Numeric(8, 2))))), "integers only"),
        (select(func.count(distinct(tuple_(order.amount, order.status)))), "row value"),
    ):
        with shop.session() as session, pytest.raises(UnsupportedShardQuery, match=match):
            session.execute(statement)
    assert shop.sent == []


def test_order_by_sql_text_is_refused_before_any_sql(shop: Setup) -> None:
    """ORDER BY text("amount DESC") or literal_column(..., Integer) across shards is refused:
    the text holds a direction the merge cannot read."""
    order = shop.schema.Order
    for key in (text("amount DESC"), literal_column("amount DESC", Integer)):
        shop.sent.clear()
        statement = select(order.id, order.amount).order_by(key, order.id).limit(4)
        with shop.session() as session, pytest.raises(UnsupportedShardQuery, match="SQL text"):
            session.execute(statement)
        assert shop.sent == []


def test_order_by_a_row_value_is_refused_before_any_sql(shop: Setup) -> None:
    """ORDER BY tuple_(a, b) across shards is refused, naming the columns to list instead."""
    order = shop.schema.Order
    shop.sent.clear()
    statement = select(order.id).order_by(tuple_(order.status, order.amount).desc())
    with shop.session() as session, pytest.raises(UnsupportedShardQuery, match="row value"):
        session.execute(statement)
    assert shop.sent == []


def test_group_by_a_row_value_is_refused_before_any_sql(shop: Setup) -> None:
    """GROUP BY tuple_(a, b) across shards is refused, naming group_by(a, b) instead."""
    order = shop.schema.Order
    shop.sent.clear()
    statement = select(func.count()).group_by(tuple_(order.status, order.amount))
    with (
        shop.session() as session,
        pytest.raises(UnsupportedShardQuery, match=r"group_by\(.*status.*amount"),
    ):
        session.execute(statement.select_from(order))
    assert shop.sent == []


def test_division_on_a_dialect_without_known_rules_is_refused(shop: Setup) -> None:
    """A merge for a dialect whose division rules are unknown refuses the division."""
    order = shop.schema.Order
    with pytest.raises(UnsupportedShardQuery, match="division on oracle"):
        MergePlan(select(func.sum(order.amount) / func.count()).select_from(order), "oracle")


def test_division_by_zero_raises_on_postgresql(shop: Setup) -> None:
    """A divisor that is 0 only once merged: PostgreSQL's error, NULL elsewhere (as the
    unsharded table gives)."""
    order = shop.schema.Order
    statement = select(func.sum(order.amount) / (func.count() - 40)).select_from(order)
    with shop.session() as session:
        if shop.name.startswith("postgresql"):
            with pytest.raises(MergedDivisionByZero, match="division by zero"):
                session.execute(statement).all()
        else:
            rows: list[Any] = [tuple(row) for row in session.execute(statement)]
            assert rows == [(None,)]


def test_a_source_never_computes_a_merged_division(shop: Setup) -> None:
    """sum(x) / (count() - 20): a database holding 20 rows would divide by zero; merged, the
    divisor is 20 and the row equals one table's."""
    got, twin = _both(
        shop,
        lambda m: select(func.sum(m.amount) / (func.count() - 20)).select_from(m),
    )
    assert got == twin and len(got) == 1


_ORDER_PARTS = st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=3)
_VALUE = st.one_of(st.none(), st.integers(-3, 3))


def _sql_compare(order: list[tuple[bool, bool]]) -> Any:
    """ORDER BY as SQL defines it, one comparison at a time (the reference)."""

    def compare(a: tuple[Any, ...], b: tuple[Any, ...]) -> int:
        for (descending, nulls_first), x, y in zip(order, a, b):
            if x == y:
                continue
            if x is None or y is None:
                return (-1 if x is None else 1) * (1 if nulls_first else -1)
            return (-1 if x < y else 1) * (-1 if descending else 1)
        return 0

    return compare


@given(order=_ORDER_PARTS, data=st.data())
def test_sort_key_orders_rows_as_sql_does(order: list[tuple[bool, bool]], data: Any) -> None:
    """sort_key's (key, reverse) sorts and heap-merges rows as ORDER BY does, NULLs included."""
    rows = data.draw(st.lists(st.tuples(*[_VALUE for _ in order]), max_size=30))
    key, reverse = sort_key([(itemgetter(i), d, n) for i, (d, n) in enumerate(order)])
    expected = sorted(rows, key=cmp_to_key(_sql_compare(order)))
    assert sorted(rows, key=key, reverse=reverse) == expected
    parts = [sorted(rows[i::3], key=cmp_to_key(_sql_compare(order))) for i in range(3)]
    assert list(heapq.merge(*parts, key=key, reverse=reverse)) == expected


def _filtered(m: Any) -> Any:
    """Filtered aggregates per group, in HAVING and ORDER BY, and divided."""
    large = m.amount > 5
    return (
        select(
            m.status,
            func.count().filter(large),
            func.sum(m.amount).filter(large),
            func.avg(m.amount).filter(m.user_id > 3),
            func.min(m.amount).filter(m.amount > 2),
            func.max(m.status).filter(m.amount > 2),
            func.sum(m.amount).filter(large) / func.count().filter(large),
            # eighths typed Numeric(10, 2): read to two decimals once, from the whole sum
            func.sum(type_coerce(cast(m.amount, Float) / 8, Numeric(10, 2))).filter(m.id > 0),
        )
        .group_by(m.status)
        .having(func.sum(m.amount).filter(m.amount > 1) > 10)
        .order_by(func.max(m.amount).filter(m.amount < 9).desc(), m.status)
    )


def _filtered_overall(m: Any) -> Any:
    return select(
        func.count().filter(m.amount > 5), func.avg(m.amount).filter(m.amount < 3), func.count()
    )


def test_aggregates_with_filter_merge_as_one_table_computes_them(shop: Setup) -> None:
    """count/sum/avg/min/max with FILTER, per group and overall, equal one table's (MariaDB
    has no FILTER: there the sharded statement fails as the plain one does)."""
    if shop.name.startswith("mysql"):
        for model in (shop.schema.OrderTwin, shop.schema.Order):
            with shop.session() as session, pytest.raises(ShardOperationError) as info:
                session.execute(_filtered(model))
            assert "1064" in str(info.value)  # MariaDB's syntax error, at FILTER
        return
    for build in (_filtered, _filtered_overall):
        got, twin = _both(shop, build)
        assert got == twin and got


def test_filter_of_distinct_values_is_refused_before_any_sql(shop: Setup) -> None:
    """count(DISTINCT x) FILTER (...) is refused, naming FILTER, before any SQL runs: the
    sources would send the values of rows the filter drops."""
    order = shop.schema.Order
    shop.sent.clear()
    statement = select(func.count(distinct(order.status)).filter(order.amount > 3))
    with shop.session() as session, pytest.raises(UnsupportedShardQuery, match="FILTER"):
        session.execute(statement)
    assert shop.sent == []


def _float_columns() -> dict[str, Any]:
    return {
        "d": mapped_column(Double),
        "f": mapped_column(Float),
        "r": mapped_column(sa.REAL),
        "n": mapped_column(Numeric(30, 20, asdecimal=False)),
        "tag": mapped_column(String(4)),
    }


def _float_rows() -> list[dict[str, Any]]:
    rng = random.Random(1208)
    return [
        {
            "user_id": rng.randrange(1, 40),
            "tag": "xyz"[i % 3],
            "d": rng.choice([0.0, -0.0, 0.1, 0.30000000000000004, 0.3, 1e300, 2.5, None]),
            "f": rng.choice([0.0, -0.0, 0.1, 0.10000001, 0.1234567, 0.12345671, None]),
            "r": rng.choice([0.1, 0.10000001, 0.2, -0.0, 0.0, None]),
            "n": rng.choice(
                [Decimal("0.1"), Decimal("0.10000000000000000001"), Decimal("2"), None]
            ),
        }
        for i in range(80)
    ]


floats = twin_world_fixture("distinct_floats", _float_columns, _float_rows)


def test_stored_floats_hold_what_count_distinct_must_match(floats: TwinWorld) -> None:
    """Premise: PostgreSQL keeps -0.0 beside 0.0 and calls them one value (SQLite and
    MariaDB read both back as 0.0)."""
    model = floats.Twin
    with floats.session() as session:
        zeros = session.scalars(select(model.d).where(model.d == 0)).all()
        distinct_zeros = session.scalar(select(func.count(distinct(model.d))).where(model.d == 0))
    both = floats.backend == "postgresql"
    assert {str(z) for z in zeros} == ({"0.0", "-0.0"} if both else {"0.0"})
    assert distinct_zeros == 1


@pytest.mark.parametrize(
    "build",
    [
        lambda M: select(func.count(distinct(M.d))),
        lambda M: select(M.tag, func.count(distinct(M.d))).group_by(M.tag),
        lambda M: select(func.count(distinct(M.f))),
        lambda M: select(func.count(distinct(M.r))),
        lambda M: select(func.count(distinct(M.n))),
        lambda M: select(func.count(distinct(cast(M.n, Double)))),
        lambda M: select(func.count(distinct(M.d * 2)), func.count(distinct(M.d / 3))),
    ],
    ids=["double", "grouped", "float", "real", "numeric-read-as-float", "cast", "arithmetic"],
)
def test_count_distinct_of_floats_matches_the_twin(floats: TwinWorld, build: Any) -> None:
    """count(DISTINCT x) of floating-point x counts what one table counts."""
    floats.exact(build)


def test_count_distinct_counts_postgresql_nans_once(floats: TwinWorld) -> None:
    """PostgreSQL calls NaN equal to NaN: count(DISTINCT) over sources counts it once."""
    if floats.backend == "mysql":
        pytest.skip("MariaDB has no NaN")
    nan = literal(float("nan"), Double)
    floats.exact(lambda M: select(func.count(distinct(func.coalesce(M.d, nan)))))
