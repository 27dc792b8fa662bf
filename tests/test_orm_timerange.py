"""Time ranges on snowflake keys and the creation time of an ID in SQL, on every backend.

The PostgreSQL and MariaDB sessions run in a +05:30 time zone (unless a test says
otherwise), so a result that depended on the session time zone would be off by 5.5 hours.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mssql
from sqlalchemy.engine import Engine, make_url

from snowshard import Layout, ManualClock, Snowflake, SnowshardError
from snowshard.orm import (
    NaiveDatetimeError,
    SnowflakeType,
    TimeRangeError,
    id_between,
    id_since,
    id_time,
    id_unix_ms,
)
from tests.backends import DatabaseFactory

UTC = timezone.utc
SEED_ID = 152075078181383514  # default layout: 2021-02-23 15:32:04.056 UTC
SEED_TIME = datetime(2021, 2, 23, 15, 32, 4, 56000, tzinfo=UTC)
DAY = datetime(2024, 5, 17, tzinfo=UTC)
LAYOUT = Layout()
LAYOUTS = {
    "default": Layout(),
    "tick-10ms": Layout.sonyflake(),
    "tick-1s": Layout.js_safe(),
    "twitter": Layout.twitter(),
    "gene-bits": Layout(worker_bits=6, gene_bits=4, epoch=datetime(2023, 1, 1, tzinfo=UTC)),
    "no-shift": Layout(timestamp_bits=41, worker_bits=0, sequence_bits=0, epoch=0),
}

metadata = sa.MetaData()
events = sa.Table(
    "events",
    metadata,
    sa.Column("id", SnowflakeType(), primary_key=True, autoincrement=False),
    sa.Column("sid", SnowflakeType(as_string=True)),
)


def ms(when: datetime) -> int:
    return int((when - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(milliseconds=1))


def connect_args(url: str, *, pg_zone: str = "Asia/Kolkata") -> dict[str, Any]:
    backend = make_url(url).get_backend_name()
    if backend == "postgresql":
        return {"options": f"-c TimeZone={pg_zone}"}
    if backend == "mysql":
        return {"init_command": "SET time_zone = '+05:30'"}
    return {}


@pytest.fixture
def make_engine(db_url: str, database_factory: DatabaseFactory) -> Callable[..., Engine]:
    def make(**kw: str) -> Engine:
        engine = database_factory.engine(db_url, connect_args=connect_args(db_url, **kw))
        metadata.create_all(engine)
        return engine

    return make


@pytest.fixture
def engine(make_engine: Callable[..., Engine]) -> Engine:
    return make_engine()


def issue(layout: Layout, times: Sequence[datetime], per_time: int = 1) -> list[int]:
    """IDs a generator on a manual clock issues at each of ``times`` (sorted; ``per_time`` each)."""
    clock = ManualClock(ms(times[0]))
    worker = min(5, layout.max_worker)
    generator = Snowflake(layout, worker=worker, clock=clock, sleep=clock.sleep)
    ids: list[int] = []
    for when in sorted(times):
        clock.set(ms(when))
        ids.extend(generator.next_id() for _ in range(per_time))
    return ids


def insert(engine: Engine, ids: Sequence[int]) -> None:
    with engine.begin() as conn:
        conn.execute(events.insert(), [{"id": i, "sid": i} for i in ids])


def select_all(engine: Engine, statement: Any) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(statement).all())


# --------------------------------------------------------------------------- id_unix_ms / id_time


def test_seed_id_unix_ms_in_sql(engine: Engine) -> None:
    """SQL computes 1614094324056 ms from the seed ID 152075078181383514."""
    insert(engine, [SEED_ID])
    rows = select_all(engine, sa.select(id_unix_ms(events.c.id, LAYOUT)))
    assert rows == [(1614094324056,)]


def test_seed_id_time_in_sql_is_utc(engine: Engine) -> None:
    """id_time of the seed ID is 2021-02-23 15:32:04.056 UTC, whatever the session zone."""
    insert(engine, [SEED_ID])
    (value,) = select_all(engine, sa.select(id_time(events.c.id, LAYOUT)))[0]
    assert value == SEED_TIME
    assert value.utcoffset() == timedelta(0)


@pytest.mark.parametrize("name", LAYOUTS)
def test_id_unix_ms_matches_layout_parse(engine: Engine, name: str) -> None:
    """For several layouts, SQL's unix ms of each ID equals ``layout.parse(id).unix_ms``."""
    layout = LAYOUTS[name]
    times = [datetime(2024, 2, 29, 23, 59, 59, 999000, tzinfo=UTC) + timedelta(hours=h * 37,
             milliseconds=h * 7) for h in range(20)]
    ids = issue(layout, times)
    insert(engine, ids)
    rows = select_all(engine, sa.select(events.c.id, id_unix_ms(events.c.id, layout)))
    assert sorted(rows) == sorted((i, layout.parse(i).unix_ms) for i in ids)


