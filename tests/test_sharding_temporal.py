"""Merged expressions over dates and times: the unsharded twin's answer, or a refusal
before any SQL where Python's date arithmetic is not the database's."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pytest
from sqlalchemy import Date, DateTime, Integer, Interval, Numeric, String, Time, case, func, select
from sqlalchemy.orm import mapped_column
from sqlalchemy.types import TypeDecorator

from snowshard.sharding.temporal import is_temporal
from tests.twin_world import TwinWorld, twin_world_fixture


def _columns() -> dict[str, Any]:
    return {
        "at": mapped_column(DateTime),
        "day": mapped_column(Date),
        "tag": mapped_column(String(8)),
    }


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(1129)
    rows = []
    for i in range(60):
        at = None
        if i % 13:
            at = dt.datetime(2024, 1, 1) + dt.timedelta(seconds=rng.randrange(86400 * 400))
        day = None if at is None or i % 7 == 0 else at.date()
        tag = ("x", "y", "z", None)[i % 4]
        rows.append({"user_id": rng.randrange(1, 40), "at": at, "day": day, "tag": tag})
    return rows


world = twin_world_fixture("events", _columns, _rows)


class _Day(TypeDecorator[dt.date]):
    impl = Date
    cache_ok = True


@pytest.mark.parametrize(
    ("type_", "expected"),
    [
        (Date(), True),
        (DateTime(timezone=True), True),
        (Time(), True),
        (Interval(), True),
        (_Day(), True),
        (Integer(), False),
        (Numeric(10, 2), False),
        (String(), False),
    ],
)
def test_is_temporal(type_: Any, expected: bool) -> None:
    """Dates, times, timestamps, intervals and decorators over them are temporal."""
    assert is_temporal(type_, "postgresql") is expected


def test_a_variant_is_temporal_where_it_is_a_date() -> None:
    """A type with a string variant for one dialect is temporal on the others only."""
    stored_as_text = DateTime().with_variant(String(30), "sqlite")
    assert is_temporal(stored_as_text, "postgresql")
    assert not is_temporal(stored_as_text, "sqlite")


def test_min_max_and_comparisons_match_the_twin(world: TwinWorld) -> None:
    """MIN/MAX of dates and timestamps, compared in HAVING and columns, equal one table's."""
    for build in (
        lambda m: select(m.tag, func.min(m.at), func.max(m.day)).group_by(m.tag),
        lambda m: select(m.tag, func.max(m.day) == func.min(m.day)).group_by(m.tag),
        lambda m: select(m.tag)
        .group_by(m.tag)
        .having(func.max(m.day) > dt.date(2025, 1, 1)),
    ):
        assert world.exact(build)


def test_date_minus_date_is_refused(world: TwinWorld) -> None:
    """max(day) - min(day) is days on PostgreSQL, a number on MariaDB, years on SQLite:
    refused before any SQL, where the merge gave a timedelta."""
    world.refused(lambda m: select(func.max(m.day) - func.min(m.day)), "dates and times")


def test_timestamp_plus_interval_is_refused(world: TwinWorld) -> None:
    """min(at) + interval is refused (MariaDB adds numbers; PostgreSQL adds calendar days)."""
    build = lambda m: select(func.min(m.at) + dt.timedelta(days=1))  # noqa: E731
    world.refused(build, "dates and times")


def test_elapsed_time_is_merged_on_postgresql_only(world: TwinWorld) -> None:
    """max(at) - min(at) per group, and in HAVING, is the twin's interval on PostgreSQL;
    refused elsewhere (the merge kept groups MariaDB and SQLite do not)."""
    builds = (
        lambda m: select(m.tag, func.max(m.at) - func.min(m.at)).group_by(m.tag),
        lambda m: select(m.tag)
        .group_by(m.tag)
        .having(func.max(m.at) - func.min(m.at) > dt.timedelta(days=310)),
    )
    for build in builds:
        if world.backend == "postgresql":
            assert world.exact(build)
        else:
            world.refused(build, "timestamp - timestamp on PostgreSQL")


