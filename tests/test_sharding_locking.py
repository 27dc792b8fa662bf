"""Locking reads (``with_for_update()``) without a shard key lock every row they return.

Real databases: PostgreSQL and MariaDB, the tables in one database and over two. Another
connection asks for each returned row's lock with NOWAIT and must be turned away. (SQLite
has no row locks; its answers are compared with the twin in ``test_support_table.py``.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import select

from snowshard.sharding import sharded_model
from tests.worlds import SqlLog, World, WorldFactory, declare_shop

BACKENDS = [
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mariadb", marks=pytest.mark.mysql),
]

READS: dict[str, Callable[[Any], Any]] = {
    "newest three": lambda m: select(m).order_by(m.id.desc()).limit(3).with_for_update(),
    "all rows": lambda m: select(m).with_for_update(),
    "for share": lambda m: select(m.id).order_by(m.id).limit(4).with_for_update(read=True),
}


def _world(sharded_world: WorldFactory, backend: str, databases: int) -> World:
    """Four tables over ``databases`` databases, two orders of each of users 0..7."""
    world = sharded_world(declare_shop(4, databases=databases), backend)
    with world.session() as session:
        session.add_all([world.Order(user_id=u, amount=u) for u in range(8) for _ in range(2)])
        session.commit()
    world.log.clear()
    return world


def _is_locked(world: World, order_id: int) -> bool:
    """Whether another connection is refused the lock on order ``order_id`` (NOWAIT)."""
    model = sharded_model(world.Order)
    shard = model.shard_of("id", order_id)
    table = model.tables[shard]
    engine = world.engines[model.database_of(shard)]
    with engine.connect() as other:
        try:
            found = other.execute(
                select(table.c.id).where(table.c.id == order_id).with_for_update(nowait=True)
            ).all()
        except sa.exc.OperationalError:
            return True
        assert found == [(order_id,)]
        return False


@pytest.mark.parametrize("databases", [1, 2])
@pytest.mark.parametrize("read", list(READS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_row_a_keyless_locking_read_returns_is_locked(
    sharded_world: WorldFactory, backend: str, databases: int, read: str
) -> None:
    """Each row returned stays locked against other transactions until the session ends."""
    world = _world(sharded_world, backend, databases)
    with world.session() as session:
        found = session.execute(READS[read](world.Order)).scalars().all()
        ids = [getattr(row, "id", row) for row in found]
        assert ids
        locked = {i: _is_locked(world, i) for i in ids}
        assert all(locked.values()), f"rows returned but not locked: {locked}"
        session.rollback()
        assert not _is_locked(world, ids[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_keyless_locking_read_names_one_table_per_statement(
    sharded_world: WorldFactory, sql_log: SqlLog, backend: str
) -> None:
    """The tables of one database are read by one FOR UPDATE statement each, no UNION ALL."""
    world = _world(sharded_world, backend, 1)
    Order = world.Order
    with world.session() as session:
        session.execute(select(Order.id).order_by(Order.id).limit(2).with_for_update()).all()
    assert sorted(map(sorted, sql_log.tables())) == [[f"orders_0{i}"] for i in range(4)]
    assert all("FOR UPDATE" in s and "UNION" not in s for s in sql_log.statements())
