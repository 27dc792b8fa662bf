"""A copy paced by a real MariaDB replica that lags (delayed replication) or stops applying.

The replica (``.ci/servers.sh``: 127.0.0.1:3311, replicating 3310) is shared by the whole
run, so these tests run in one CI leg only (tests/faults), and each puts replication back
as it found it (no delay, SQL thread running).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from snowshard.operations.reshard import Reshard, ReshardError, ReshardPlanError, Throttle
from tests.backends import DatabaseFactory, wait_for_replica
from tests.reshard_world import ReshardWorld, replicated_world

pytestmark = [pytest.mark.slow, pytest.mark.mysql]


@pytest.fixture
def replicated(
    database_factory: DatabaseFactory, mysql_primary_url: str, mysql_replica_url: str
) -> Iterator[tuple[ReshardWorld, sa.Engine]]:
    """The old layout (300 rows) on the MariaDB primary, and the engine of its copy on the
    replica once the replica has the rows; replication is reset to no delay afterwards."""
    world, replica = replicated_world(database_factory, "mysql", mysql_primary_url, mysql_replica_url)
    try:
        yield world, replica
    finally:
        _replication(replica, "STOP SLAVE", "CHANGE MASTER TO MASTER_DELAY = 0", "START SLAVE")


def _replication(replica: sa.Engine, *statements: str) -> None:
    with replica.connect() as connection:
        for statement in statements:
            connection.execute(sa.text(statement))


def test_copy_waits_while_a_delayed_mariadb_replica_lags(replicated: tuple[ReshardWorld, sa.Engine]) -> None:
    """Replication delayed by 6 s, the replica 2 s behind, a 1 s lag limit: the copy reports
    the replica's lag, waits until it caught up, and still copies every row."""
    world, replica = replicated
    _replication(replica, "STOP SLAVE", "CHANGE MASTER TO MASTER_DELAY = 6", "START SLAVE")
    # The primary commits a row every 0.2 s until the copy reports the lag, so the replica
    # stays behind however long the job's set-up takes (one commit before the copy left it
    # about 4 s, which a loaded CI machine's set-up once used up: the copy never waited).
    with world.bind.begin() as connection:
        connection.execute(sa.text("CREATE TABLE rs_lag_probe (x integer)"))
    seen: list[tuple[str, int]] = []
    reported = threading.Event()

    def commit_until_reported() -> None:
        deadline = time.monotonic() + 120
        while not reported.is_set() and time.monotonic() < deadline:
            with world.bind.begin() as connection:
                connection.execute(sa.text("INSERT INTO rs_lag_probe VALUES (1)"))
            reported.wait(0.2)

    def lagging() -> bool:
        with replica.connect() as connection:
            status = connection.execute(sa.text("SHOW SLAVE STATUS")).mappings().one()
            return (status["Seconds_Behind_Master"] or 0) >= 2

    def progress(step: str, done: int, total: int | None) -> None:
        seen.append((step, done))
        if step == "replica lag (ms)":
            reported.set()

    writer = threading.Thread(target=commit_until_reported, daemon=True)
    writer.start()
    try:
        wait_for_replica(lagging, "a lag of 2 s behind the primary")
        job = Reshard(world.plan(chunk_rows=150), world.engines, replicas={"default": [replica]},
                      progress=progress)
        began = time.monotonic()
        job.start(max_replica_lag=1)
    finally:
        reported.set()
        writer.join()
    waiting = [done for step, done in seen if step == "replica lag (ms)"]
    assert waiting and max(waiting) >= 2000, seen[-6:]  # whole seconds, above the limit
    assert time.monotonic() - began >= 0.5  # it did wait for the delayed replica
    assert job.status().copied == 300
    assert job.verify().ok


def test_a_stopped_mariadb_replica_stops_the_copy_with_a_named_error(
    replicated: tuple[ReshardWorld, sa.Engine],
) -> None:
    """SQL thread stopped: its lag cannot be read, so start raises ReshardError naming the
    replica (no password) before copying a row; started again after replication runs, the
    copy finishes."""
    world, replica = replicated
    _replication(replica, "STOP SLAVE SQL_THREAD")
    job = Reshard(world.plan(), world.engines, replicas={"default": [replica]})
    with pytest.raises(ReshardError, match=r"does not apply changes \(Slave_SQL_Running = No") as caught:
        job.start(max_replica_lag=5)
    assert str(make_url(str(replica.url)).port) in str(caught.value)
    assert not isinstance(caught.value, ReshardPlanError)
    assert job.phase() is None
    _replication(replica, "START SLAVE SQL_THREAD")
    assert job.start(max_replica_lag=5).copied == 300


def test_a_mariadb_primary_given_as_a_replica_is_refused(
    database_factory: DatabaseFactory, mysql_primary_url: str
) -> None:
    """A MariaDB server that replicates from nothing (SHOW SLAVE STATUS empty) is refused."""
    (url,) = database_factory("mysql", 1, server_url=mysql_primary_url)
    with pytest.raises(ReshardPlanError, match=r"is not a replica \(SHOW SLAVE STATUS is empty\)"):
        Throttle(replicas=[database_factory.engine(url)], max_replica_lag=1)
