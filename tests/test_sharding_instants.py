"""MariaDB TIMESTAMPs in merged queries, read in a session time zone whose daylight saving
time ends: merged by the instant each holds, as one table compares them, or refused."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import TIMESTAMP, String, func, select
from sqlalchemy.orm import Bundle, mapped_column

from snowshard.sharding import ShardedSession, create_all
from snowshard.sharding.instants import instant_key, is_instant
from tests.backends import DatabaseFactory
from tests.twin_world import IDS, TwinWorld, _models

pytestmark = pytest.mark.mysql

ZONE = "Snowshard/Fallback"
"""A time zone of the test servers: UTC+2 until 2024-10-27 01:00 UTC, then UTC+1, so the
local times 02:00-03:00 of that day name two instants each."""
_CHANGE = datetime(2024, 10, 27, 1, tzinfo=timezone.utc)


def _ensure_zone(connection: Any) -> None:
    """Define :data:`ZONE` on the server of ``connection`` (a DBAPI connection) once."""
    cursor = connection.cursor()
    try:
        cursor.execute("SELECT GET_LOCK('snowshard_test_zone', 30)")
        cursor.execute("SELECT 1 FROM mysql.time_zone_name WHERE Name = %s", (ZONE,))
        if cursor.fetchone() is None:
            cursor.execute("INSERT INTO mysql.time_zone (Use_leap_seconds) VALUES ('N')")
            cursor.execute("SELECT LAST_INSERT_ID()")
            (zone,) = cursor.fetchone()
            cursor.execute(
                "INSERT INTO mysql.time_zone_transition_type "
                "(Time_zone_id, Transition_type_id, `Offset`, Is_DST, Abbreviation) "
                "VALUES (%s, 0, 7200, 1, 'SDT'), (%s, 1, 3600, 0, 'SST')",
                (zone, zone),
            )
            cursor.execute(
                "INSERT INTO mysql.time_zone_transition "
                "(Time_zone_id, Transition_time, Transition_type_id) "
                "VALUES (%s, 0, 0), (%s, %s, 1)",
                (zone, zone, int(_CHANGE.timestamp())),
            )
            cursor.execute(
                "INSERT INTO mysql.time_zone_name (Name, Time_zone_id) VALUES (%s, %s)",
                (ZONE, zone),
            )
        connection.commit()
    finally:
        cursor.execute("SELECT RELEASE_LOCK('snowshard_test_zone')")
        cursor.close()


def _columns() -> dict[str, Any]:
    return {"at": mapped_column(TIMESTAMP(), nullable=True), "tag": mapped_column(String(4))}


def _instants() -> list[datetime | None]:
    """Instants every 20 minutes from 00:00 to 02:00 UTC (local 02:00 CEST to 03:00 CET:
    00:20 and 01:20 UTC both read as 02:20), each twice, and NULLs."""
    start = datetime(2024, 10, 27, tzinfo=timezone.utc)
    return [start + timedelta(minutes=20 * i) for i in range(7)] * 2 + [None, None]


@pytest.fixture(scope="module")
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TwinWorld]:
    """Rows at the instants of :func:`_instants` in a sharded model and its twin on
    MariaDB, written in UTC and read in :data:`ZONE`."""
    factory = DatabaseFactory.for_request(request, tmp_path_factory.mktemp("instants"))
    zone = ["+00:00"]

    def checkout(connection: Any, record: Any, proxy: Any) -> None:
        _ensure_zone(connection)
        cursor = connection.cursor()
        cursor.execute("SET time_zone = %s", (zone[0],))
        cursor.close()

    try:
        base, model, twin = _models("stamped", _columns)
        engines = [factory.engine(url) for url in factory("mysql", 3)]
        sent: list[str] = []

        def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
            sent.append(statement)

        for engine in engines:
            sa.event.listen(engine, "checkout", checkout)
            sa.event.listen(engine, "before_cursor_execute", record)
        databases = {"a": engines[1], "b": engines[2]}
        create_all(base.metadata, bind=engines[0], databases=databases)
        opener = partial(ShardedSession, engines[0], databases=databases)
        world = TwinWorld("mysql", model, twin, opener, sent)
        with world.session() as session:
            for i, instant in enumerate(_instants()):
                at = None if instant is None else instant.replace(tzinfo=None)  # UTC, as written
                values = {"id": IDS.next_id(gene=i), "user_id": i, "at": at, "tag": "xy"[i % 2]}
                session.add_all([model(**values), twin(**values)])
            session.commit()
        zone[0] = ZONE
        yield world
    finally:
        factory.cleanup()


def test_local_times_repeat_in_the_zone(world: TwinWorld) -> None:
    """The twin's distinct instants read as fewer distinct local times (the premise)."""
    with world.session() as session:
        read = session.scalars(select(world.Twin.at).where(world.Twin.at.is_not(None))).all()
        instants = session.scalars(select(func.unix_timestamp(world.Twin.at))).all()
    assert len(set(read)) == 4 and len({i for i in instants if i is not None}) == 7


