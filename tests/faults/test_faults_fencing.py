"""Fenced leases: whatever the lease store loses, 8 processes on 4 worker IDs repeat no ID.

Each test runs a :class:`~tests.faults.fencing_support.Fleet` (8 forked processes, 2 worker
bits, leases of 1 s taken, used for 0.5-2 s and released, over and over), injects one fault
mid-run, lets the fleet run on, and checks every ID issued: no duplicate, and IDs were issued
after the fault by several processes (a run where nobody issues proves nothing).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from snowshard import Layout
from snowshard.workers import create_table, worker_leases
from tests.backends import DatabaseFactory
from tests.faults.fencing_support import Fleet, LeaseSettings, duplicates
from tests.faults.servers import RedisServer

pytestmark = pytest.mark.slow

TTL = 1.0
SKEW = 0.2  # one host: no clock skew; covers the generator's 100 ms of borrowing
LAYOUT = Layout(worker_bits=2)
AFTER = 3.0  # seconds the fleet runs after a fault: a TTL and the wait, and then some


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server whose ``SAVE`` writes ``dump.rdb`` into ``tmp_path``."""
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


def run_fleet(directory: Path, settings: LeaseSettings, fault: Callable[[Fleet], None]) -> None:
    """Run the fleet, inject ``fault`` once IDs flow, run on; check the IDs issued."""
    fleet = Fleet(directory, settings)
    try:
        deadline = time.monotonic() + 30
        while len(fleet.busy_members()) < 3:  # leases held and IDs flowing
            if time.monotonic() > deadline:
                pytest.fail(f"the fleet issued no IDs: {fleet.log_tail()}")
        time.sleep(0.5)
        fault(fleet)
        after = wall_ms()
        time.sleep(AFTER)
        late = [i for i in range(len(fleet.outs)) if fleet.issued(i)]
    finally:
        fleet.stop()
    ids = fleet.ids()
    late_ids = [value for value in ids if LAYOUT.parse(value).unix_ms > after]
    late_members = 0
    for index in range(len(fleet.outs)):
        member = fleet.ids(index)
        late_members += any(LAYOUT.parse(value).unix_ms > after for value in member)
    assert late, "no member issued anything"
    assert duplicates(ids) == 0, f"{duplicates(ids)} duplicate IDs out of {len(ids)}"
    assert len(late_ids) >= 1000, f"only {len(late_ids)} IDs after the fault"
    assert late_members >= 3, f"only {late_members} processes issued after the fault"


def redis_settings(server: RedisServer) -> LeaseSettings:
    return LeaseSettings("redis", server.url, "w", TTL, SKEW)


@pytest.mark.redis
def test_restart_from_an_older_snapshot(tmp_path: Path, redis_server: RedisServer) -> None:
    """Redis killed and restarted from a snapshot 1.5 s old: holders' leases went back in time."""

    def fault(fleet: Fleet) -> None:
        with redis.Redis.from_url(redis_server.url) as client:
            client.save()  # dump.rdb now; leases change hands after it
        time.sleep(1.5)
        os.kill(redis_server.pid, signal.SIGKILL)
        redis_server.stop()  # reap it
        redis_server.start()  # loads the old dump.rdb

    run_fleet(tmp_path, redis_settings(redis_server), fault)


@pytest.mark.redis
def test_flushall_mid_run(tmp_path: Path, redis_server: RedisServer) -> None:
    """FLUSHALL while leases are held (as a failover to an empty replica would)."""

    def fault(fleet: Fleet) -> None:
        with redis.Redis.from_url(redis_server.url) as client:
            client.flushall()

    run_fleet(tmp_path, redis_settings(redis_server), fault)


@pytest.mark.redis
def test_holders_paused_past_their_ttl(tmp_path: Path, redis_server: RedisServer) -> None:
    """Two holders SIGSTOPped for 2.5 TTLs, then resumed, while the others take their IDs."""

    def fault(fleet: Fleet) -> None:
        paused = [fleet.pids()[i] for i in fleet.busy_members()[:2]]
        assert paused, "nobody holds a lease to pause"
        for pid in paused:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(TTL * 2.5)
        for pid in paused:
            os.kill(pid, signal.SIGCONT)

    run_fleet(tmp_path, redis_settings(redis_server), fault)


@pytest.mark.redis
def test_store_unreachable_past_the_ttl(tmp_path: Path, redis_server: RedisServer) -> None:
    """redis-server SIGSTOPped for 2 TTLs: every renewal fails, every lease lapses."""

    def fault(fleet: Fleet) -> None:
        redis_server.pause()
        time.sleep(TTL * 2)
        redis_server.resume()

    run_fleet(tmp_path, redis_settings(redis_server), fault)


DATABASES = [
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]


def database(factory: DatabaseFactory, kind: str) -> tuple[str, sa.Engine]:
    url = factory(kind)[0]
    engine = factory.engine(url)
    create_table(engine)
    return url, engine


@pytest.mark.parametrize("kind", DATABASES)
def test_lease_rows_deleted_mid_run(
    kind: str, tmp_path: Path, database_factory: DatabaseFactory
) -> None:
    """Every lease row deleted while holders run."""
    url, engine = database(database_factory, kind)

    def fault(fleet: Fleet) -> None:
        with engine.begin() as conn:
            conn.execute(sa.delete(worker_leases))

    run_fleet(tmp_path, LeaseSettings(kind, url, "fleet", TTL, SKEW), fault)


@pytest.mark.parametrize("kind", DATABASES)
def test_lease_table_restored_from_an_older_copy(
    kind: str, tmp_path: Path, database_factory: DatabaseFactory
) -> None:
    """The lease rows copied aside, and 1.5 s later put back over the live ones."""
    url, engine = database(database_factory, kind)

    def fault(fleet: Fleet) -> None:
        with engine.connect() as conn:
            copy = [dict(row) for row in conn.execute(sa.select(worker_leases)).mappings()]
        time.sleep(1.5)
        with engine.begin() as conn:
            conn.execute(sa.delete(worker_leases))
            conn.execute(sa.insert(worker_leases), copy)

    run_fleet(tmp_path, LeaseSettings(kind, url, "fleet", TTL, SKEW), fault)
