"""Helpers of the two-phase commit tests: a table per database, rows, branches, locks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from snowshard.sharding.twophase import Xid, in_doubt_branches
from tests.backends import DatabaseFactory

__all__ = ["SERVERS", "branches", "create_items", "ids", "insert", "pair", "row_is_free"]

SERVERS = [
    pytest.param("postgresql", marks=pytest.mark.postgres, id="postgresql"),
    pytest.param("mysql", marks=pytest.mark.mysql, id="mysql"),
]


@pytest.fixture(params=SERVERS)
def pair(
    request: pytest.FixtureRequest, database_factory: DatabaseFactory
) -> Iterator[dict[str, sa.Engine]]:
    """Two fresh databases of one server, with an ``items`` table each: {"a": .., "b": ..}."""
    a, b = (database_factory.engine(u) for u in database_factory(request.param, 2))
    create_items(a, b)
    yield {"a": a, "b": b}


def create_items(*engines: sa.Engine) -> None:
    """Create ``items(id BIGINT PRIMARY KEY, note VARCHAR(40))`` in each database."""
    for engine in engines:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE items (id BIGINT PRIMARY KEY, note VARCHAR(40))")


def insert(session: sa.orm.Session, engine: sa.Engine, row_id: int, note: str = "x") -> None:
    """Insert an item through ``session``'s connection to ``engine`` (its branch)."""
    connection = session.connection(bind_arguments={"bind": engine})
    connection.execute(
        sa.text("INSERT INTO items (id, note) VALUES (:id, :note)"), {"id": row_id, "note": note}
    )


def ids(engine: sa.Engine) -> set[int]:
    """The IDs of the items committed in ``engine``'s database."""
    with engine.connect() as conn:
        return set(conn.exec_driver_sql("SELECT id FROM items").scalars())


def branches(engine: sa.Engine) -> list[Xid]:
    """snowshard's prepared branches visible from ``engine``."""
    with engine.connect() as conn:
        return in_doubt_branches(conn)


def row_is_free(engine: sa.Engine, row_id: int) -> bool:
    """Whether a writer can lock item ``row_id`` (or the key, if absent) within 2 seconds."""
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SET lock_timeout = '2s'")
        else:
            conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 2")
        try:
            conn.execute(
                sa.text("SELECT id FROM items WHERE id = :id FOR UPDATE"), {"id": row_id}
            ).all()
            conn.execute(
                sa.text("UPDATE items SET note = 'probe' WHERE id = :id"), {"id": row_id}
            )
        except sa.exc.DBAPIError:
            return False
        finally:
            conn.rollback()
    return True
