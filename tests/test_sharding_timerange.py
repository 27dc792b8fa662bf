"""Time ranges by primary key on sharded models (snowshard.orm.timerange helpers)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import func, select

from snowshard import ManualClock, Snowflake
from snowshard.orm import id_between, id_time, id_unix_ms
from snowshard.sharding import ShardedSession
from tests.worlds import LAYOUT, WorldFactory, declare_shop

START = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
CLOCK = ManualClock(int(START.timestamp() * 1000))
IDS = Snowflake(LAYOUT, worker=19, clock=CLOCK, sleep=CLOCK.sleep)

SHOP = declare_shop(4, ids=IDS)
"""Orders stamped by the manual clock, in one database."""
SPREAD = declare_shop(4, databases=2, ids=IDS)
"""The same, over two databases (a: orders_00/01, b: orders_02/03)."""

_days = [0]


def _fill(session: ShardedSession, model: Any) -> tuple[datetime, list[datetime]]:
    """40 rows, one every 7 minutes from a new day's 09:00 (the clock never goes back)."""
    _days[0] += 1
    base = START + timedelta(days=_days[0])
    times = []
    for i in range(40):
        CLOCK.set(int((base + timedelta(minutes=7 * i)).timestamp() * 1000))
        times.append(base + timedelta(minutes=7 * i))
        session.add(model(user_id=i % 10, amount=i))
        session.flush()
    session.commit()
    return base, times


def test_id_between_counts_a_time_range_across_shards(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """COUNT(*) WHERE id_between(start, end) over every table equals the rows made then."""
    Order = SHOP.Order
    with sharded_world(SHOP, sql_backend).session() as session:
        base, times = _fill(session, Order)
        start, end = base + timedelta(hours=1), base + timedelta(hours=2)
        count = session.scalar(select(func.count()).where(id_between(Order.id, LAYOUT, start, end)))
    assert count == sum(1 for t in times if start <= t < end) == 9


def test_id_time_groups_by_hour_across_shards(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """GROUP BY the hour of id_time(Order.id) gives per-hour counts, computed in SQL."""
    Order = SHOP.Order
    with sharded_world(SHOP, sql_backend).session() as session:
        _, times = _fill(session, Order)
        hour = func.floor(id_unix_ms(Order.id, LAYOUT) / 3_600_000)
        rows = session.execute(select(hour, func.count()).group_by(hour).order_by(hour)).all()
    expected: dict[int, int] = {}
    for t in times:
        expected[int(t.timestamp()) // 3600] = expected.get(int(t.timestamp()) // 3600, 0) + 1
    assert [(int(h), c) for h, c in rows] == sorted(expected.items())


def test_time_range_across_databases_is_merged(sharded_world: WorldFactory) -> None:
    """On two databases, the range count and the newest creation time are merged in Python."""
    Order = SPREAD.Order
    world = sharded_world(SPREAD)
    assert sorted(world.databases) == ["a", "b"]
    with world.session() as session:
        base, times = _fill(session, Order)
        start = base + timedelta(minutes=30)
        count, newest = session.execute(
            select(func.count(), func.max(id_time(Order.id, LAYOUT))).where(
                id_between(Order.id, LAYOUT, start, base + timedelta(days=1))
            )
        ).one()
    assert world.log.databases() >= {"a", "b"}
    assert count == sum(1 for t in times if t >= start)
    assert newest == max(times)


@pytest.mark.parametrize("hours", [1, 3])
def test_last_hours_by_primary_key_matches_python(hours: int) -> None:
    """id_between(now - h, now) selects exactly the IDs whose parsed time is in range."""
    now = START + timedelta(minutes=7 * 39)
    low, high = now - timedelta(hours=hours), now
    ids = [LAYOUT.compose(START + timedelta(minutes=7 * i), worker=1) for i in range(40)]
    chosen = [i for i in ids if LAYOUT.min_id(low) <= i < LAYOUT.min_id(high)]
    assert chosen == [i for i in ids if low <= LAYOUT.time_of(i) < high]
