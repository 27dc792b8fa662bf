"""A server stops mid-run: sharded work names the database, recovers, and loses no commit.

A shop's orders are split over two databases: "a" on the shared test server and "b" on a
private server the module starts itself (a PostgreSQL cluster, or a ``mariadbd``; see
``tests/faults/servers.py``) - the shared servers are never stopped, other tests use them.
Rows are committed to both, then the private server is stopped the hard way
(``pg_ctlcluster stop -m immediate``, SIGKILL of ``mariadbd``) while a session still holds
a connection to it. Then:

* a fan-out read, and a write routed to "b", raise :class:`ShardOperationError` naming
  database "b" (not a bare driver error);
* after ``rollback()`` the same session works on "a" again;
* once the server is back, every row committed before the crash is there, on both sides.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest
import sqlalchemy as sa

from snowshard.sharding import ShardedSession
from snowshard.sharding.driver_errors import ShardOperationError
from tests.backends import DatabaseFactory
from tests.faults.servers import MariaDBServer, PostgresCluster
from tests.worlds import World, declare_shop, open_world

USERS_A = (1792, 1793)  # genes 0 and 1 of 16: orders_00, orders_01 in database "a"
USERS_B = (1820, 1823)  # genes 12 and 15: orders_12, orders_15 in database "b"


class PrivateServer(Protocol):
    """What the tests use of PostgresCluster and MariaDBServer."""

    @property
    def url(self) -> str: ...

    def stop(self) -> None: ...

    def start(self, timeout: float = 60.0) -> None: ...


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("postgresql", marks=pytest.mark.postgres, id="postgresql"),
        pytest.param("mysql", marks=pytest.mark.mysql, id="mysql"),
    ],
)
def private_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, PrivateServer]]:
    """(backend, a private server of that backend), removed after the module."""
    if request.param == "postgresql":
        cluster = PostgresCluster()
        try:
            cluster.create()
            yield "postgresql", cluster
        finally:
            cluster.drop()
        return
    server = MariaDBServer(tmp_path_factory.mktemp("mariadbd"))
    try:
        server.create()
        yield "mysql", server
    finally:
        server.stop()


@pytest.fixture
def world(
    private_server: tuple[str, PrivateServer],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> Iterator[World]:
    """A shop over two databases: "a" on the shared server, "b" on the private one."""
    backend, server = private_server
    shared: str = request.getfixturevalue("postgres_url" if backend == "postgresql" else "mysql_url")
    factory = DatabaseFactory(tmp_path, lambda kind: shared, lambda kind: server.url)
    try:
        yield open_world(factory, declare_shop(16, databases=2), backend)
    finally:
        server.start()  # idempotent when running; the private database is dropped on it
        factory.cleanup()


def _commit_orders(world: World) -> dict[str, set[int]]:
    """Commit two orders per user; return their IDs by database ("a", "b")."""
    with ShardedSession(world.bind, databases=world.databases) as session:
        orders = {
            key: [world.Order(user_id=u, amount=n) for u in users for n in (1, 2)]
            for key, users in (("a", USERS_A), ("b", USERS_B))
        }
        session.add_all(orders["a"] + orders["b"])
        session.commit()
        return {key: {order.id for order in rows} for key, rows in orders.items()}


def _all_ids(session: ShardedSession, world: World) -> set[int]:
    return set(session.scalars(sa.select(world.Order.id)))


def _stop_while_connected(world: World, server: PrivateServer) -> ShardedSession:
    """A session mid-transaction on both databases, then the private server stops."""
    session = ShardedSession(world.bind, databases=world.databases)
    _all_ids(session, world)  # fan-out: a connection to each database, in a transaction
    server.stop()
    return session


def _named_b(error: ShardOperationError) -> None:
    assert error.database == "b"
    assert "database 'b'" in str(error)
    assert error.__cause__ is not None


def test_a_fan_out_read_names_the_stopped_database(
    world: World, private_server: tuple[str, PrivateServer]
) -> None:
    """A fan-out read after the server stops: ShardOperationError for "b", a disconnect."""
    _commit_orders(world)
    with (
        _stop_while_connected(world, private_server[1]) as session,
        pytest.raises(ShardOperationError) as caught,
    ):
        _all_ids(session, world)
    _named_b(caught.value)
    assert caught.value.disconnect


def test_a_write_to_the_stopped_database_is_named(
    world: World, private_server: tuple[str, PrivateServer]
) -> None:
    """A new session writing to "b" while its server is down: ShardOperationError for "b"."""
    _commit_orders(world)
    private_server[1].stop()
    with ShardedSession(world.bind, databases=world.databases) as session:
        session.add(world.Order(user_id=USERS_B[0], amount=9))
        with pytest.raises(ShardOperationError) as caught:
            session.commit()
    _named_b(caught.value)


def test_the_session_works_on_the_other_database_after_rollback(
    world: World, private_server: tuple[str, PrivateServer]
) -> None:
    """After the named error and rollback(), the session writes and reads database "a"."""
    committed = _commit_orders(world)
    with _stop_while_connected(world, private_server[1]) as session:
        with pytest.raises(ShardOperationError):
            _all_ids(session, world)
        session.rollback()
        order = world.Order(user_id=USERS_A[0], amount=7)
        session.add(order)
        session.commit()
        new_id = order.id
        on_a = set(
            session.scalars(sa.select(world.Order.id).where(world.Order.user_id.in_(USERS_A)))
        )
    assert on_a == committed["a"] | {new_id}


def test_every_committed_row_is_there_after_the_restart(
    world: World, private_server: tuple[str, PrivateServer]
) -> None:
    """Restarted after the crash, both databases hold every row committed before it."""
    committed = _commit_orders(world)
    with _stop_while_connected(world, private_server[1]) as session:
        with pytest.raises(ShardOperationError):
            _all_ids(session, world)
        session.rollback()
    private_server[1].start()
    world.engines["b"].dispose()  # its pool holds connections to the stopped server
    with ShardedSession(world.bind, databases=world.databases) as session:
        found = _all_ids(session, world)
    by_table = world.rows_by_table(world.Order)
    assert found == committed["a"] | committed["b"]
    assert set().union(*by_table.values()) == committed["a"] | committed["b"]
    assert {t for t, ids in by_table.items() if ids} == {
        "orders_00", "orders_01", "orders_12", "orders_15"
    }