@pytest.mark.parametrize("name", LAYOUTS)
def test_id_time_matches_layout_parse(engine: Engine, name: str) -> None:
    """For several layouts, SQL's id_time of each ID equals ``layout.parse(id).time``."""
    layout = LAYOUTS[name]
    times = [datetime(2031, 12, 31, 22, 0, 0, 1000, tzinfo=UTC) + timedelta(minutes=m * 71,
             milliseconds=m * 13) for m in range(20)]
    ids = issue(layout, times)
    insert(engine, ids)
    rows = select_all(engine, sa.select(events.c.id, id_time(events.c.id, layout)))
    assert sorted(rows) == sorted((i, layout.parse(i).time) for i in ids)


def test_id_unix_ms_of_string_ids_is_an_int(engine: Engine) -> None:
    """On an as_string column id_unix_ms still yields an integer, not a str."""
    insert(engine, [SEED_ID])
    rows = select_all(engine, sa.select(events.c.sid, id_unix_ms(events.c.sid, LAYOUT)))
    assert rows == [(str(SEED_ID), 1614094324056)]


def test_where_id_time_at_or_after(engine: Engine) -> None:
    """``WHERE id_time(id) >= x`` keeps exactly the IDs issued at or after x."""
    times = [DAY + timedelta(minutes=m) for m in range(10)]
    ids = issue(LAYOUT, times, per_time=2)
    insert(engine, ids)
    cut = DAY + timedelta(minutes=4)
    got = select_all(engine, sa.select(events.c.id).where(id_time(events.c.id, LAYOUT) >= cut))
    assert sorted(i for (i,) in got) == [i for i in ids if LAYOUT.parse(i).time >= cut]
    assert len(got) == 12


def test_where_id_time_with_other_zone_datetime(engine: Engine) -> None:
    """A bound aware datetime in another zone is compared as the same instant."""
    insert(engine, [SEED_ID])
    kolkata = timezone(timedelta(hours=5, minutes=30))
    same = SEED_TIME.astimezone(kolkata)
    later = same + timedelta(milliseconds=1)
    assert select_all(engine, sa.select(sa.func.count()).where(
        id_time(events.c.id, LAYOUT) == same)) == [(1,)]
    assert select_all(engine, sa.select(sa.func.count()).where(
        id_time(events.c.id, LAYOUT) < later)) == [(1,)]


def test_group_by_hour_of_id_time(make_engine: Callable[..., Engine]) -> None:
    """GROUP BY the hour of id_time counts the rows issued in each hour."""
    engine = make_engine(pg_zone="UTC")  # PostgreSQL's extract() follows TimeZone
    times = [DAY + timedelta(hours=h, minutes=m) for h, m in
             [(10, 0), (10, 59), (10, 30), (11, 0), (11, 1), (13, 59), (13, 0), (13, 2), (13, 3)]]
    insert(engine, issue(LAYOUT, times))
    hour = sa.extract("hour", id_time(events.c.id, LAYOUT))
    rows = select_all(engine, sa.select(hour, sa.func.count()).group_by(hour).order_by(hour))
    assert [(int(h), n) for h, n in rows] == [(10, 3), (11, 2), (13, 4)]


