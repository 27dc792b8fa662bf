"""PostgreSQL intervals holding months, ordered, grouped and picked by a merge as
PostgreSQL compares them (a month of 30 days, a year of 360), as the unsharded twin."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Interval, String, func, select
from sqlalchemy.orm import mapped_column

from snowshard.sharding.intervals import interval_key
from tests.twin_world import TwinWorld, twin_world_fixture

pytestmark = pytest.mark.postgres

_DAYS = [1, 40, 100, 359, 360, 362, 364]


def _columns() -> dict[str, Any]:
    return {"span": mapped_column(Interval), "tag": mapped_column(String(4))}


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(1207)
    return [
        {"user_id": rng.randrange(1, 40), "tag": "xyz"[i % 3],
         "span": timedelta(days=rng.choice(_DAYS))}
        for i in range(60)
    ]  # fmt: skip


world = twin_world_fixture(
    "justified", _columns, _rows, [pytest.param("postgresql", marks=pytest.mark.postgres)]
)


@pytest.fixture(scope="module")
def spans(world: TwinWorld) -> Iterator[TwinWorld]:
    """``world`` with 362 days written as '1 year 2 days' (psycopg reads 367 days), 40 and
    100 days as '1 mon 10 days' and '3 mons 10 days', and every other 360 days as '1 year'
    (equal to 360 days for PostgreSQL), in every table."""
    for engine in world.engines:
        with engine.begin() as connection:
            for name in sa.inspect(connection).get_table_names():
                if name.startswith("justified"):
                    connection.exec_driver_sql(
                        f"UPDATE {name} SET span = justify_days(span) WHERE span IN "
                        "(interval '362 days', interval '40 days', interval '100 days') "
                        "OR (span = interval '360 days' AND id %% 2 = 0)"
                    )
    yield world


def test_months_are_read_as_psycopg_counts_them(spans: TwinWorld) -> None:
    """The premise: the twin holds '1 year 2 days', read as 367 days, which PostgreSQL
    orders before 364 days."""
    with spans.session() as session:
        twin = spans.Twin
        read = set(session.scalars(select(twin.span).order_by(twin.span).distinct()))
        assert timedelta(days=367) in read and timedelta(days=362) not in read
        first = session.scalars(
            select(twin.span).where(twin.span > timedelta(days=361)).order_by(twin.span)
        ).first()
    assert first == timedelta(days=367)


def test_rows_ordered_by_an_interval_match_the_twin(spans: TwinWorld) -> None:
    """ORDER BY an interval: the twin's order (the merge put 367 days after 364)."""
    build = lambda m: select(m.id, m.span).order_by(m.span.desc(), m.id).limit(40)  # noqa: E731
    assert len(spans.exact(build, ordered=True)) == 40


def test_intervals_grouped_and_counted_match_the_twin(spans: TwinWorld) -> None:
    """GROUP BY, DISTINCT and count(DISTINCT) of intervals: '1 year' and '360 days' are one
    value, as for the twin (the merge kept them apart)."""

    def counts(m: Any) -> Any:
        return select(func.count()).select_from(m).group_by(m.span)

    spans.exact(counts)
    spans.exact(lambda m: select(func.count(m.span.distinct())))
    with spans.session() as session:
        found = session.scalars(select(spans.Model.span).distinct()).all()
    assert len(found) == len(_DAYS)


@pytest.mark.parametrize("name", ["min", "max"])
def test_extremes_of_intervals_match_the_twin(spans: TwinWorld, name: str) -> None:
    """MIN/MAX of an interval per group, and grouped ORDER BY it: the twin's (the merge
    picked '1 year 2 days', read as 367, over 364 days)."""
    aggregate = getattr(func, name)

    def build(m: Any) -> Any:
        return select(m.tag, aggregate(m.span)).group_by(m.tag).order_by(aggregate(m.span), m.tag)

    spans.exact(build, ordered=True)


