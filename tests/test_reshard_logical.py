"""Change capture by PostgreSQL logical replication (capture="logical") instead of triggers.

The second PostgreSQL server (``.ci/servers.sh``: 127.0.0.1:5433) runs with
``wal_level = logical``; the first keeps ``replica``, which is how the refusal is tested.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import select, update

from snowshard.operations.reshard import Reshard, ReshardError, ReshardPlanError
from snowshard.operations.reshard.logical import Change, PgOutputReader, log_rows, slot_name
from snowshard.sharding import sharded_model
from tests.backends import DatabaseFactory
from tests.reshard_world import ReshardWorld, Twin, Writers, build

JOB = "rs-orders"


@pytest.fixture
def logical_world(database_factory: DatabaseFactory, postgres2_url: str) -> Iterator[ReshardWorld]:
    """The old layout (4 tables, 300 rows) and its twin in one database of the server with
    wal_level = logical."""
    (url,) = database_factory("postgresql", 1, server_url=postgres2_url)
    yield build({"default": database_factory.engine(url)}, two_databases=False)


def _job(world: ReshardWorld) -> Reshard:
    return Reshard(world.plan(chunk_rows=64, capture="logical"), world.engines)


def _slots(engine: sa.Engine) -> int:
    """Slots of the job on ``engine``'s database (0 or 1)."""
    with engine.connect() as connection:
        return int(connection.execute(
            sa.text("SELECT count(*) FROM pg_replication_slots WHERE slot_name = :name"),
            {"name": slot_name(JOB, str(engine.url.database))},
        ).scalar_one())


def _capture_triggers(engine: sa.Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(sa.text(
            "SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal AND tgname LIKE 'ss\\_%\\_c%'"
        )).scalar_one())


def _replica_identity(engine: sa.Engine, table: str) -> str:
    with engine.connect() as connection:
        return str(connection.execute(
            sa.text("SELECT relreplident FROM pg_class WHERE relname = :t"), {"t": table}
        ).scalar_one())


@pytest.mark.postgres
def test_split_under_writers_with_logical_capture_equals_the_twin(logical_world: ReshardWorld) -> None:
    """4 -> 8 tables while writers insert, update, delete, captured from the WAL with no
    trigger on the sources: the new layout equals the twin; cleanup drops the slot."""
    job = _job(logical_world)
    with Writers(logical_world) as writers:
        job.start()
        assert _capture_triggers(logical_world.bind) == 0
        assert _slots(logical_world.bind) == 1
        assert job.verify().ok
        job.cutover()
    assert writers.done["insert"] and writers.done["update"] and writers.done["delete"]
    assert _slots(logical_world.bind) == 0  # dropped at cutover: WAL is no longer held
    job.cleanup()
    assert logical_world.rows_of(logical_world.new) == logical_world.twin_rows()
    assert logical_world.placed_right(logical_world.new)


@pytest.mark.postgres
def test_an_update_of_the_shard_key_moves_the_row_between_targets(logical_world: ReshardWorld) -> None:
    """user_id 1 -> 5 (same old table, new tables 1 and 5): after the catch-up the row is in
    new table 5 only."""
    job = _job(logical_world)
    job.start()
    old, new = sharded_model(logical_world.old), sharded_model(logical_world.new)
    with logical_world.bind.begin() as connection:
        row_id = connection.execute(
            select(old.tables[1].c.id).where(old.tables[1].c.user_id % 4 == 1).limit(1)
        ).scalar_one()
        user = connection.execute(select(old.tables[1].c.user_id).where(old.tables[1].c.id == row_id)).scalar_one()
        moved_to = user + 4 if user % 8 == 1 else user - 4  # the other new table of old table 1
        connection.execute(update(old.tables[1]).where(old.tables[1].c.id == row_id).values(user_id=moved_to))
        connection.execute(update(Twin.__table__).where(Twin.__table__.c.id == row_id).values(user_id=moved_to))
    job.catch_up()
    with logical_world.bind.connect() as connection:
        homes = [i for i, t in enumerate(new.tables)
                 if connection.execute(select(t.c.id).where(t.c.id == row_id)).first() is not None]
    assert homes == [new.shard_of("user_id", moved_to)]
    job.cutover()
    assert logical_world.rows_of(logical_world.new) == logical_world.twin_rows()


@pytest.mark.postgres
def test_move_between_two_databases_with_logical_capture(
    database_factory: DatabaseFactory, postgres2_url: str
) -> None:
    """2x2 tables on a/b -> 2x4 tables on a/b, both on the logical server, under writers."""
    a, b = (database_factory.engine(u) for u in database_factory("postgresql", 2, server_url=postgres2_url))
    world = build({"a": a, "b": b}, two_databases=True)
    job = Reshard(world.plan(chunk_rows=64, capture="logical"), world.engines)
    with Writers(world):
        job.start()
        job.cutover()
    job.cleanup()
    assert world.rows_of(world.new) == world.twin_rows()
    assert world.placed_right(world.new)
    assert _slots(a) == _slots(b) == 0


@pytest.mark.postgres
def test_rollback_after_a_logical_cutover_keeps_every_write(logical_world: ReshardWorld) -> None:
    """Cut over, write, roll back (the way back is captured by triggers): the old layout
    holds every write, and its tables' replica identity is back to the default."""
    job = _job(logical_world)
    with Writers(logical_world):
        job.start()
        job.cutover()
        job.rollback()
    job.cleanup()
    assert logical_world.rows_of(logical_world.old) == logical_world.twin_rows()
    assert _replica_identity(logical_world.bind, "rs_orders_00") == "d"
    assert _slots(logical_world.bind) == 0