def test_group_by_id_unix_ms_bucket(engine: Engine) -> None:
    """GROUP BY an integer bucket of id_unix_ms (one per minute) works on every backend."""
    times = [DAY + timedelta(minutes=m, seconds=s) for m, s in [(0, 1), (0, 59), (2, 0)]]
    insert(engine, issue(LAYOUT, times, per_time=3))
    bucket = id_unix_ms(events.c.id, LAYOUT) // 60_000
    rows = select_all(engine, sa.select(bucket, sa.func.count()).group_by(bucket).order_by(bucket))
    first = ms(DAY) // 60_000
    assert [(int(b), n) for b, n in rows] == [(first, 6), (first + 2, 3)]


def test_id_time_naive_comparison_refused(engine: Engine) -> None:
    """Comparing id_time with a naive datetime raises NaiveDatetimeError before any SQL."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        sent.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    naive = datetime(2021, 2, 23, 15, 32, 4)
    with engine.connect() as conn, pytest.raises(NaiveDatetimeError, match="naive"):
        conn.execute(sa.select(events.c.id).where(id_time(events.c.id, LAYOUT) >= naive))
    assert not any("events" in s for s in sent)


def test_statement_cache_tells_layouts_apart() -> None:
    """id_time and id_unix_ms of different layouts have different statement cache keys."""

    def key(layout: Layout) -> Any:
        statement = sa.select(id_time(events.c.id, layout), id_unix_ms(events.c.id, layout))
        return statement._generate_cache_key()

    assert key(Layout()) == key(Layout())
    assert key(Layout()) != key(LAYOUTS["tick-10ms"])
    assert key(Layout()) != key(Layout(epoch=0))


def test_id_time_unsupported_dialect() -> None:
    """id_time on a dialect without an implementation is a CompileError naming it."""
    dialect = mssql.dialect()  # type: ignore[no-untyped-call]
    with pytest.raises(sa.exc.CompileError, match="mssql"):
        sa.select(id_time(events.c.id, LAYOUT)).compile(dialect=dialect)


# --------------------------------------------------------------------------- id_between / id_since


def test_id_between_selects_exactly_the_window(engine: Engine) -> None:
    """id_between(start, end) returns the rows issued in [start, end), boundaries included."""
    start, end = DAY + timedelta(minutes=3), DAY + timedelta(minutes=6)
    times = [DAY + timedelta(minutes=m) for m in range(10)] + [
        start - timedelta(milliseconds=1), end - timedelta(milliseconds=1),
        end, end + timedelta(milliseconds=1),
    ]
    edges = [  # the extreme IDs of the ticks around both bounds
        LAYOUT.max_id(start - timedelta(milliseconds=1)), LAYOUT.min_id(start),
        LAYOUT.max_id(end - timedelta(milliseconds=1)), LAYOUT.min_id(end),
    ]
    ids = sorted(issue(LAYOUT, times, per_time=3) + edges)
    insert(engine, ids)
    got = select_all(engine, sa.select(events.c.id).where(
        id_between(events.c.id, LAYOUT, start, end)).order_by(events.c.id))
    expected = [i for i in ids if start <= LAYOUT.parse(i).time < end]
    assert [i for (i,) in got] == expected
    assert len(expected) == 3 * 4 + 2  # minutes 3, 4, 5, end - 1 ms, and two edge IDs


def test_id_between_on_string_ids(engine: Engine) -> None:
    """id_between on an as_string column selects the same window."""
    ids = issue(LAYOUT, [DAY + timedelta(seconds=s) for s in range(6)])
    insert(engine, ids)
    got = select_all(engine, sa.select(events.c.sid).where(id_between(
        events.c.sid, LAYOUT, DAY + timedelta(seconds=2), DAY + timedelta(seconds=4))))
    assert sorted(got) == [(str(ids[2]),), (str(ids[3]),)]


def test_id_between_accepts_unix_ms_and_any_zone(engine: Engine) -> None:
    """Bounds given as Unix ms or as aware datetimes in another zone select the same rows."""
    ids = issue(LAYOUT, [DAY + timedelta(seconds=s) for s in range(6)])
    insert(engine, ids)
    zone = timezone(timedelta(hours=-7))
    by_ms = id_between(events.c.id, LAYOUT, ms(DAY) + 1000, ms(DAY) + 3000)
    by_zone = id_between(events.c.id, LAYOUT, (DAY + timedelta(seconds=1)).astimezone(zone),
                         (DAY + timedelta(seconds=3)).astimezone(zone))
    assert select_all(engine, sa.select(events.c.id).where(by_ms).order_by(events.c.id)) == [
        (ids[1],), (ids[2],)]
    assert select_all(engine, sa.select(events.c.id).where(by_zone).order_by(events.c.id)) == [
        (ids[1],), (ids[2],)]


def test_id_since_selects_from_start(engine: Engine) -> None:
    """id_since(start) returns every row issued at or after start."""
    ids = issue(LAYOUT, [DAY + timedelta(hours=h) for h in range(5)], per_time=2)
    insert(engine, ids)
    got = select_all(engine, sa.select(events.c.id).where(
        id_since(events.c.id, LAYOUT, DAY + timedelta(hours=3))).order_by(events.c.id))
    assert [i for (i,) in got] == ids[6:]


def test_id_between_is_a_pk_range() -> None:
    """id_between compiles to ``id >= min_id(start) AND id < min_id(end)``."""
    start, end = DAY, DAY + timedelta(hours=1)
    clause = id_between(events.c.id, LAYOUT, start, end)
    compiled = clause.compile(compile_kwargs={"literal_binds": True})
    assert str(compiled) == (
        f"events.id >= {LAYOUT.min_id(start)} AND events.id < {LAYOUT.min_id(end)}"
    )


def test_id_between_clamps_times_before_the_epoch() -> None:
    """A start before the layout's epoch selects from ID 0 instead of failing."""
    clause = id_between(events.c.id, LAYOUT, datetime(2000, 1, 1, tzinfo=UTC), DAY)
    compiled = clause.compile(compile_kwargs={"literal_binds": True})
    assert str(compiled) == f"events.id >= 0 AND events.id < {LAYOUT.min_id(DAY)}"


