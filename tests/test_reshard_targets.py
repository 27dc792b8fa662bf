"""A move's target tables come from the migration operations a revision would run."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext

from snowshard.migrations.runner import DATABASE_OPTION
from snowshard.operations.reshard import ReshardPlan
from snowshard.operations.reshard.targets import create_targets, revision_text, target_operations
from snowshard.sharding import sharded_model
from snowshard.spec import ShardSpec
from tests.backends import DatabaseFactory
from tests.reshard_world import ReshardWorld, build, declare
from tests.test_sharding_helpers import BACKEND_MARKS

ONE_DB = [pytest.param(b, id=b, marks=BACKEND_MARKS[b]) for b in ("sqlite", "postgresql", "mysql")]


@pytest.fixture(params=ONE_DB)
def world(request: pytest.FixtureRequest, database_factory: DatabaseFactory) -> ReshardWorld:
    """The old layout (4 tables, 300 rows) in one database of each backend."""
    (url,) = database_factory(request.param, 1)
    return build({"default": database_factory.engine(url)}, two_databases=False)


def _indexes(engine: sa.Engine, table: str) -> set[str]:
    return {str(ix["name"]) for ix in sa.inspect(engine).get_indexes(table)}


def test_start_creates_each_target_table_with_its_own_index_names(world: ReshardWorld) -> None:
    """Every target table exists with the index named after it (ix_<table>_user_id)."""
    world.job().start()
    for index in range(8):
        table = f"rs_orders_v2_{index:02d}"
        assert _indexes(world.bind, table) == {f"ix_{table}_user_id"}


def _two_database_plan() -> ReshardPlan:
    """The plan of the two-database world's move (4 tables on a/b -> 8 on a/b)."""
    old, new = declare({"a": range(2)})
    return ReshardPlan.between(sharded_model(old), sharded_model(new), job="targets")


def test_the_operations_are_a_table_and_its_indexes() -> None:
    """One create_sharded_table, then one create_sharded_index per index, with templates."""
    made = target_operations(_two_database_plan())
    assert [type(op).__name__ for op in made] == ["CreateShardedTableOp", "CreateShardedIndexOp"]
    assert made[1].template.index_name == "ix_{table}_user_id"  # type: ignore[attr-defined]
    assert made[0].spec.count == 8 and made[0].spec.pattern == "{name}_v2_{index:02d}"


def test_revision_text_runs_as_an_upgrade(tmp_path: Path) -> None:
    """The printed upgrade() lines, run by Alembic on database b, create b's four tables."""
    plan = _two_database_plan()
    text = revision_text(plan)
    assert "op.create_sharded_table(ShardSpec('rs_orders', 8" in text
    assert "op.create_sharded_index('ix_{table}_user_id'" in text
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        with engine.begin() as connection:
            op = Operations(MigrationContext.configure(connection, opts={DATABASE_OPTION: "b"}))
            body = "\n".join(line.strip() for line in text.splitlines())
            exec(body, {"op": op, "sa": sa, "ShardSpec": ShardSpec})  # noqa: S102 - our own output
        names = set(sa.inspect(engine).get_table_names())
        assert names == {f"rs_orders_v2_{i:02d}" for i in range(4, 8)}
        assert _indexes(engine, "rs_orders_v2_05") == {"ix_rs_orders_v2_05_user_id"}
    finally:
        engine.dispose()


def test_targets_a_revision_made_first_are_kept_as_they_are(world: ReshardWorld) -> None:
    """Targets created beforehand by the revision (with one more index of the team's own)
    are left alone by start, which copies every row into them."""
    plan = world.plan()
    with world.bind.begin() as connection:
        op = Operations(MigrationContext.configure(connection, opts={DATABASE_OPTION: "default"}))
        for operation in target_operations(plan):
            op.invoke(operation)
        op.create_sharded_index("ix_{table}_amount", plan.target.spec, ["amount"])
    job = world.job()
    assert job.start().copied == 300
    assert _indexes(world.bind, "rs_orders_v2_06") == {"ix_rs_orders_v2_06_user_id", "ix_rs_orders_v2_06_amount"}


def test_create_targets_twice_changes_nothing(world: ReshardWorld) -> None:
    """A resumed start runs the operations again: existing tables and indexes are skipped."""
    plan = world.plan()
    create_targets(plan, world.engines)
    create_targets(plan, world.engines)
    assert {f"rs_orders_v2_{i:02d}" for i in range(8)} <= set(sa.inspect(world.bind).get_table_names())


@pytest.mark.postgres
def test_each_target_database_gets_only_its_tables(database_factory: DatabaseFactory) -> None:
    """Across two PostgreSQL servers, a gets targets 0-3 and b targets 4-7."""
    a, b = (database_factory.engine(u) for u in database_factory("postgresql", 2))
    world = build({"a": a, "b": b}, two_databases=True)
    create_targets(world.plan(), world.engines)
    for engine, indices in ((a, range(4)), (b, range(4, 8))):
        targets = {n for n in sa.inspect(engine).get_table_names() if n.startswith("rs_orders_v2_")}
        assert targets == {f"rs_orders_v2_{i:02d}" for i in indices}