def test_rows_ordered_by_a_timestamp_match_the_twin(world: TwinWorld) -> None:
    """ORDER BY a TIMESTAMP: the twin's order, by instant (the merge ordered local times)."""

    def build(m: Any) -> Any:
        return select(m.at, m.tag).order_by(m.at.desc(), m.tag).limit(12)

    assert len(world.exact(build, ordered=True)) == 12


def test_grouped_timestamps_match_the_twin(world: TwinWorld) -> None:
    """GROUP BY a TIMESTAMP: one group per instant, as the twin (the merge joined the two
    instants a local time names)."""

    def build(m: Any) -> Any:
        return select(m.at, func.count()).group_by(m.at).order_by(m.at)

    assert len(world.exact(build, ordered=True)) == 8


@pytest.mark.parametrize("form", ["distinct", "count"])
def test_distinct_timestamps_match_the_twin(world: TwinWorld, form: str) -> None:
    """DISTINCT and count(DISTINCT) of a TIMESTAMP count instants, as the twin."""

    def build(m: Any) -> Any:
        if form == "count":
            return select(func.count(m.at.distinct()))
        return select(m.at).distinct()

    world.exact(build)


@pytest.mark.parametrize("name", ["min", "max"])
def test_extremes_of_timestamps_are_the_least_and_greatest_instants(
    world: TwinWorld, name: str
) -> None:
    """MIN/MAX of a TIMESTAMP per group: the local time of the least or greatest instant,
    as the twin computes it from UNIX_TIMESTAMP (the merge picked the least or greatest
    local time; MariaDB's own grouped MIN/MAX in that hour is not always the instant's)."""
    aggregate = getattr(func, name)
    # 00:40, 01:00 and 01:20 UTC, read as 02:40, 02:00 and 02:20
    start, end = (int((_CHANGE + timedelta(minutes=m)).timestamp()) for m in (-30, 30))

    def rows(m: Any, value: Any) -> list[tuple[Any, ...]]:
        between = func.unix_timestamp(m.at).between(start, end)
        statement = select(m.tag, value).where(between).group_by(m.tag).order_by(m.tag)
        with world.session() as session:
            return [tuple(row) for row in session.execute(statement)]

    instants = rows(world.Twin, func.from_unixtime(aggregate(func.unix_timestamp(world.Twin.at))))
    expected = [(tag, at.replace(microsecond=0)) for tag, at in instants]
    assert rows(world.Model, aggregate(world.Model.at)) == expected
    assert {at.minute for _, at in expected} == ({40} if name == "min" else {20})


def test_timestamps_compared_after_the_merge_are_refused(world: TwinWorld) -> None:
    """HAVING max(at) > a time is refused by name, before any SQL."""

    def build(m: Any) -> Any:
        latest = func.max(m.at) > datetime(2024, 10, 27, 2, 25)
        return select(m.tag, func.count()).group_by(m.tag).having(latest)

    world.refused(build, r"comparison max\(stamped.at\) .* UNIX_TIMESTAMP")


CHOSEN: dict[str, Any] = {
    "greatest": lambda m: func.greatest(m.at, m.at),
    "ifnull": lambda m: func.ifnull(m.at, m.at),
    "nullif": lambda m: func.nullif(m.at, datetime(2024, 10, 27, 2, 20)),
    "type_coerce": lambda m: sa.type_coerce(m.at, sa.DateTime),
}
"""TIMESTAMPs in disguise: untyped functions choosing among TIMESTAMPs, a type_coerce()."""


