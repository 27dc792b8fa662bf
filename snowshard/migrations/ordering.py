"""The order of a revision's drops, so that downgrades run on MariaDB/MySQL too.

An index dropped just before its table (a downgrade of the revision that created both) is
left out, since dropping the table drops it, and a foreign key dropped on a table is dropped
before the indexes, unique constraints and columns dropped on the same table: MariaDB/MySQL
refuse to drop an index a foreign key still needs.
"""

from __future__ import annotations

from typing import NamedTuple

from alembic.operations import MigrateOperation
from alembic.operations import ops as alembic_ops

from snowshard._compat import alembic_reverse
from snowshard.migrations.naming import Shard
from snowshard.migrations.ops import ShardedOperation

__all__ = ["Item", "order_drops", "regroup", "table_of"]

_TableKey = tuple[str | None, str]
"""(schema, physical table name)."""


class Item(NamedTuple):
    """One operation of a revision's stream and the ModifyTableOps it came from, if any."""

    op: MigrateOperation
    parent: alembic_ops.ModifyTableOps | None


def table_of(op: MigrateOperation) -> str | None:
    """The table a plain Alembic operation changes, if it names one."""
    if isinstance(op, alembic_ops.CreateForeignKeyOp):
        return op.source_table
    name = getattr(op, "table_name", None)
    return None if name is None else str(name)


def _plain(op: MigrateOperation) -> MigrateOperation:
    """The Alembic operation ``op`` is, or stands for (a sharded one's template)."""
    return op.template if isinstance(op, ShardedOperation) else op


def _tables(item: Item) -> frozenset[_TableKey]:
    """The physical tables an operation changes (every table of a sharded one's spec)."""
    op = item.op
    if isinstance(op, ShardedOperation):
        return frozenset((op.schema, name) for name in op.spec.table_names)
    if item.parent is not None:
        return frozenset({(item.parent.schema, item.parent.table_name)})
    table = table_of(op)
    return frozenset() if table is None else frozenset({(getattr(op, "schema", None), table)})


def _is_fk_drop(op: MigrateOperation) -> bool:
    plain = _plain(op)
    return isinstance(plain, alembic_ops.DropConstraintOp) and plain.constraint_type == "foreignkey"


def _may_need_a_fk_gone(op: MigrateOperation) -> bool:
    """Drops that MariaDB/MySQL refuse while a foreign key still uses what they remove."""
    plain = _plain(op)
    if isinstance(plain, alembic_ops.DropConstraintOp):
        return plain.constraint_type != "foreignkey"
    return isinstance(plain, (alembic_ops.DropIndexOp, alembic_ops.DropColumnOp))


def _fk_tables(item: Item) -> frozenset[_TableKey]:
    """The tables a dropped foreign key is on, and the ones it refers to (when known)."""
    tables = set(_tables(item))
    reverse = alembic_reverse(_plain(item.op))
    if isinstance(reverse, alembic_ops.CreateForeignKeyOp):
        schema = reverse.kw.get("referent_schema")
        op = item.op
        if isinstance(op, ShardedOperation):  # its templates were checked when it was made
            tables |= {
                (schema, Shard(op.spec, index).referent(reverse.referent_table))
                for index in range(op.spec.count)
            }
        else:
            tables.add((schema, reverse.referent_table))
    return frozenset(tables)


def order_drops(items: list[Item]) -> list[Item]:
    """Order the drops so that the stream runs on every backend.

    An index dropped before its table is dropped later in the stream is left out: the table
    takes it along, and MariaDB/MySQL refuse to drop an index a foreign key of the table
    still uses (the downgrade of a revision that created both). A dropped foreign key moves
    before the first index, unique constraint or column dropped on its tables, for the same
    reason; dropping a foreign key earlier never breaks anything.
    """
    kept: list[Item] = []
    dropped_later: set[_TableKey] = set()
    for item in reversed(items):
        plain = _plain(item.op)
        tables = _tables(item)
        if isinstance(plain, alembic_ops.DropIndexOp) and tables and tables <= dropped_later:
            continue
        if isinstance(plain, alembic_ops.DropTableOp):
            dropped_later |= tables
        kept.append(item)
    kept.reverse()

    ordered: list[Item] = []
    for item in kept:
        position = len(ordered)
        if _is_fk_drop(item.op):
            tables = _fk_tables(item)
            for index, earlier in enumerate(ordered):
                if _may_need_a_fk_gone(earlier.op) and tables & _tables(earlier):
                    position = index
                    break
        ordered.insert(position, item)
    return ordered


def regroup(items: list[Item]) -> list[MigrateOperation]:
    """Operations of one table that follow each other go back into one ModifyTableOps."""
    result: list[MigrateOperation] = []
    pending: alembic_ops.ModifyTableOps | None = None
    for op, parent in items:
        if parent is None:
            pending = None
            result.append(op)
            continue
        if pending is None or (pending.table_name, pending.schema) != (
            parent.table_name,
            parent.schema,
        ):
            pending = alembic_ops.ModifyTableOps(parent.table_name, [], schema=parent.schema)
            result.append(pending)
        pending.ops.append(op)
    return result
