"""Merged expressions over dates and times: the unsharded twin's answer, or a refusal
before any SQL where Python's date arithmetic is not the database's."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import (
    BigInteger,
    Date,
    DateTime,
    Integer,
    Interval,
    Numeric,
    String,
    Time,
    case,
    func,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from snowshard import Layout, Snowflake
from snowshard.orm import snowflake_pk
from snowshard.sharding import (
    Sharded,
    ShardedSession,
    Shards,
    UnsupportedShardQuery,
    create_all,
)
from snowshard.sharding.temporal import is_temporal
from tests.backends import DatabaseFactory
from tests.conftest import _BACKEND_PARAMS

IDS = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=3)


@dataclass
class World:
    """One backend's events and twin; ``session()`` opens a session over both databases."""

    backend: str
    Event: Any
    Twin: Any
    session: Callable[[], ShardedSession]
    sent: list[str]


def _declare() -> tuple[Any, Any, Any]:
    class Base(DeclarativeBase):
        pass

    class Event(Sharded, Base):
        __tablename__ = "events"
        __shards__ = Shards(4, key=("id", "user_id"), databases={"a": range(2), "b": range(2, 4)})
        id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger)
        at: Mapped[dt.datetime | None] = mapped_column(DateTime)
        day: Mapped[dt.date | None] = mapped_column(Date)
        tag: Mapped[str | None] = mapped_column(String(8))

    class EventTwin(Base):
        __tablename__ = "events_twin"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        user_id: Mapped[int] = mapped_column(BigInteger)
        at: Mapped[dt.datetime | None] = mapped_column(DateTime)
        day: Mapped[dt.date | None] = mapped_column(Date)
        tag: Mapped[str | None] = mapped_column(String(8))

    return Base, Event, EventTwin


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(1129)
    rows = []
    for i in range(60):
        user = rng.randrange(1, 40)
        at = None
        if i % 13:
            at = dt.datetime(2024, 1, 1) + dt.timedelta(seconds=rng.randrange(86400 * 400))
        day = None if at is None or i % 7 == 0 else at.date()
        tag = ("x", "y", "z", None)[i % 4]
        row_id = IDS.next_id(gene=user)
        rows.append({"id": row_id, "user_id": user, "at": at, "day": day, "tag": tag})
    return rows


@pytest.fixture(scope="module", params=_BACKEND_PARAMS)
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    """Events over two databases of each backend, and their unsharded twin (read only)."""
    factory = DatabaseFactory.for_request(request, tmp_path_factory.mktemp("temporal"))
    try:
        base, event, twin = _declare()
        engines = [factory.engine(url) for url in factory(request.param, 3)]
        databases = {"a": engines[1], "b": engines[2]}
        sent: list[str] = []

        def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
            sent.append(statement)

        for engine in engines:
            sa.event.listen(engine, "before_cursor_execute", record)
        create_all(base.metadata, bind=engines[0], databases=databases)
        session = partial(ShardedSession, engines[0], databases=databases)
        found = World(request.param, event, twin, session, sent)
        with found.session() as session:
            for row in _rows():
                session.add_all([event(**row), twin(**row)])
            session.commit()
        yield found
    finally:
        factory.cleanup()


def _exact(rows: Any) -> list[tuple[Any, ...]]:
    """Rows as (type name, text) pairs, sorted."""
    return sorted(tuple((type(v).__name__, str(v)) for v in row) for row in rows)


def _same_as_twin(world: World, build: Any) -> list[tuple[Any, ...]]:
    with world.session() as session:
        got = _exact(session.execute(build(world.Event)))
        twin = _exact(session.execute(build(world.Twin)))
    assert got == twin
    return got


def _refused(world: World, build: Any, match: str) -> None:
    world.sent.clear()
    with world.session() as session, pytest.raises(UnsupportedShardQuery, match=match):
        session.execute(build(world.Event))
    assert world.sent == []


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
    assert is_temporal(type_) is expected


def test_min_max_and_comparisons_match_the_twin(world: World) -> None:
    """MIN/MAX of dates and timestamps, compared in HAVING and columns, equal one table's."""
    for build in (
        lambda m: select(m.tag, func.min(m.at), func.max(m.day)).group_by(m.tag),
        lambda m: select(m.tag, func.max(m.day) == func.min(m.day)).group_by(m.tag),
        lambda m: select(m.tag)
        .group_by(m.tag)
        .having(func.max(m.day) > dt.date(2025, 1, 1)),
    ):
        assert _same_as_twin(world, build)


def test_date_minus_date_is_refused(world: World) -> None:
    """max(day) - min(day) is days on PostgreSQL, a number on MariaDB, years on SQLite:
    refused before any SQL, where the merge gave a timedelta."""
    _refused(world, lambda m: select(func.max(m.day) - func.min(m.day)), "dates and times")


def test_timestamp_plus_interval_is_refused(world: World) -> None:
    """min(at) + interval is refused (MariaDB adds numbers; PostgreSQL adds calendar days)."""
    build = lambda m: select(func.min(m.at) + dt.timedelta(days=1))  # noqa: E731
    _refused(world, build, "dates and times")


def test_elapsed_time_is_merged_on_postgresql_only(world: World) -> None:
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
            assert _same_as_twin(world, build)
        else:
            _refused(world, build, "timestamp - timestamp on PostgreSQL")


def test_case_of_dates_with_a_bound_date(world: World) -> None:
    """CASE giving max(day) or a bound date: the twin's date on PostgreSQL; refused on
    MariaDB (which gives text) and SQLite."""

    def build(m: Any) -> Any:
        return select(case((func.count() > 3, func.max(m.day)), else_=dt.date(2000, 1, 1)))

    if world.backend == "postgresql":
        (row,) = _same_as_twin(world, build)
        assert row[0][0] == "date"
    else:
        _refused(world, build, "CASE and COALESCE giving dates")


def test_coalesce_of_timestamps(world: World) -> None:
    """COALESCE(max(at), min(at)) per group equals the twin's on PostgreSQL and MariaDB;
    refused on SQLite (whose values are text)."""

    def build(m: Any) -> Any:
        return select(m.tag, func.coalesce(func.max(m.at), func.min(m.at))).group_by(m.tag)

    if world.backend == "sqlite":
        _refused(world, build, "SQLite keeps them as text")
    else:
        assert len(_same_as_twin(world, build)) == 4