@pytest.mark.parametrize("form", list(CHOSEN))
def test_disguised_timestamps_are_matched_by_instant(world: TwinWorld, form: str) -> None:
    """DISTINCT, GROUP BY and count(DISTINCT) of a TIMESTAMP that SQLAlchemy does not type
    as one match instants, as the twin (the merge joined the two instants of a local time)."""
    value = CHOSEN[form]
    world.exact(lambda m: select(value(m)).distinct())
    world.exact(lambda m: select(value(m), func.count()).group_by(value(m)))
    world.exact(lambda m: select(func.count(value(m).distinct())))


@pytest.mark.parametrize(
    "build",
    [
        lambda m: select(m.at).group_by(m.at, m.tag).distinct(),
        lambda m: select(Bundle("b", m.at, m.user_id)).distinct(),
    ],
    ids=["grouped", "bundle"],
)
def test_timestamps_matched_as_read_are_refused(world: TwinWorld, build: Any) -> None:
    """DISTINCT after GROUP BY, and of a Bundle, would match TIMESTAMPs as read: refused."""
    world.refused(build, r"DISTINCT stamped.at across shards: mysql compares a TIMESTAMP")


EXPRESSIONS: dict[str, Any] = {
    "column": lambda t: t.at,
    "type_coerce": lambda t: sa.type_coerce(t.at, sa.DateTime),
    "cast": lambda t: sa.cast(t.at, sa.DateTime),
    "greatest": lambda t: func.greatest(t.at, t.at),
    "greatest_mixed": lambda t: func.greatest(t.at, sa.cast(t.at, sa.DateTime)),
    "least": lambda t: func.least(t.at, t.at),
    "ifnull_null": lambda t: func.ifnull(t.at, None),
    "ifnull_mixed": lambda t: func.ifnull(t.at, sa.cast(t.at, sa.DateTime)),
    "coalesce": lambda t: func.coalesce(t.at, t.at),
    "coalesce_mixed": lambda t: func.coalesce(t.at, sa.cast(t.at, sa.DateTime)),
    "nullif": lambda t: func.nullif(t.at, sa.cast(t.at, sa.DateTime)),
    "nullif_local": lambda t: func.nullif(sa.cast(t.at, sa.DateTime), t.at),
    "case": lambda t: sa.case((t.tag == "x", t.at)),
    "case_mixed": lambda t: sa.case((t.tag == "x", t.at), else_=sa.cast(t.at, sa.DateTime)),
    "max": lambda t: func.max(t.at),
    "max_mixed": lambda t: func.max(func.coalesce(t.at, sa.cast(t.at, sa.DateTime))),
    "subquery": lambda t: select(func.max(t.at)).scalar_subquery(),
}
"""Expressions whose MariaDB type :func:`is_instant` claims to know."""


def test_is_instant_agrees_with_mariadb(world: TwinWorld) -> None:
    """Each expression is an instant exactly when MariaDB types its value TIMESTAMP (a
    table created from it says so)."""
    table = world.Twin.__table__
    claimed, typed = {}, {}
    with world.session() as session:
        connection = session.connection(bind_arguments={"mapper": world.Twin})
        for name, build in EXPRESSIONS.items():
            expression = build(table.c)
            claimed[name] = is_instant(expression, connection.dialect.name)
            query = select(expression.label("v")).select_from(table)
            sql = query.compile(connection, compile_kwargs={"literal_binds": True})
            connection.exec_driver_sql("DROP TEMPORARY TABLE IF EXISTS instant_probe")
            connection.exec_driver_sql(f"CREATE TEMPORARY TABLE instant_probe AS {sql}")
            (_, type_, *_) = connection.exec_driver_sql("DESCRIBE instant_probe").one()
            typed[name] = type_.startswith("timestamp")
    assert claimed == typed
    assert sum(typed.values()) == 10



def test_only_a_mariadb_timestamp_is_compared_by_its_instant() -> None:
    """A TIMESTAMP on MariaDB/MySQL is sent as UNIX_TIMESTAMP(); a DATETIME there, and a
    TIMESTAMP elsewhere, as it is."""
    stamp, local = sa.column("at", TIMESTAMP()), sa.column("at", sa.DateTime())
    assert str(instant_key(stamp, "mysql")) == "unix_timestamp(at)"
    assert instant_key(stamp, "mariadb") is not None
    assert instant_key(local, "mysql") is None
    assert instant_key(stamp, "postgresql") is None and instant_key(stamp, "sqlite") is None