def test_case_of_dates_with_a_bound_date(world: TwinWorld) -> None:
    """CASE giving max(day) or a bound date: the twin's date on PostgreSQL; refused on
    MariaDB (which gives text) and SQLite."""

    def build(m: Any) -> Any:
        return select(case((func.count() > 3, func.max(m.day)), else_=dt.date(2000, 1, 1)))

    if world.backend == "postgresql":
        (row,) = world.exact(build)
        assert row[0][0] == "date"
    else:
        world.refused(build, "CASE and COALESCE giving dates")


def test_coalesce_of_timestamps(world: TwinWorld) -> None:
    """COALESCE(max(at), min(at)) per group equals the twin's on PostgreSQL and MariaDB;
    refused on SQLite (whose values are text)."""

    def build(m: Any) -> Any:
        return select(m.tag, func.coalesce(func.max(m.at), func.min(m.at))).group_by(m.tag)

    if world.backend == "sqlite":
        world.refused(build, "SQLite keeps them as text")
    else:
        assert len(world.exact(build)) == 4


def test_date_compared_with_text_is_refused(world: TwinWorld) -> None:
    """HAVING max(day) > '2024-12-01' is refused before any SQL (the merge would compare a
    date with a str: a TypeError on SQLite, where one table compares text)."""

    def build(m: Any) -> Any:
        return select(m.tag).group_by(m.tag).having(func.max(m.day) > "2024-12-01")

    world.refused(build, "compares a date or time with str")


_MIXED = {
    "date > datetime": (
        lambda m: func.max(m.day) > dt.datetime(2024, 12, 1, 12), "a date with a date and time"
    ),
    "timestamp > aware": (
        lambda m: func.max(m.at) > dt.datetime(2024, 12, 1, tzinfo=dt.timezone.utc),
        "a date and time with an aware date and time",
    ),
    "date >= timestamp": (lambda m: func.max(m.day) >= func.max(m.at), "a date with a date"),
    "timestamp > date": (lambda m: func.min(m.at) < dt.date(2024, 6, 1), "a date with a date"),
}


@pytest.mark.parametrize("name", list(_MIXED))
def test_dates_and_times_of_two_kinds_compared_are_refused(world: TwinWorld, name: str) -> None:
    """HAVING comparing a date with a timestamp, or a naive with an aware timestamp, is
    refused before any SQL (the database converts one side; the merge raised a bare
    TypeError after running the statement)."""
    having, message = _MIXED[name]
    world.refused(lambda m: select(m.tag).group_by(m.tag).having(having(m)), message)


def test_coalesce_of_a_date_and_a_timestamp_is_refused(world: TwinWorld) -> None:
    """COALESCE(max(day), max(at)) is a timestamp in the database: refused (the merge
    handed out a date where the twin gives a timestamp, on PostgreSQL and MariaDB)."""
    world.refused(
        lambda m: select(m.tag, func.coalesce(func.max(m.day), func.max(m.at))).group_by(m.tag),
        "chooses among a date and a date and time",
    )


def _span_columns() -> dict[str, Any]:
    return {"span": mapped_column(Interval), "tag": mapped_column(String(8))}


def _span_rows() -> list[dict[str, Any]]:
    rng = random.Random(1132)
    return [
        {
            "user_id": rng.randrange(1, 40),
            "span": dt.timedelta(hours=rng.randrange(80), seconds=rng.randrange(3600)),
            "tag": "xyz"[i % 3],
        }
        for i in range(40)
    ]


spans = twin_world_fixture(
    "spans", _span_columns, _span_rows, [pytest.param("postgresql", marks=pytest.mark.postgres)]
)
"""Intervals (PostgreSQL's own type; elsewhere SQLAlchemy emulates it) and their twin."""


@pytest.mark.postgres
def test_sum_min_max_of_intervals_match_the_twin(spans: TwinWorld) -> None:
    """SUM, MIN and MAX of an interval per group are the twin's on PostgreSQL."""

    def totals(m: Any) -> Any:
        return select(m.tag, func.sum(m.span), func.min(m.span), func.max(m.span)).group_by(m.tag)

    assert len(spans.exact(totals)) == 3


@pytest.mark.postgres
def test_avg_of_an_interval_is_refused_on_postgresql(spans: TwinWorld) -> None:
    """AVG of an interval is refused before any SQL: PostgreSQL divides an interval's days
    and time apart, which dividing a summed timedelta does not reproduce (was TypeError)."""
    spans.refused(lambda m: select(m.tag, func.avg(m.span)).group_by(m.tag), "AVG of an interval")