@pytest.mark.postgres
def test_a_server_without_wal_level_logical_is_refused(
    database_factory: DatabaseFactory, postgres_url: str
) -> None:
    """On a server with wal_level = replica, start raises ReshardPlanError before writing."""
    (url,) = database_factory("postgresql", 1, server_url=postgres_url)
    world = build({"default": database_factory.engine(url)}, two_databases=False)
    job = _job(world)
    with pytest.raises(ReshardPlanError, match=r"needs wal_level = logical on .* \(it is replica\)"):
        job.start()
    assert "snowshard_reshard_jobs" not in sa.inspect(world.bind).get_table_names()


def test_sqlite_sources_are_refused(database_factory: DatabaseFactory) -> None:
    """capture='logical' on SQLite raises ReshardPlanError naming the database kind."""
    (url,) = database_factory("sqlite", 1)
    world = build({"default": database_factory.engine(url)}, two_databases=False)
    with pytest.raises(ReshardPlanError, match=r"needs PostgreSQL source databases, not sqlite"):
        _job(world).start()


def test_an_unknown_capture_is_refused(database_factory: DatabaseFactory) -> None:
    """capture must be 'triggers' or 'logical'."""
    (url,) = database_factory("sqlite", 1)
    world = build({"default": database_factory.engine(url)}, two_databases=False)
    with pytest.raises(ReshardPlanError, match=r"capture must be one of \('triggers', 'logical'\), got 'wal'"):
        world.plan(capture="wal")


@pytest.mark.postgres
def test_a_step_with_another_capture_than_the_job_began_with_is_refused(logical_world: ReshardWorld) -> None:
    """A job started with logical capture may not be cut over with triggers (it would miss
    what the slot holds)."""
    _job(logical_world).start()
    with pytest.raises(ReshardPlanError, match=r"started with capture='logical'; resume it with the same"):
        logical_world.job().cutover()


# --------------------------------------------------------------------------- pgoutput, by hand


def _relation(relid: int, name: str, columns: list[str]) -> bytes:
    body = struct.pack(">i", relid) + b"public\0" + name.encode() + b"\0" + b"f" + struct.pack(">h", len(columns))
    for column in columns:
        body += b"\0" + column.encode() + b"\0" + struct.pack(">ii", 20, -1)
    return b"R" + body


def _tuple(values: list[str | None]) -> bytes:
    out = struct.pack(">h", len(values))
    for value in values:
        out += b"n" if value is None else b"t" + struct.pack(">i", len(value)) + value.encode()
    return out


def test_pgoutput_insert_update_delete_are_read() -> None:
    """Hand-made protocol-1 messages: a relation, then I, U (with the old row), D."""
    reader = PgOutputReader()
    assert reader.read(_relation(77, "rs_orders_01", ["id", "user_id", "note"])) is None
    insert = reader.read(b"I" + struct.pack(">i", 77) + b"N" + _tuple(["10", "5", None]))
    assert insert == Change("I", "rs_orders_01", None, {"id": "10", "user_id": "5", "note": None})
    changed = reader.read(b"U" + struct.pack(">i", 77) + b"O" + _tuple(["10", "5", "a"])
                          + b"N" + _tuple(["10", "9", "a"]))
    assert changed is not None and changed.old == {"id": "10", "user_id": "5", "note": "a"}
    assert list(log_rows(changed, "id", "user_id")) == [("rs_orders_01", 10, 5), ("rs_orders_01", 10, 9)]
    gone = reader.read(b"D" + struct.pack(">i", 77) + b"O" + _tuple(["11", "3", "b"]))
    assert gone is not None and list(log_rows(gone, "id", "user_id")) == [("rs_orders_01", 11, 3)]
    assert reader.read(b"B" + bytes(20)) is None


def test_an_update_keeping_its_shard_key_logs_one_row() -> None:
    """Old and new rows with the same id and user_id give one change log row."""
    change = Change("U", "t", {"id": "1", "user_id": "2"}, {"id": "1", "user_id": "2"})
    assert list(log_rows(change, "id", "user_id")) == [("t", 1, 2)]


def test_a_truncate_stops_the_catch_up() -> None:
    """A TRUNCATE message of a source table raises ReshardError naming the table."""
    reader = PgOutputReader()
    reader.read(_relation(5, "rs_orders_02", ["id", "user_id"]))
    with pytest.raises(ReshardError, match=r"\['rs_orders_02'\] were truncated during the move"):
        reader.read(b"T" + struct.pack(">ib", 1, 0) + struct.pack(">i", 5))


@pytest.mark.postgres
def test_status_leaves_the_slot_alone(logical_world: ReshardWorld) -> None:
    """status never reads the slot (reading takes it, and would fail a start pumping it at
    the same moment): after writes, status leaves the slot where it was; catch_up moves it."""
    job = _job(logical_world)
    job.start()
    old = sharded_model(logical_world.old)
    with logical_world.bind.begin() as connection:
        connection.execute(update(old.tables[0]).values(note="changed"))

    def confirmed() -> str:
        with logical_world.bind.connect() as connection:
            return str(connection.execute(sa.text(
                "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = :n"
            ), {"n": slot_name(JOB, str(logical_world.bind.url.database))}).scalar_one())

    before = confirmed()
    assert job.status().phase == "copied"
    assert confirmed() == before
    assert job.catch_up() > 0
    assert confirmed() != before
