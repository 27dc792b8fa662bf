"""Event listeners on a sharded model run for its rows, or are refused before any SQL.

Each test declares a fresh shop (listeners stay on the classes they are registered on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import BigInteger, Integer, event, select, update
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, validates

from snowshard.orm import snowflake_pk
from snowshard.sharding import Sharded, ShardedSession, Shards, UnpropagatedListener
from tests.worlds import IDS, SqlLog, World, WorldFactory, declare_shop


def _world(sharded_world: WorldFactory, backend: str = "sqlite") -> World:
    """A fresh shop with one order of user 5 (amount 3), over two databases."""
    world = sharded_world(declare_shop(4, databases=2), backend)
    with world.session() as session:
        session.add(world.Order(user_id=5, amount=3))
        session.commit()
    world.log.clear()
    return world


def _add(session: ShardedSession, world: World, order_id: int) -> None:
    session.add(world.Order(user_id=6, amount=1))
    session.flush()


def _read(session: ShardedSession, world: World, order_id: int) -> None:
    session.scalars(select(world.Order).order_by(world.Order.id)).all()


def _get(session: ShardedSession, world: World, order_id: int) -> None:
    session.get(world.Order, order_id)


WAYS_IN: dict[str, Callable[[ShardedSession, World, int], None]] = {
    "flush of a new row": _add,
    "read": _read,
    "get": _get,
}
"""Ways a session reads or writes the model: each checks its listeners."""

EVENTS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "mapper": (lambda m: m, "before_insert"),
    "instance": (lambda m: m, "load"),
    "attribute": (lambda m: m.amount, "set"),
}
"""A listener of each kind: what it is registered on, and its event."""


def _listener(*args: Any) -> None:
    """Stands for an application's listener."""


@pytest.mark.parametrize("way", list(WAYS_IN))
@pytest.mark.parametrize("kind", list(EVENTS))
def test_a_listener_without_propagate_is_refused_before_any_sql(
    sharded_world: WorldFactory, sql_log: SqlLog, kind: str, way: str
) -> None:
    """A listener on the logical model that no physical class has stops the next use."""
    world = _world(sharded_world)
    with world.session() as session:
        order_id = session.scalars(select(world.Order.id)).one()
    target, name = EVENTS[kind]
    event.listen(target(world.Order), name, _listener)
    sql_log.clear()
    with world.session() as session, pytest.raises(UnpropagatedListener) as raised:
        WAYS_IN[way](session, world, order_id)
    assert sql_log.statements() == []
    assert f"{name!r} listener _listener" in str(raised.value)


def test_a_listener_registered_while_a_session_is_open_stops_its_next_read(
    sharded_world: WorldFactory, sql_log: SqlLog
) -> None:
    """The session that already read the model refuses it once a bad listener appears."""
    world = _world(sharded_world)
    with world.session() as session:
        _read(session, world, 0)
        event.listen(world.Order, "load", _listener)
        sql_log.clear()
        with pytest.raises(UnpropagatedListener):
            _read(session, world, 0)
    assert sql_log.statements() == []


def test_the_refusal_says_how_to_register_the_listener(sharded_world: WorldFactory) -> None:
    """The message names the event, the function, the model and the propagate=True way."""
    world = _world(sharded_world)
    event.listen(world.Order.amount, "set", _listener)
    with world.session() as session, pytest.raises(UnpropagatedListener) as raised:
        _read(session, world, 0)
    message = str(raised.value)
    assert "'set' listener _listener on Order.amount would never run" in message
    assert "event.listen(Order.amount, 'set', _listener, propagate=True)" in message
    assert isinstance(raised.value, ValueError)


def test_listeners_with_propagate_run_for_every_row(
    sharded_world: WorldFactory, sql_backend: str
) -> None:
    """before_insert, before_update, load and set listeners see each row, in every table."""
    world = _world(sharded_world, sql_backend)
    Order = world.Order
    seen: list[tuple[str, int]] = []

    @event.listens_for(Order, "before_insert", propagate=True)
    def inserting(mapper: Any, connection: Any, target: Any) -> None:
        seen.append(("insert", target.user_id))
        target.note = f"by hook {target.user_id}"

    @event.listens_for(Order, "before_update", propagate=True)
    def updating(mapper: Any, connection: Any, target: Any) -> None:
        seen.append(("update", target.user_id))

    @event.listens_for(Order, "load", propagate=True)
    def loading(target: Any, context: Any) -> None:
        seen.append(("load", target.user_id))

    @event.listens_for(Order.amount, "set", propagate=True)
    def setting(target: Any, value: Any, old: Any, initiator: Any) -> None:
        seen.append(("set", value))

    with world.session() as session:
        session.add_all([Order(user_id=u, amount=10 + u) for u in (6, 7)])
        session.commit()
        session.execute(update(Order).where(Order.user_id == 6).values(amount=0))
        session.expunge_all()
        orders = session.scalars(select(Order).order_by(Order.user_id)).all()
        orders[0].amount = 30
        session.commit()
        notes = session.scalars(select(Order.note).order_by(Order.user_id)).all()
    assert seen == [
        ("set", 16), ("set", 17), ("insert", 6), ("insert", 7),
        ("load", 5), ("load", 6), ("load", 7), ("set", 30), ("update", 5),
    ]  # fmt: skip
    assert notes == [None, "by hook 6", "by hook 7"]


def test_validators_run_without_propagate(sharded_world: WorldFactory) -> None:
    """@validates on the logical model checks the rows of every physical class."""

    class Base(DeclarativeBase):
        pass

    class Order(Sharded, Base):
        __tablename__ = "orders"
        __shards__ = Shards(4, key=("id", "user_id"))
        id: Mapped[int] = snowflake_pk(IDS, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger)
        amount: Mapped[int] = mapped_column(Integer)

        @validates("amount")
        def _positive(self, key: str, value: int) -> int:
            if value < 0:
                raise ValueError(f"amount must be >= 0, got {value}")
            return value

    world = sharded_world(Base)
    with world.session() as session:
        session.add_all([Order(user_id=u, amount=u) for u in range(4)])
        session.commit()
        orders = session.scalars(select(Order)).all()
        assert len({type(o) for o in orders}) == 4
        for order in orders:
            with pytest.raises(ValueError, match="amount must be >= 0, got -1"):
                order.amount = -1
