"""One rewrite between a sharded operation's template and a physical table's operation.

:data:`FIELDS` says, for each Alembic operation a sharded operation can wrap, which of its
attributes name physical objects: the table it changes, index and constraint names, a
foreign key's referent table, the foreign keys of a column or of a whole new table, the
indexed expressions, and the operation a drop undoes. :func:`rewrite` copies an operation
and passes each of those through a :class:`~snowshard.migrations.naming.Namer`; the same
function, with different namers, gives

* ``rewrite(template, Shard(spec, i))``: the plain operation the runner invokes on table
  ``i`` (:meth:`ShardedOperation.physical`);
* ``rewrite(op, Templater(...))``: the template of an operation autogenerate found on one
  physical table (its inverse);
* ``rewrite(op, AS_GIVEN)``: a sharded operation's private copy of what it was given.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, NamedTuple

import sqlalchemy as sa
from alembic.operations import MigrateOperation
from alembic.operations import ops as alembic_ops

from snowshard._compat import (
    alembic_reverse,
    copy_schema_item,
    is_type_bound,
    set_alembic_reverse,
)
from snowshard.migrations.naming import Namer
from snowshard.spec import ShardConfigError

__all__ = ["FIELDS", "Fields", "fields_of", "rewrite", "rewrite_column", "rewrite_table"]


class Fields(NamedTuple):
    """The attributes of one kind of Alembic operation that name physical objects."""

    table: str = "table_name"
    """The table the operation changes."""
    names: tuple[str, ...] = ()
    """Index and constraint names."""
    referents: tuple[str, ...] = ()
    """Other tables it names (a foreign key's referent)."""
    column: str | None = None
    """A column it adds, whose own foreign keys name tables and constraints."""
    expressions: str | None = None
    """The indexed columns and expressions."""
    undoes: bool = False
    """A drop that carries the operation it undoes (rewritten the same way)."""
    definition: bool = False
    """A new table: every column, constraint and foreign key of it."""


FIELDS: Mapping[type[MigrateOperation], Fields] = {
    alembic_ops.CreateTableOp: Fields(definition=True),
    alembic_ops.DropTableOp: Fields(undoes=True),
    alembic_ops.AddColumnOp: Fields(column="column"),
    alembic_ops.DropColumnOp: Fields(undoes=True),
    alembic_ops.AlterColumnOp: Fields(),
    alembic_ops.CreateIndexOp: Fields(names=("index_name",), expressions="columns"),
    alembic_ops.DropIndexOp: Fields(names=("index_name",), undoes=True),
    alembic_ops.CreateUniqueConstraintOp: Fields(names=("constraint_name",)),
    alembic_ops.CreateForeignKeyOp: Fields(
        table="source_table", names=("constraint_name",), referents=("referent_table",)
    ),
    alembic_ops.CreateCheckConstraintOp: Fields(names=("constraint_name",)),
    alembic_ops.DropConstraintOp: Fields(names=("constraint_name",), undoes=True),
}
"""Every Alembic operation a sharded operation wraps, and the fields that name tables."""


def fields_of(op_type: type[MigrateOperation]) -> Fields:
    """The :class:`Fields` of an Alembic operation class (or of its nearest base)."""
    for cls in op_type.__mro__:
        fields = FIELDS.get(cls)
        if fields is not None:
            return fields
    raise NotImplementedError(f"no sharded operation for alembic {op_type.__name__}")


def rewrite(op: MigrateOperation, namer: Namer) -> MigrateOperation:
    """A copy of ``op`` with every name of a physical object passed through ``namer``."""
    fields = fields_of(type(op))
    if fields.definition:
        assert isinstance(op, alembic_ops.CreateTableOp)
        return alembic_ops.CreateTableOp.from_table(rewrite_table(op.to_table(), namer))
    made = copy.copy(op)
    setattr(made, fields.table, namer.table)
    for field in fields.names:
        setattr(made, field, namer.name(getattr(op, field), field.replace("_", " ")))
    for field in fields.referents:
        setattr(made, field, namer.referent(getattr(op, field)))
    if fields.column is not None:
        setattr(made, fields.column, rewrite_column(getattr(op, fields.column), namer))
    if fields.expressions is not None:
        expressions = getattr(op, fields.expressions)
        setattr(made, fields.expressions, [namer.expression(e) for e in expressions])
    if fields.undoes:
        undone = alembic_reverse(op)
        set_alembic_reverse(made, None if undone is None else rewrite(undone, namer))
    return made


# --------------------------------------------------------------------------- schema items


def _foreign_key_options(
    item: sa.ForeignKey | sa.ForeignKeyConstraint, namer: Namer
) -> dict[str, Any]:
    """What a foreign key (column-level or a constraint) is made with, besides its columns."""
    return {
        "name": namer.name(item.name, "foreign key name"),
        "onupdate": item.onupdate,
        "ondelete": item.ondelete,
        "deferrable": item.deferrable,
        "initially": item.initially,
        "use_alter": item.use_alter,
        "match": item.match,
        **item.dialect_kwargs,
    }


def _foreign_key_constraint(
    constraint: sa.ForeignKeyConstraint, namer: Namer
) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        constraint.column_keys,
        [namer.target(element.target_fullname) for element in constraint.elements],
        **_foreign_key_options(constraint, namer),
    )


