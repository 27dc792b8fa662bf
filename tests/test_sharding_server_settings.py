"""Databases whose sessions compute otherwise (time zone, quotient digits, SQL mode) are
refused by name, before a statement runs across them; equal settings cost one read per
connection."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Date, DateTime, String, func, select
from sqlalchemy.orm import mapped_column

from snowshard.sharding.server_settings import ServerSettingsDiffer, settings_of
from tests.twin_world import TwinWorld, connected_with, twin_world_fixture


def _columns() -> dict[str, Any]:
    return {"at": mapped_column(DateTime(timezone=True)), "tag": mapped_column(String(4))}


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(1207)
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    return [
        {"user_id": rng.randrange(1, 40), "tag": "xy"[i % 2],
         "at": start + timedelta(hours=rng.randrange(96))}
        for i in range(40)
    ]  # fmt: skip


world = twin_world_fixture("zoned", _columns, _rows)
"""Instants over two databases and their twin, on each backend."""

_ZONES = {
    "postgresql": ["SET TIME ZONE 'UTC'", "SET TIME ZONE 'America/New_York'"],
    "mysql": ["SET time_zone = '+00:00'", "SET time_zone = '-05:00'"],
}


def _by_day(m: Any) -> Any:
    day = func.date(m.at, type_=Date)  # the day in the session's time zone
    return select(day, func.count()).group_by(day)


def test_databases_in_other_time_zones_are_refused(world: TwinWorld) -> None:
    """Days counted across databases in two time zones: refused by name (the merge put
    the same instants on other days than one server does), before the statement runs."""
    if world.backend == "sqlite":
        pytest.skip("SQLite has no session time zone")
    utc, other = _ZONES[world.backend]
    with connected_with(world, [utc, utc, other]), world.session() as session:
        with pytest.raises(ServerSettingsDiffer, match="(?i)time_?zone .*'(UTC|\\+00:00)'"):
            session.execute(_by_day(world.Model)).all()


def test_one_database_of_its_own_zone_is_read(world: TwinWorld) -> None:
    """A statement routed to one database (a shard key in WHERE) runs whatever another
    database's zone: nothing is merged (the twin's database shares its zone)."""
    if world.backend == "sqlite":
        pytest.skip("SQLite has no session time zone")
    utc, other = _ZONES[world.backend]
    with connected_with(world, [other, utc, other]), world.session() as session:
        found = session.execute(_by_day(world.Model).where(world.Model.user_id == 3)).all()
        expected = session.execute(_by_day(world.Twin).where(world.Twin.user_id == 3)).all()
    assert sorted(found) == sorted(expected)


@pytest.mark.mysql
def test_another_sql_mode_is_refused(world: TwinWorld) -> None:
    """MariaDB databases in different SQL modes: refused, naming sql_mode."""
    if world.backend != "mysql":
        pytest.skip("MariaDB's sql_mode")
    plain = "SET SESSION sql_mode = 'STRICT_TRANS_TABLES'"
    piped = "SET SESSION sql_mode = 'STRICT_TRANS_TABLES,PIPES_AS_CONCAT'"
    with connected_with(world, [plain, plain, piped]), world.session() as session:
        with pytest.raises(ServerSettingsDiffer, match="sql_mode"):
            session.execute(select(func.count()).select_from(world.Model)).one()


def test_equal_settings_are_read_once_per_connection_without_sql_events(
    world: TwinWorld,
) -> None:
    """Databases with equal settings merge as before; each connection reads its settings
    once, on the driver's cursor (no statement event sees it), and keeps them."""
    world.exact(_by_day)
    world.sent.clear()
    with world.session() as session:
        session.execute(_by_day(world.Model)).all()
        connection = session.connection(bind_arguments={"bind": world.engines[1]})
        found = settings_of(connection)
    assert not any("current_setting" in s or "@@session" in s for s in world.sent)
    if world.backend == "sqlite":
        assert found is None
    else:
        names = [name for name, _ in found or ()]
        assert names[0] in ("TimeZone", "time_zone") and len(names) == 4
