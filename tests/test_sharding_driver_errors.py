"""Driver errors of sharded work name the database and table, and say a retry is safe."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from snowshard.sharding import ShardedSession
from snowshard.sharding.driver_errors import ShardOperationError
from tests.worlds import World, WorldFactory, declare_shop

USER = 1820  # gene 12 of 16: orders_12, in database "b" of two


def _world(sharded_world: WorldFactory, backend: str) -> World:
    return sharded_world(declare_shop(16, databases=2), backend)


def _stored_order(world: World) -> Any:
    with ShardedSession(world.bind, databases=world.databases) as session:
        order = world.Order(user_id=USER, amount=1)
        session.add(order)
        session.commit()
        return order.id


def _duplicate(world: World, session: Session, order_id: int) -> None:
    session.add(world.Order(id=order_id, user_id=USER, amount=2))
    session.flush()


def test_a_rejected_insert_names_database_and_table(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """A duplicate key in database b raises ShardOperationError naming b and orders_12."""
    world = _world(sharded_world, sql_backend)
    order_id = _stored_order(world)
    with ShardedSession(world.bind, databases=world.databases) as session:
        with pytest.raises(ShardOperationError) as caught:
            _duplicate(world, session, order_id)
    error = caught.value
    assert (error.database, error.tables, error.disconnect) == ("b", ("orders_12",), False)
    assert "database 'b', table orders_12 refused a statement" in str(error)
    assert error.retry_safe and "running the whole transaction again is safe" in str(error)
    assert error.__cause__ is not None and "sqlalchemy" not in type(error.__cause__).__module__


def test_the_session_recovers_after_a_named_error(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """After rollback the same session writes again: the error left no broken state."""
    world = _world(sharded_world, sql_backend)
    order_id = _stored_order(world)
    with ShardedSession(world.bind, databases=world.databases) as session:
        with pytest.raises(ShardOperationError):
            _duplicate(world, session, order_id)
        session.rollback()
        session.add(world.Order(user_id=USER, amount=3))
        session.commit()
        amounts = session.scalars(
            sa.select(world.Order.amount).where(world.Order.user_id == USER)
        ).all()
    assert sorted(amounts) == [1, 3]


def test_plain_sessions_on_the_same_engine_keep_sqlalchemy_errors(
    sharded_world: WorldFactory,
) -> None:
    """Only a sharded session's connections are named; a plain Session sees IntegrityError."""
    world = _world(sharded_world, "sqlite")
    order_id = _stored_order(world)
    table = world.Order.__table__.metadata.tables["orders_12"]
    with Session(world.engines["b"]) as plain, pytest.raises(sa.exc.IntegrityError):
        plain.execute(sa.insert(table).values(id=order_id, user_id=USER, amount=2))


@pytest.mark.postgres
def test_a_killed_connection_names_its_database(
    sharded_world: WorldFactory,
) -> None:
    """A connection terminated by the server mid-transaction: named, disconnect=True."""
    world = _world(sharded_world, "postgresql")
    _stored_order(world)
    query = sa.select(world.Order).where(world.Order.user_id == USER)
    with ShardedSession(world.bind, databases=world.databases) as session:
        session.scalars(query).all()  # begins the transaction on database b
        backend = session.execute(
            sa.text("select pg_backend_pid()"), bind_arguments={"bind": world.engines["b"]}
        ).scalar_one()
        with world.engines["b"].connect() as admin:  # b's server: its connection IDs
            admin.execute(sa.text("select pg_terminate_backend(:pid)"), {"pid": backend})
        with pytest.raises(ShardOperationError) as caught:
            session.scalars(query).all()
    assert caught.value.database == "b" and caught.value.disconnect
    assert "connection to database 'b'" in str(caught.value)
