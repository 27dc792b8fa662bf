"""The copy's pace: a rows/s limit, and waiting while a real streaming replica lags."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa

from snowshard.operations.reshard import Reshard, ReshardError, ReshardPlanError, Throttle
from tests.backends import DatabaseFactory, wait_for_replica
from tests.reshard_world import ReshardWorld, build, replicated_world


@pytest.fixture
def sqlite_world(database_factory: DatabaseFactory) -> ReshardWorld:
    """The old layout with 300 rows in one SQLite database."""
    (url,) = database_factory("sqlite", 1)
    return build({"default": database_factory.engine(url)}, two_databases=False)


@pytest.fixture
def streaming(database_factory: DatabaseFactory, postgres_primary_url: str, postgres_replica_url: str) -> tuple[ReshardWorld, sa.Engine]:
    """The old layout in a database on the replica's primary, and the engine of its
    copy on the streaming replica (once the replica has the rows)."""
    return replicated_world(database_factory, "postgresql", postgres_primary_url, postgres_replica_url)


def _replay(replica: sa.Engine, action: str) -> None:
    with replica.connect() as connection:
        connection.execute(sa.text(f"SELECT pg_wal_replay_{action}()"))


@pytest.mark.postgres
def test_copy_waits_while_the_replica_lags_and_resumes_when_it_catches_up(
    streaming: tuple[ReshardWorld, sa.Engine],
) -> None:
    """Replay paused on the standby: the copy stops before its next chunk and reports the
    lag; replay resumed: the copy finishes and verifies."""
    world, replica = streaming
    seen: list[tuple[str, int]] = []
    job = Reshard(world.plan(chunk_rows=50), world.engines, replicas={"default": [replica]},
                  progress=lambda step, done, total: seen.append((step, done)))
    failed: list[BaseException] = []

    def run() -> None:
        try:
            job.start(max_replica_lag=0.3)
        except BaseException as error:  # reported below
            failed.append(error)

    _replay(replica, "pause")
    try:
        # lagging before the copy starts: a commit the paused standby receives but does not
        # replay, then more than the limit of time (else a fast copy could finish first)
        with world.bind.begin() as connection:
            connection.execute(sa.text("CREATE TABLE rs_lag_probe (x integer)"))
        behind = sa.text(
            "SELECT pg_last_wal_receive_lsn() > pg_last_wal_replay_lsn() AND "
            "now() - pg_last_xact_replay_timestamp() > interval '0.6 seconds'"
        )

        def lagging() -> bool:
            with replica.connect() as connection:
                return bool(connection.execute(behind).scalar())

        wait_for_replica(lagging, "a lag of more than 0.6 s behind the primary")
        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        time.sleep(2.0)
        waiting = [done for step, done in seen if step == "replica lag (ms)"]
        copied_while_paused = max((done for step, done in seen if step == "copy"), default=0)
        assert runner.is_alive(), f"the copy finished while the replica replayed nothing: {seen[-5:]}"
        assert waiting and max(waiting) > 300, seen[-5:]
        assert copied_while_paused < 300
    finally:
        _replay(replica, "resume")
    runner.join(60)
    assert not runner.is_alive() and not failed, failed
    assert job.status().copied == 300
    assert job.verify().ok


def test_rows_per_second_paces_the_copy(sqlite_world: ReshardWorld) -> None:
    """300 rows at 600 rows/s take at least half a second; unthrottled, well under it."""
    job = sqlite_world.job(chunk_rows=50)
    began = time.monotonic()
    job.start(rows_per_second=600)
    assert time.monotonic() - began >= 0.45
    assert job.status().copied == 300


def test_max_replica_lag_without_replicas_is_refused_before_any_work(sqlite_world: ReshardWorld) -> None:
    """A lag limit with no replica to watch raises ReshardPlanError; the job never starts."""
    job = sqlite_world.job()
    with pytest.raises(ReshardPlanError, match=r"max_replica_lag=2 needs the replicas"):
        job.start(max_replica_lag=2)
    assert job.phase() is None


@pytest.mark.parametrize("value", [0, -1.5, True, "2"])
def test_bad_limits_are_refused(value: Any) -> None:
    """A limit that is not a positive number is named, with what is allowed."""
    with pytest.raises(ReshardPlanError, match=rf"rows_per_second must be a number > 0 or None, got {value!r}"):
        Throttle(rows_per_second=value)


def test_a_sqlite_replica_is_refused(sqlite_world: ReshardWorld) -> None:
    """Only PostgreSQL standbys and MariaDB replicas have a measured lag: SQLite is refused up front."""
    job = Reshard(sqlite_world.plan(), sqlite_world.engines, replicas={"default": [sqlite_world.bind]})
    with pytest.raises(ReshardPlanError, match=r"PostgreSQL hot standbys and MariaDB/MySQL replicas only, not on sqlite"):
        job.start(max_replica_lag=1)
    assert job.phase() is None


@pytest.mark.postgres
def test_a_primary_given_as_a_replica_is_refused(
    database_factory: DatabaseFactory, postgres_url: str
) -> None:
    """A server that is not in recovery is not a replica: refused, its password hidden."""
    (url,) = database_factory("postgresql", 1, server_url=postgres_url)
    primary = database_factory.engine(url)
    with pytest.raises(ReshardPlanError, match=r"is not a replica") as caught:
        Throttle(replicas=[primary], max_replica_lag=1)
    assert primary.url.password is None or str(primary.url.password) not in str(caught.value)


def test_replicas_of_a_database_the_plan_does_not_use_are_refused(sqlite_world: ReshardWorld) -> None:
    """replicas={"x": ...} for a plan on "default" names the unknown key."""
    with pytest.raises(ReshardPlanError, match=r"replicas given for databases \['x'\]"):
        Reshard(sqlite_world.plan(), sqlite_world.engines, replicas={"x": [sqlite_world.bind]})


def test_an_unreachable_replica_is_named_without_its_password() -> None:
    """A standby that does not answer raises ReshardError naming it, password hidden."""
    engine = sa.create_engine("postgresql+psycopg://app:s3cret@127.0.0.1:1/shop")
    try:
        with pytest.raises(ReshardError, match=r"cannot read the lag of replica .*127\.0\.0\.1:1") as caught:
            Throttle(replicas=[engine], max_replica_lag=1)
        assert "s3cret" not in str(caught.value)
    finally:
        engine.dispose()