def test_id_between_past_the_layouts_end() -> None:
    """An end past the layout's last tick drops the upper bound; a start past it selects none."""
    layout = Layout.js_safe()  # 32-bit seconds since 2020: ends in 2156
    far = datetime(2200, 1, 1, tzinfo=UTC)
    open_end = id_between(events.c.id, layout, DAY, far)
    assert str(open_end.compile(compile_kwargs={"literal_binds": True})) == (
        f"events.id >= {layout.min_id(DAY)}")
    nothing = id_between(events.c.id, layout, far, far + timedelta(days=1))
    assert str(nothing.compile(compile_kwargs={"literal_binds": True})) == "false"


@pytest.mark.parametrize(
    ("start", "end", "error", "match"),
    [
        pytest.param(datetime(2024, 1, 1), DAY, NaiveDatetimeError, "start .* naive",
                     id="naive-start"),
        pytest.param(DAY, datetime(2024, 6, 1), NaiveDatetimeError, "end .* naive",
                     id="naive-end"),
        pytest.param(DAY + timedelta(seconds=1), DAY, TimeRangeError, "after end",
                     id="start-after-end"),
        pytest.param(1.5, DAY, SnowshardError, "float", id="float-start"),
    ],
)
def test_id_between_refuses_bad_bounds(
    start: Any, end: Any, error: type[Exception], match: str
) -> None:
    """Naive datetimes, start after end and non-time bounds raise snowshard errors."""
    with pytest.raises(error, match=match):
        id_between(events.c.id, LAYOUT, start, end)


def test_id_since_refuses_naive_start() -> None:
    """id_since refuses a naive datetime too."""
    with pytest.raises(NaiveDatetimeError):
        id_since(events.c.id, LAYOUT, datetime(2024, 1, 1))


def test_time_errors_are_value_errors() -> None:
    """TimeRangeError and NaiveDatetimeError are SnowshardErrors and ValueErrors."""
    for error in (TimeRangeError, NaiveDatetimeError):
        assert issubclass(error, SnowshardError) and issubclass(error, ValueError)


def test_empty_range_is_allowed() -> None:
    """start == end is an empty range, not an error."""
    clause = id_between(events.c.id, LAYOUT, DAY, DAY)
    assert str(clause.compile(compile_kwargs={"literal_binds": True})) == (
        f"events.id >= {LAYOUT.min_id(DAY)} AND events.id < {LAYOUT.min_id(DAY)}")
