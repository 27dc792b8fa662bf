"""Change-capture and fence triggers on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from sqlalchemy import BigInteger, Column, MetaData, String, Table, delete, insert, select, text, update

from snowshard.operations.reshard import triggers
from snowshard.operations.reshard.state import LOG
from snowshard.operations.reshard.triggers import TriggerError
from snowshard.sharding.shard_map import FENCE_MARK
from tests.backends import DatabaseFactory
from tests.test_sharding_helpers import BACKEND_MARKS

BACKENDS = [pytest.param(b, id=b, marks=BACKEND_MARKS[b]) for b in ("sqlite", "postgresql", "mysql")]
JOB = "orders-8"


@dataclass
class Captured:
    engine: sa.Engine
    table: Table

    def logged(self) -> list[tuple[str, int, int | None]]:
        with self.engine.connect() as connection:
            return [tuple(r) for r in connection.execute(  # type: ignore[misc]
                select(LOG.c.tbl, LOG.c.pk, LOG.c.shard_key).where(LOG.c.job == JOB).order_by(LOG.c.seq)
            )]

    def rows(self) -> list[tuple[int, int, str]]:
        with self.engine.connect() as connection:
            return [tuple(r) for r in connection.execute(select(self.table).order_by(self.table.c.id))]  # type: ignore[misc]

    def trigger_count(self) -> int:
        names = triggers.trigger_names(self.table, job=JOB)
        with self.engine.connect() as connection:
            name = connection.dialect.name
            if name == "sqlite":
                found = connection.execute(text("SELECT name FROM sqlite_master WHERE type = 'trigger'"))
            elif name == "postgresql":
                found = connection.execute(text("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"))
            else:
                found = connection.execute(text(
                    "SELECT trigger_name FROM information_schema.triggers WHERE trigger_schema = DATABASE()"
                ))
            return sum(1 for (n,) in found if any(n.startswith(x) for x in names) or n in names)


def _table(name: str) -> Table:
    return Table(name, MetaData(), Column("id", BigInteger, primary_key=True, autoincrement=False),
                 Column("user_id", BigInteger), Column("note", String(20)))


@pytest.fixture(params=BACKENDS)
def captured(request: pytest.FixtureRequest, database_factory: DatabaseFactory) -> Iterator[Captured]:
    """A table with rows 1 and 2 and capture installed, in a fresh database of each backend."""
    engine = database_factory.engine(database_factory(request.param, 1)[0])
    table = _table("trig_orders")
    with engine.begin() as connection:
        table.create(connection)
        LOG.create(connection, checkfirst=True)
        connection.execute(insert(table), [{"id": 1, "user_id": 10, "note": "a"},
                                           {"id": 2, "user_id": 20, "note": "b"}])
        triggers.install_capture(connection, table, job=JOB, pk="id", key="user_id")
    yield Captured(engine, table)


def _write(c: Captured, statement: sa.Executable) -> None:
    with c.engine.begin() as connection:
        connection.execute(statement)


def test_insert_update_delete_are_logged(captured: Captured) -> None:
    """Each change logs its table, key and shard key (new for insert, old for delete)."""
    t = captured.table
    _write(captured, insert(t).values(id=3, user_id=30, note="c"))
    _write(captured, update(t).where(t.c.id == 1).values(note="x"))
    _write(captured, delete(t).where(t.c.id == 2))
    assert captured.logged() == [("trig_orders", 3, 30), ("trig_orders", 1, 10), ("trig_orders", 2, 20)]


def test_update_moving_the_shard_key_logs_old_and_new(captured: Captured) -> None:
    """An UPDATE changing user_id logs the new key and the old one."""
    t = captured.table
    _write(captured, update(t).where(t.c.id == 1).values(user_id=11))
    assert sorted(captured.logged()) == [("trig_orders", 1, 10), ("trig_orders", 1, 11)]


def test_rolled_back_write_logs_nothing(captured: Captured) -> None:
    """A write whose transaction rolls back leaves no log row."""
    with captured.engine.connect() as connection:
        connection.execute(insert(captured.table).values(id=9, user_id=90, note="z"))
        connection.rollback()
    assert captured.logged() == []


def test_installing_twice_logs_once(captured: Captured) -> None:
    """A second install_capture adds no second set of triggers."""
    with captured.engine.begin() as connection:
        triggers.install_capture(connection, captured.table, job=JOB, pk="id", key="user_id")
    _write(captured, insert(captured.table).values(id=3, user_id=30, note="c"))
    assert captured.logged() == [("trig_orders", 3, 30)]


def _fence(c: Captured) -> None:
    with c.engine.begin() as connection:
        triggers.install_fence(connection, c.table, job=JOB)


@pytest.mark.parametrize("kind", ["insert", "update", "delete"])
def test_fence_refuses_writes_and_logs_nothing(captured: Captured, kind: str) -> None:
    """A fenced table refuses each kind of write with the fence mark; nothing changes or is logged."""
    t = captured.table
    _fence(captured)
    statement = {"insert": insert(t).values(id=5, user_id=50, note="e"),
                 "update": update(t).where(t.c.id == 1).values(note="y"),
                 "delete": delete(t).where(t.c.id == 1)}[kind]
    with pytest.raises(sa.exc.DBAPIError, match=FENCE_MARK):
        _write(captured, statement)
    assert captured.rows() == [(1, 10, "a"), (2, 20, "b")] and captured.logged() == []


def test_fence_bypass_lets_its_own_transaction_write(captured: Captured) -> None:
    """Inside fence_bypass the connection writes (and is logged); afterwards the fence holds."""
    t = captured.table
    _fence(captured)
    with captured.engine.begin() as connection, triggers.fence_bypass(connection, t, job=JOB):
        connection.execute(update(t).where(t.c.id == 1).values(note="ok"))
    assert captured.rows()[0] == (1, 10, "ok") and captured.logged() == [("trig_orders", 1, 10)]
    with pytest.raises(sa.exc.DBAPIError, match=FENCE_MARK):
        _write(captured, update(t).where(t.c.id == 1).values(note="no"))


def test_fence_holds_for_other_connections_during_a_bypass(captured: Captured) -> None:
    """While one connection bypasses the fence, another cannot write (refused; on SQLite, locked)."""
    t = captured.table
    _fence(captured)
    sqlite = captured.engine.dialect.name == "sqlite"
    other = sa.create_engine(captured.engine.url, connect_args={"timeout": 0.2}) if sqlite else captured.engine
    refused = "database is locked" if sqlite else FENCE_MARK
    try:
        with captured.engine.begin() as connection, triggers.fence_bypass(connection, t, job=JOB):
            connection.execute(update(t).where(t.c.id == 1).values(note="ok"))
            with pytest.raises(sa.exc.DBAPIError, match=refused), other.begin() as second:
                second.execute(update(t).where(t.c.id == 2).values(note="no"))
    finally:
        if sqlite:
            other.dispose()
    assert [row[2] for row in captured.rows()] == ["ok", "b"]


def test_drops_remove_every_trigger_and_are_idempotent(captured: Captured) -> None:
    """drop_fence and drop_capture (twice) leave no trigger; writes go through unlogged."""
    _fence(captured)
    assert captured.trigger_count() > 0
    for _ in range(2):
        with captured.engine.begin() as connection:
            triggers.drop_fence(connection, captured.table, job=JOB)
            triggers.drop_capture(connection, captured.table, job=JOB)
    assert captured.trigger_count() == 0
    _write(captured, insert(captured.table).values(id=3, user_id=30, note="c"))
    assert captured.logged() == []


def test_table_name_needing_quotes(captured: Captured) -> None:
    """A table named 'Order-Items 01' is captured and fenced like any other."""
    odd = _table("Order-Items 01")
    with captured.engine.begin() as connection:
        odd.create(connection)
        triggers.install_capture(connection, odd, job=JOB, pk="id", key="user_id")
    _write(captured, insert(odd).values(id=7, user_id=70, note="q"))
    assert ("Order-Items 01", 7, 70) in captured.logged()
    with captured.engine.begin() as connection:
        triggers.install_fence(connection, odd, job=JOB)
    with pytest.raises(sa.exc.DBAPIError, match=FENCE_MARK):
        _write(captured, delete(odd))


@pytest.mark.parametrize("captured", [p for p in BACKENDS if p.values == ("postgresql",)], indirect=True)
def test_truncate_of_a_captured_table_is_refused_on_postgresql(captured: Captured) -> None:
    """PostgreSQL: TRUNCATE (which no row trigger sees) fails naming the move; rows stay.
    MariaDB's TRUNCATE fires no trigger and SQLite has none, so only PostgreSQL refuses."""
    with pytest.raises(sa.exc.DBAPIError, match=r"is being resharded \(job .*\); a TRUNCATE cannot be captured"):
        with captured.engine.begin() as connection:
            connection.execute(text(f"TRUNCATE {captured.table.name}"))
    assert len(captured.rows()) == 2
    with captured.engine.begin() as connection:
        triggers.drop_capture(connection, captured.table, job=JOB)
        connection.execute(text(f"TRUNCATE {captured.table.name}"))
    assert captured.rows() == []


def test_bad_job_name_is_refused(captured: Captured) -> None:
    """A job name with a quote raises TriggerError naming the allowed characters."""
    with captured.engine.begin() as connection, pytest.raises(TriggerError, match="letters, digits"):
        triggers.install_fence(connection, captured.table, job="x'; DROP")
