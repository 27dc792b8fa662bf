"""The target tables of a move, made by snowshard's own migration operations.

``start`` creates the target layout's tables with the same sharded operations an Alembic
revision would run (:mod:`snowshard.migrations.ops`): one ``create_sharded_table`` and a
``create_sharded_index`` per index of the table, run on each target database with
``snowshard_database`` set to its key, so each database gets exactly its own tables and the
DDL, names included, is what ``alembic upgrade`` would emit for that layout. Tables and
indexes that exist already are skipped (a resumed ``start``, or targets an application's
own revision created first), as an upgrade skips them.

:func:`revision_text` prints the same operations as Python for an Alembic revision, for
teams that keep every table in their migration history.
"""

from __future__ import annotations

from collections.abc import Mapping

from alembic.autogenerate import render_python_code
from alembic.operations import Operations
from alembic.operations import ops as alembic_ops
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine

from snowshard.migrations.naming import Shard, Templater
from snowshard.migrations.ops import ShardedOperation, sharded_operation
from snowshard.migrations.physical import rewrite
from snowshard.migrations.runner import DATABASE_OPTION
from snowshard.operations.reshard.plan import ReshardPlan

__all__ = ["create_targets", "revision_text", "target_operations"]


def target_operations(plan: ReshardPlan) -> list[ShardedOperation]:
    """The sharded operations that create ``plan``'s target tables and their indexes."""
    spec = plan.target.spec
    first = plan.tables(plan.target)[0]  # its names stand for every table's, as templates
    templater = Templater(Shard(spec, 0), lambda _name: None)
    create = rewrite(alembic_ops.CreateTableOp.from_table(first), templater)
    assert isinstance(create, alembic_ops.CreateTableOp)
    # the logical table's info names its model: not schema, and not the target's
    create.info = {k: v for k, v in (create.info or {}).items() if not str(k).startswith("snowshard")}
    made = [sharded_operation(spec, create)]
    for index in sorted(first.indexes, key=lambda ix: str(ix.name)):
        made.append(sharded_operation(spec, rewrite(alembic_ops.CreateIndexOp.from_index(index), templater)))
    return made


def create_targets(plan: ReshardPlan, engines: Mapping[str, Engine]) -> None:
    """Run :func:`target_operations` on every target database, one transaction each."""
    made = target_operations(plan)
    for database, _ in plan.by_database(plan.target):
        with engines[database].begin() as connection:
            operations = Operations(MigrationContext.configure(connection, opts={DATABASE_OPTION: database}))
            for operation in made:
                operations.invoke(operation)


def revision_text(plan: ReshardPlan) -> str:
    """The body of an Alembic ``upgrade()`` creating ``plan``'s target tables."""
    return render_python_code(alembic_ops.UpgradeOps(ops=list(target_operations(plan))))