def test_only_postgresql_intervals_have_a_key() -> None:
    """The key is PostgreSQL's: other dialects' Interval is SQLAlchemy's emulation."""
    span = sa.column("span", Interval())
    assert interval_key(span, "postgresql") is not None
    assert interval_key(span, "mysql") is None and interval_key(span, "sqlite") is None
    assert interval_key(sa.column("n", sa.Integer()), "postgresql") is None


def test_sums_of_intervals_match_the_twin(spans: TwinWorld) -> None:
    """SUM of intervals holding months, per group and in all: the twin's (psycopg read each
    source's sum with its own years: 8 and 9 months as 510 days, 17 as 515)."""
    spans.exact(lambda m: select(m.tag, func.sum(m.span)).group_by(m.tag))
    spans.exact(lambda m: select(func.sum(m.span), func.sum(m.span).filter(m.tag == "x")))


_COMPARED = {
    "sum >": lambda m: func.sum(m.span) > timedelta(days=362),
    "max >=": lambda m: func.max(m.span) >= timedelta(days=361),
    "max ==": lambda m: func.max(m.span) == timedelta(days=360),
    "min <": lambda m: func.min(m.span) < timedelta(days=362),
    "coalesce >": lambda m: func.coalesce(func.max(m.span), timedelta(0)) > timedelta(days=361),
    "sum - max >": lambda m: func.sum(m.span) - func.max(m.span) > timedelta(days=361),
}


@pytest.mark.parametrize("name", list(_COMPARED))
def test_having_compares_intervals_as_postgresql(spans: TwinWorld, name: str) -> None:
    """HAVING over merged intervals keeps the twin's groups ('1 year' read as 365 days is
    360 for PostgreSQL; the merge compared what it read)."""
    having = _COMPARED[name]
    spans.exact(lambda m: select(m.user_id).group_by(m.user_id).having(having(m)))


def test_having_on_an_interval_key_compares_as_postgresql(spans: TwinWorld) -> None:
    """HAVING on a GROUP BY interval: the twin's groups (the merge kept '1 year')."""
    spans.exact(
        lambda m: select(func.count())
        .select_from(m)
        .group_by(m.span)
        .having(m.span > timedelta(days=361))
    )


def test_case_compares_intervals_as_postgresql(spans: TwinWorld) -> None:
    """CASE WHEN and CASE x WHEN over merged intervals: the twin's answers."""
    spans.exact(
        lambda m: select(
            m.user_id,
            sa.case((func.sum(m.span) > timedelta(days=362), "long"), else_="short"),
            sa.case(
                {timedelta(days=360): "year", timedelta(days=367): "more"},
                value=func.max(m.span), else_="other",
            ),
        ).group_by(m.user_id)
    )  # fmt: skip


def test_groups_ordered_by_a_sum_of_intervals_match_the_twin(spans: TwinWorld) -> None:
    """ORDER BY SUM of intervals: the twin's order (a sum of '1 year' came after 364 days)."""
    spans.exact(
        lambda m: select(m.user_id, func.sum(m.span))
        .group_by(m.user_id)
        .order_by(func.sum(m.span).desc(), m.user_id),
        ordered=True,
    )


def test_grouped_distinct_matches_intervals_as_postgresql(spans: TwinWorld) -> None:
    """DISTINCT of grouped interval sums keeps as many as the twin ('1 year' and '360 days'
    are one value; which spelling stays is the database's choice)."""
    with spans.session() as session:
        found = [
            session.scalars(select(func.sum(m.span)).group_by(m.user_id).distinct()).all()
            for m in (spans.Model, spans.Twin)
        ]
    assert len(found[0]) == len(found[1])


def test_an_interval_the_merge_cannot_compare_is_refused(spans: TwinWorld) -> None:
    """A CASE choosing among intervals, compared after the merge, is refused by name."""
    spans.refused(
        lambda m: select(m.tag).group_by(m.tag).having(
            sa.case((m.tag == "x", func.max(m.span)), else_=func.min(m.span))
            > timedelta(days=1)
        ),
        "only as GROUP BY keys, MIN, MAX, SUM",
    )