def _without_foreign_keys(column: sa.Column[Any]) -> sa.Column[Any]:
    """A detached copy of a detached ``column``, minus its ``ForeignKey`` objects."""
    made: sa.Column[Any] = copy_schema_item(column)
    if made.foreign_keys:
        # attached, its foreign keys belong to constraints, which a copy leaves out
        sa.Table("copy", sa.MetaData(), made)
        made = copy_schema_item(made)
    return made


def rewrite_column(column: sa.Column[Any], namer: Namer) -> sa.Column[Any]:
    """A detached copy of ``column``, its constraints' names and foreign keys rewritten.

    A detached column's ``ForeignKey`` objects are part of it (``add_column`` creates them).
    A column attached to a table (as autogenerate gives it) is copied without them: there
    they are the table's constraints, with operations of their own.
    """
    own: list[sa.ForeignKey] = list(column.foreign_keys) if column.table is None else []
    made = _without_foreign_keys(column) if own else copy_schema_item(column)
    for constraint in made.constraints:
        constraint.name = namer.name(constraint.name, "constraint name")
    for foreign_key in own:
        made.append_foreign_key(
            sa.ForeignKey(
                namer.target(foreign_key.target_fullname),
                **_foreign_key_options(foreign_key, namer),
            )
        )
    return made


def rewrite_table(table: sa.Table, namer: Namer) -> sa.Table:
    """A copy of ``table`` named ``namer.table``, with every name and foreign key rewritten.

    Indexes are refused: a new table's operation carries none (Alembic creates them with
    operations of their own), so they would be lost.
    """
    if table.indexes:
        names = sorted(str(index.name) for index in table.indexes)
        raise ShardConfigError(
            f"indexes {names} in a sharded table definition would not be created: take "
            f"index=True / sa.Index out of the table and add each with "
            f"op.create_sharded_index('ix_{{table}}_<column>', spec, [<column>])"
        )
    columns = [rewrite_column(column, namer) for column in table.columns]
    for column in columns:
        column.unique = column.index = False  # their constraints are copied explicitly
    info = {key: value for key, value in table.info.items() if key != "snowshard"}
    made = sa.Table(
        namer.table,
        sa.MetaData(),
        *columns,
        schema=table.schema,
        comment=table.comment,
        info=info,
        **table.kwargs,
    )
    for constraint in table.constraints:
        if is_type_bound(constraint):
            continue  # re-created by the column's type (Boolean / Enum CHECK)
        if isinstance(constraint, sa.ForeignKeyConstraint):
            made.append_constraint(_foreign_key_constraint(constraint, namer))
        elif not (isinstance(constraint, sa.PrimaryKeyConstraint) and not constraint.columns):
            copied = copy_schema_item(constraint, target_table=made)
            copied.name = namer.name(constraint.name, "constraint name")
            made.append_constraint(copied)
    return made
