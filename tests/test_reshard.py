"""Online resharding: a split in one database and a move between two, under steady writers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import BigInteger, insert, select, update
from sqlalchemy.orm import DeclarativeBase, mapped_column

from snowshard.operations.reshard import Reshard, ReshardPhaseError, ReshardPlan, ReshardPlanError
from snowshard.sharding import Sharded, Shards, sharded_model
from snowshard.sharding.shard_map import ShardMap, StaleShardMap
from tests.backends import DatabaseFactory
from tests.reshard_world import ReshardWorld, Writers, build, declare
from tests.test_sharding_helpers import BACKEND_MARKS

ONE_DB = [pytest.param(b, id=b, marks=BACKEND_MARKS[b]) for b in ("sqlite", "postgresql", "mysql")]
TWO_DB = [pytest.param(b, id=b, marks=BACKEND_MARKS[b]) for b in ("postgresql", "mysql")]


def _engines(database_factory: DatabaseFactory, backend: str, count: int) -> list[sa.Engine]:
    kw: dict[str, Any] = {"connect_args": {"timeout": 30}} if backend == "sqlite" else {}
    return [database_factory.engine(url, **kw) for url in database_factory(backend, count)]


@pytest.fixture(params=ONE_DB)
def one_db(request: pytest.FixtureRequest, database_factory: DatabaseFactory) -> Iterator[ReshardWorld]:
    """Old layout (4 tables) with 300 rows in one database, and its twin."""
    (engine,) = _engines(database_factory, request.param, 1)
    yield build({"default": engine}, two_databases=False)


@pytest.fixture(params=TWO_DB)
def two_db(request: pytest.FixtureRequest, database_factory: DatabaseFactory) -> Iterator[ReshardWorld]:
    """Old layout over databases a and b (two servers), with 300 rows, and its twin."""
    a, b = _engines(database_factory, request.param, 2)
    yield build({"a": a, "b": b}, two_databases=True)


def _move(world: ReshardWorld) -> dict[str, int]:
    job = world.job(chunk_rows=64)
    with Writers(world) as writers:
        job.start()
        assert job.verify().ok
        report = job.cutover()
        assert report.map_version == 1
        time.sleep(0.3)  # writers go on in the new layout
    assert job.cleanup().startswith("cleaned up")
    return writers.done


def test_split_in_one_database_under_writers_equals_the_twin(one_db: ReshardWorld) -> None:
    """4 -> 8 tables while writers insert, update, delete: the new layout equals the twin."""
    done = _move(one_db)
    assert done["insert"] and done["update"] and done["delete"]
    assert one_db.rows_of(one_db.new) == one_db.twin_rows()
    assert one_db.placed_right(one_db.new)


def test_move_between_two_databases_under_writers_equals_the_twin(two_db: ReshardWorld) -> None:
    """2x2 tables on a/b -> 2x4 tables on a/b (two servers) under writers: equals the twin."""
    _move(two_db)
    assert two_db.rows_of(two_db.new) == two_db.twin_rows()
    assert two_db.placed_right(two_db.new)


def test_merge_tables_under_writers_equals_the_twin(database_factory: DatabaseFactory) -> None:
    """4 -> 2 tables (a merge) while writers write: the new layout equals the twin."""
    (engine,) = _engines(database_factory, "sqlite", 1)
    world = build({"default": engine}, two_databases=False, models=declare(None, (4, 2)))
    _move(world)
    assert world.rows_of(world.new) == world.twin_rows()
    assert world.placed_right(world.new)


@pytest.mark.parametrize("backend", ONE_DB[:2])
def test_adding_two_servers_moves_tables_from_two_databases_to_four(
    database_factory: DatabaseFactory, backend: str
) -> None:
    """4 tables on a/b -> 4 tables on a/b/c/d (one each) under writers: equals the twin."""
    engines = dict(zip("abcd", _engines(database_factory, backend, 4)))
    def columns() -> dict[str, Any]:
        return {"id": mapped_column(BigInteger, primary_key=True, autoincrement=False),
                "user_id": mapped_column(BigInteger, index=True),
                "amount": mapped_column(BigInteger), "note": mapped_column(sa.String(40))}

    old = type("Order", (Sharded, type("OldBase", (DeclarativeBase,), {})), {
        "__tablename__": "rs_orders", **columns(),
        "__shards__": Shards(4, key="user_id", databases={"a": range(0, 2), "b": range(2, 4)})})
    new = type("OrderV2", (Sharded, type("NewBase", (DeclarativeBase,), {})), {
        "__tablename__": "rs_orders", **columns(),
        "__shards__": Shards(4, key="user_id", pattern="{name}_v2_{index:02d}",
                             databases={"a": [0], "b": [1], "c": [2], "d": [3]})})
    world = build(engines, two_databases=True, models=(old, new))
    _move(world)
    assert world.rows_of(world.new) == world.twin_rows()
    assert world.placed_right(world.new)
    for key, index in zip("abcd", range(4)):
        assert sa.inspect(engines[key]).has_table(f"rs_orders_v2_{index:02d}")


def test_a_second_job_on_the_same_table_is_refused(one_db: ReshardWorld) -> None:
    """While job 'rs-orders' is not cleaned up (rolled back included), another job moving
    rs_orders may not start; once it is cleaned up, the other runs."""
    first = one_db.job()
    first.start()
    other = Reshard(ReshardPlan.between(
        sharded_model(one_db.old), sharded_model(one_db.new), job="rs-orders-again"), one_db.engines)
    for expected in ("copied", "rolled_back"):
        with pytest.raises(ReshardPhaseError, match=rf"'rs_orders' is being moved by job 'rs-orders' \({expected}\)"):
            other.start()
        assert other.phase() is None
        if expected == "copied":
            first.rollback()
    first.cleanup()
    assert other.start().copied == 300


def test_cleanup_drops_the_old_tables(one_db: ReshardWorld) -> None:
    """After cutover and cleanup, only the new layout's tables are left."""
    job = one_db.job()
    job.start()
    job.cutover()
    job.cleanup()
    names = set(sa.inspect(one_db.bind).get_table_names())
    assert not names & {f"rs_orders_{i:02d}" for i in range(4)}
    assert {f"rs_orders_v2_{i:02d}" for i in range(8)} <= names


