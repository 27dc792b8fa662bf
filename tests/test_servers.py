"""The test topology is real: two servers of each kind, and a streaming PostgreSQL replica.

The two-database tests (placement, fan-out, transactions, two-phase commit, recovery) only
prove something about several servers if their databases really are on different servers,
so these checks ask the servers themselves - the port they listen on and what identifies
their data (PostgreSQL's system identifier, MariaDB's data directory) - rather than the
URLs. The replica checks that it is a hot standby of the first PostgreSQL server that
receives its writes and refuses its own.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

import tests.backends
from tests.backends import DatabaseFactory

REPLICATION_TIMEOUT = 15.0  # seconds for a committed row to reach the replica

_SERVER_QUERIES = {
    # (the port the server listens on, what identifies the server's data)
    "postgresql": "SELECT inet_server_port(), (SELECT system_identifier FROM pg_control_system())",
    "mysql": "SELECT @@port, @@datadir",
}

SERVERS = [
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]


def _server_identity(url: str) -> tuple[int, str]:
    """(port, data identity) as the server behind ``url`` reports them."""
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            port, identity = conn.exec_driver_sql(
                _SERVER_QUERIES[engine.dialect.name]
            ).one()
            return int(port), str(identity)
    finally:
        engine.dispose()


def _in_recovery(url: str) -> bool:
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return bool(conn.exec_driver_sql("SELECT pg_is_in_recovery()").scalar_one())
    finally:
        engine.dispose()


@pytest.mark.parametrize("db_urls_2", SERVERS, indirect=True)
def test_db_urls_2_databases_are_on_two_servers(db_urls_2: list[str]) -> None:
    """The two databases of db_urls_2 are served by servers with different ports and data."""
    first, second = (_server_identity(url) for url in db_urls_2)
    assert first[0] == make_url(db_urls_2[0]).port
    assert second[0] == make_url(db_urls_2[1]).port
    assert first[0] != second[0]
    assert first[1] != second[1]


@pytest.mark.postgres
def test_second_postgres_server_allows_prepared_transactions(postgres2_url: str) -> None:
    """The second PostgreSQL server can PREPARE TRANSACTION (two-phase commit needs it)."""
    engine = sa.create_engine(postgres2_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            allowed = int(conn.exec_driver_sql("SHOW max_prepared_transactions").scalar_one())
    finally:
        engine.dispose()
    assert allowed > 0


@pytest.mark.mysql
def test_second_mariadb_server_keeps_a_prepared_xa_branch(mysql2_url: str) -> None:
    """The second MariaDB server prepares an XA branch and lists it (two-phase commit)."""
    xid = f"snowshard-servers-{time.time_ns()}"
    engine = sa.create_engine(mysql2_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f"XA START '{xid}'")
            conn.exec_driver_sql(f"XA END '{xid}'")
            conn.exec_driver_sql(f"XA PREPARE '{xid}'")
            try:
                prepared = [bytes(row[3]) for row in conn.exec_driver_sql("XA RECOVER")]
            finally:
                conn.exec_driver_sql(f"XA ROLLBACK '{xid}'")
    finally:
        engine.dispose()
    assert xid.encode() in prepared


def test_replica_is_a_standby_of_its_primary(
    postgres_primary_url: str, postgres_replica_url: str
) -> None:
    """The replica is in recovery, the primary is not, and both hold the same cluster."""
    assert _in_recovery(postgres_replica_url)
    assert not _in_recovery(postgres_primary_url)
    primary = _server_identity(postgres_primary_url)
    replica = _server_identity(postgres_replica_url)
    assert primary[0] != replica[0]
    assert primary[1] == replica[1]  # a base backup keeps the system identifier


def test_replica_receives_a_row_committed_on_the_primary(
    database_factory: DatabaseFactory, postgres_primary_url: str, postgres_replica_url: str
) -> None:
    """A row committed on the primary shows up on the replica."""
    url = database_factory("postgresql", server_url=postgres_primary_url)[0]
    token = f"row-{time.time_ns()}"
    primary = database_factory.engine(url)
    with primary.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE probe (token TEXT PRIMARY KEY)")
        conn.execute(sa.text("INSERT INTO probe VALUES (:t)"), {"t": token})
    replica = database_factory.engine(
        make_url(postgres_replica_url).set(database=make_url(url).database).render_as_string(
            hide_password=False
        ),
        poolclass=NullPool,
    )
    deadline = time.monotonic() + REPLICATION_TIMEOUT
    seen: list[str] = []
    while not seen and time.monotonic() < deadline:
        try:
            with replica.connect() as conn:
                seen = list(conn.exec_driver_sql("SELECT token FROM probe").scalars())
        except sa.exc.DBAPIError:  # the database or table has not been replayed yet
            time.sleep(0.05)
    assert seen == [token]


def test_replica_refuses_writes(postgres_replica_url: str) -> None:
    """Writing on the replica fails as a read-only transaction (SQLSTATE 25006)."""
    engine = sa.create_engine(postgres_replica_url, poolclass=NullPool)
    try:
        with pytest.raises(sa.exc.DBAPIError) as caught, engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE snowshard_replica_write (id INTEGER)")
    finally:
        engine.dispose()
    assert getattr(caught.value.orig, "sqlstate", None) == "25006"


def _urls(text: str) -> dict[str, str]:
    """``SNOWSHARD_TEST_*_URL`` names and the URLs written beside them in ``text``."""
    pairs = re.findall(r"(SNOWSHARD_TEST_\w+_URL)[ =]+(\S+://\S+)", text)
    return dict(pairs)


def test_compose_file_describes_every_server_the_suite_reads() -> None:
    """docker-compose.yml exports each URL the fixtures read and publishes each one's port."""
    compose = (Path(__file__).parent.parent / "docker-compose.yml").read_text()
    fixtures = _urls(tests.backends.__doc__ or "")
    assert len(fixtures) == 9
    assert _urls(compose) == fixtures
    for url in fixtures.values():
        assert f'"127.0.0.1:{make_url(url).port}:' in compose, url