def test_rollback_after_cutover_keeps_every_write(one_db: ReshardWorld) -> None:
    """Writes made in the new layout after cutover are in the old layout after rollback."""
    job = one_db.job(chunk_rows=64)
    with Writers(one_db):
        job.start()
        job.cutover()
        time.sleep(0.3)
        job.rollback()
        time.sleep(0.2)
    assert ShardMap(one_db.bind).pick(one_db.old, one_db.new) is one_db.old
    assert one_db.rows_of(one_db.old) == one_db.twin_rows()
    job.cleanup()
    assert "rs_orders_v2_00" not in sa.inspect(one_db.bind).get_table_names()


def test_stale_instance_cannot_write_to_the_old_tables(one_db: ReshardWorld) -> None:
    """After cutover, a write through the old model fails with StaleShardMap and stores nothing."""
    job = one_db.job()
    job.start()
    job.cutover()
    old: Any = one_db.old
    with one_db.session() as session:
        session.add(old(id=1, user_id=3, amount=1, note="late"))
        with pytest.raises(StaleShardMap, match="reshard"):
            session.commit()
    with one_db.session() as session, pytest.raises(StaleShardMap):
        session.execute(update(old).where(old.user_id == 3).values(amount=2))
    assert 1 not in [row[0] for row in one_db.rows_of(one_db.new)]


def test_pick_follows_the_map(one_db: ReshardWorld) -> None:
    """pick() returns the old model before cutover and the new one after."""
    shard_map = ShardMap(one_db.bind)
    job = one_db.job()
    assert shard_map.pick(one_db.old, one_db.new) is one_db.old
    job.start()
    assert shard_map.pick(one_db.old, one_db.new) is one_db.old
    job.cutover()
    assert shard_map.pick(one_db.old, one_db.new) is one_db.new


def test_verify_finds_and_repairs_a_wrong_target_row(one_db: ReshardWorld) -> None:
    """A target row changed behind the reshard's back is reported, then repaired."""
    job = one_db.job(chunk_rows=50)
    job.start()
    new = sharded_model(one_db.new)
    with one_db.bind.begin() as connection:
        first = new.tables[0]
        victim = connection.execute(select(first.c.id).limit(1)).scalar_one()
        connection.execute(update(first).where(first.c.id == victim).values(amount=-1))
    report = job.verify(repair=True)
    assert len(report.mismatches) == 1 and report.repaired
    assert report.mismatches[0].low <= victim < report.mismatches[0].high
    assert job.verify().ok


def test_verify_finds_a_misplaced_row(one_db: ReshardWorld) -> None:
    """A row copied into a table its shard key does not route to is a mismatch."""
    job = one_db.job()
    job.start()
    new = sharded_model(one_db.new)
    with one_db.bind.begin() as connection:
        row = connection.execute(select(*new.tables[0].columns).limit(1)).one()
        connection.execute(new.tables[0].delete().where(new.tables[0].c.id == row.id))
        connection.execute(insert(new.tables[1]).values(**row._mapping))
    assert not job.verify().ok


def test_a_row_in_the_wrong_source_table_still_reaches_its_target(one_db: ReshardWorld) -> None:
    """A source row outside the table its key routes to (written there by hand) is copied
    to the target table its key routes to, not dropped by the copy's per-table INSERTs."""
    old = sharded_model(one_db.old)
    with one_db.bind.begin() as connection:
        row = connection.execute(select(*old.tables[1].columns).limit(1)).one()
        connection.execute(old.tables[1].delete().where(old.tables[1].c.id == row.id))
        connection.execute(insert(old.tables[0]).values(**row._mapping))
    job = one_db.job()
    job.start()
    assert job.status().copied == 300
    job.cutover()
    assert one_db.rows_of(one_db.new) == one_db.twin_rows()
    assert one_db.placed_right(one_db.new)


@pytest.mark.parametrize(
    ("source", "target", "index", "fed"),
    [
        (Shards(4, key="user_id"), Shards(8, key="user_id"), 1, (1, 5)),
        (Shards(4, key="user_id"), Shards(16, key="user_id"), 3, (3, 7, 11, 15)),
        (Shards(3, key="user_id"), Shards(6, key="user_id"), 2, (2, 5)),
        (Shards(4, key="user_id"), Shards(6, key="user_id"), 0, tuple(range(6))),
        (Shards(4, key="user_id"), Shards(8, key="id"), 0, tuple(range(8))),
    ],
    ids=["gene-4-8", "gene-4-16", "mod-3-6", "not-a-multiple", "other-key"],
)
def test_fed_by_names_the_targets_a_source_table_can_feed(
    source: Shards, target: Shards, index: int, fed: tuple[int, ...]
) -> None:
    """Same key, modulo strategies, target count a multiple: t % n_source == s; else all."""
    base = type("FedBase", (DeclarativeBase,), {})
    model = type("FedOrder", (Sharded, base), {
        "__tablename__": "fed_orders", "__shards__": source,
        "id": mapped_column(BigInteger, primary_key=True, autoincrement=False),
        "user_id": mapped_column(BigInteger)})
    plan = ReshardPlan.for_model(
        sharded_model(model),
        Shards(target.count, key=target.key, pattern="{name}_v2_{index:02d}"),
    )
    assert plan.fed_by(index) == fed
    with_all_keys = {t for s in range(source.count) for t in plan.fed_by(s)}
    assert with_all_keys == set(range(target.count))  # every target is fed by some source


def test_status_counts_copied_rows(one_db: ReshardWorld) -> None:
    """status() after start: copied, all 300 rows, nothing waiting."""
    job = one_db.job()
    assert job.status().phase == "not started"
    status = job.start()
    assert (status.phase, status.copied, status.source_rows, status.lag) == ("copied", 300, 300, 0)


def test_start_again_copies_nothing_twice(one_db: ReshardWorld) -> None:
    """A second start (as after a crash) finds the checkpoints and adds no row."""
    job = one_db.job()
    job.start()
    job.start()
    assert one_db.rows_of(one_db.new) == one_db.twin_rows()


def test_cutover_before_start_is_refused(one_db: ReshardWorld) -> None:
    """cutover on a job never started raises ReshardPhaseError naming the phase."""
    with pytest.raises(ReshardPhaseError, match="not started"):
        one_db.job().cutover()


def test_plan_sharing_tables_is_refused(one_db: ReshardWorld) -> None:
    """A target layout reusing the source's table names is refused with the fix."""
    with pytest.raises(ReshardPlanError, match="pattern="):
        ReshardPlan.for_model(sharded_model(one_db.old), Shards(8, key="user_id"))


def test_bad_job_name_is_refused(one_db: ReshardWorld) -> None:
    """A job name with spaces is refused, naming the allowed characters."""
    with pytest.raises(ReshardPlanError, match="letters, digits"):
        ReshardPlan.for_model(sharded_model(one_db.old), Shards(8, key="user_id", pattern="{name}_n{index}"), job="my job")
