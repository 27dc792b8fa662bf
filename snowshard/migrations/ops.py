"""Alembic operations that change every physical table of a sharded table at once.

A sharded model has ``spec.count`` physical tables (``orders_00`` .. ``orders_15``) spread
over several databases (see :class:`~snowshard.spec.ShardSpec`). Each operation here is an
Alembic :class:`~alembic.operations.MigrateOperation`, registered on
:class:`~alembic.operations.Operations` once ``snowshard.migrations`` is imported::

    from alembic import op
    import sqlalchemy as sa
    from snowshard.spec import ShardSpec

    ORDERS = ShardSpec("orders", 16, databases={"default": range(8), "db1": range(8, 16)})

    def upgrade() -> None:
        op.add_sharded_column(ORDERS, sa.Column("note", sa.String(200)))
        op.create_sharded_index("ix_{table}_note", ORDERS, ["note"])

Every operation mirrors the Alembic operation it is named after, with the ``ShardSpec`` in
the place of the table name, and has a ``reverse()`` (so autogenerate writes the downgrade).
It changes the physical tables of the database being migrated, skipping those that already
have the change (:mod:`snowshard.migrations.runner` says how).

**Names.** Index and constraint names, and the referent table of a foreign key, are
:meth:`str.format` templates filled in per physical table with ``{table}`` (the physical table
name), ``{name}`` (the spec's name) and ``{index}`` (the shard number)::

    op.create_sharded_foreign_key(
        "fk_{table}_order", ORDER_ITEMS, "orders_{index:02d}", ["order_id"], ["id"]
    )

PostgreSQL and SQLite need index names unique per database, so put ``{table}`` in them.
Write a literal brace as ``{{`` or ``}}``. A template that does not format raises
:class:`~snowshard.spec.ShardConfigError` when the operation is made, before any DDL.

Each class declares what it changes (:class:`Change`); which fields of the wrapped Alembic
operation name physical objects is declared in :data:`snowshard.migrations.physical.FIELDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, ClassVar, Literal, NamedTuple, TypeVar

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations
from alembic.operations import ops as alembic_ops
from sqlalchemy.sql.elements import ColumnElement, TextClause
from sqlalchemy.sql.schema import SchemaItem

from snowshard._compat import alembic_reverse
from snowshard.migrations.naming import AS_GIVEN, SENTINEL_TABLE, Shard
from snowshard.migrations.physical import fields_of, rewrite
from snowshard.spec import ShardConfigError, ShardSpec

__all__ = [
    "SHARDED_OPERATIONS",
    "AddShardedColumnOp",
    "AlterShardedColumnOp",
    "Change",
    "CreateShardedCheckConstraintOp",
    "CreateShardedForeignKeyOp",
    "CreateShardedIndexOp",
    "CreateShardedTableOp",
    "CreateShardedUniqueConstraintOp",
    "DropShardedColumnOp",
    "DropShardedConstraintOp",
    "DropShardedIndexOp",
    "DropShardedTableOp",
    "ShardedOperation",
    "sharded_operation",
]


class Change(NamedTuple):
    """What a sharded operation does to each physical table (checked before it runs)."""

    action: Literal["create", "drop", "alter"]
    kind: Literal["table", "column", "index", "constraint"]
    target: str = ""
    """The template's attribute naming the column, index or constraint ("" for a table)."""
    renamed: str = ""
    """The template's attribute holding a new name, for a change that may rename."""


_EXAMPLES = {"index_name": "ix_{table}_user_id", "constraint_name": "uq_{table}_email"}


class ShardedOperation(MigrateOperation):
    """One schema change applied to every physical table of ``spec`` in the current database.

    ``template`` is the plain Alembic operation it stands for, on the table
    :data:`~snowshard.migrations.naming.SENTINEL_TABLE` and with name templates;
    :meth:`physical` makes the operation for one real table. Autogenerate renders the
    template and puts the spec in the place of the sentinel.
    """

    template: MigrateOperation
    """The wrapped Alembic operation, on the sentinel table, names as templates."""
    op_name: ClassVar[str]
    """The ``op.<name>`` this class is registered as."""
    template_type: ClassVar[type[MigrateOperation]]
    """The Alembic operation class this one wraps."""
    change: ClassVar[Change]
    """What it does to each physical table."""
    undoes: ClassVar[str] = ""
    """For a drop: what its template must carry to be reversed ("the original column")."""
    batch_on_sqlite: ClassVar[bool] = False
    """Run each table through ``batch_alter_table`` on SQLite (it cannot ALTER this)."""

    def __init__(self, spec: ShardSpec, template: MigrateOperation) -> None:
        _check_spec(spec, self.op_name)
        if not isinstance(template, self.template_type):
            raise ShardConfigError(
                f"{self.op_name}: template must be an alembic {self.template_type.__name__}, "
                f"got {type(template).__name__} {template!r}"
            )
        for field in fields_of(self.template_type).names:
            if not isinstance(getattr(template, field), str):
                raise ShardConfigError(
                    f"{spec.name}: {self.op_name} needs a name template for its "
                    f"{field.replace('_', ' ')}, such as {_EXAMPLES[field]!r}"
                )
        self.spec = spec
        self.template = rewrite(template, AS_GIVEN)
        self.physical(Shard(spec, 0))  # every template formats: fail now, not on shard 7

    def physical(self, shard: Shard) -> MigrateOperation:
        """The plain Alembic operation for one physical table."""
        return rewrite(self.template, shard)

    def use_batch(self, dialect_name: str) -> bool:
        """Run each table through Alembic's batch mode (SQLite cannot ALTER this)."""
        return self.batch_on_sqlite and dialect_name == "sqlite"

    @property
    def schema(self) -> str | None:
        schema: str | None = getattr(self.template, "schema", None)
        return schema

    @property
    def target(self) -> str:
        """What the change is about inside the table (column, index, constraint), or ''."""
        field = self.change.target
        return str(attrgetter(field)(self.template)) if field else ""

    def describe(self) -> str:
        target = f".{self.target}" if self.target else ""
        return f"{self.op_name} {self.spec.name}{target}"

    # MigrateOperation ------------------------------------------------------------------

    def reverse(self) -> ShardedOperation:
        if not self.undoes:
            return sharded_operation(self.spec, self.template.reverse())
        undone = alembic_reverse(self.template)
        if undone is None:
            raise ValueError(f"{self.describe()} is not reversible: {self.undoes} is not known")
        return sharded_operation(self.spec, undone)

    def to_diff_tuple(self) -> tuple[Any, ...]:
        return (self.op_name, self.spec.name, self.target, self.template.to_diff_tuple())

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"


SHARDED_OPERATIONS: dict[type[MigrateOperation], type[ShardedOperation]] = {}
"""The sharded operation class of each Alembic operation class it wraps."""

_C = TypeVar("_C", bound=type[ShardedOperation])


def _sharded(name: str) -> Callable[[_C], _C]:
    """Register ``cls`` as ``op.<name>`` (the runner gives it its implementation)."""

    def register(cls: _C) -> _C:
        cls.op_name = name
        SHARDED_OPERATIONS[cls.template_type] = cls
        Operations.register_operation(name)(cls)
        return cls

    return register


def sharded_operation(spec: ShardSpec, template: MigrateOperation) -> ShardedOperation:
    """The sharded operation that applies the plain Alembic ``template`` to ``spec``.

    Raises :class:`ShardConfigError` when ``spec`` is not a :class:`ShardSpec` or no
    sharded operation wraps ``template``'s class.
    """
    _check_spec(spec, "sharded_operation")
    for cls in type(template).__mro__:
        sharded = SHARDED_OPERATIONS.get(cls)
        if sharded is not None:
            return sharded(spec, template)
    known = ", ".join(sorted(t.__name__ for t in SHARDED_OPERATIONS))
    raise ShardConfigError(
        f"{spec.name}: no sharded operation for {type(template).__name__} {template!r}; "
        f"the template must be one of alembic's {known}"
    )


def _check_spec(spec: object, what: str) -> None:
    if not isinstance(spec, ShardSpec):
        raise ShardConfigError(
            f"{what}: spec must be a snowshard.spec.ShardSpec (e.g. ShardSpec('orders', 16)), "
            f"got {type(spec).__name__} {spec!r}"
        )


# --------------------------------------------------------------------------- tables


@_sharded("create_sharded_table")
class CreateShardedTableOp(ShardedOperation):
    """``op.create_sharded_table(spec, *columns_and_constraints, **kw)``."""

    template_type = alembic_ops.CreateTableOp
    change = Change("create", "table")

    @classmethod
    def create_sharded_table(
        cls, operations: Operations, spec: ShardSpec, *columns: SchemaItem, **kw: Any
    ) -> None:
        """Create every physical table of ``spec`` in the current database.

        Takes what :meth:`Operations.create_table` takes after the table name. Constraint and
        index names and foreign key targets are templates (``"fk_{table}_order"``,
        ``"orders_{index:02d}.id"``). Tables that already exist are skipped.
        """
        template = alembic_ops.CreateTableOp(SENTINEL_TABLE, columns, **kw)
        operations.invoke(cls(spec, template))


@_sharded("drop_sharded_table")
class DropShardedTableOp(ShardedOperation):
    """``op.drop_sharded_table(spec)``."""

    template_type = alembic_ops.DropTableOp
    change = Change("drop", "table")
    undoes = "the table definition"

    @classmethod
    def drop_sharded_table(
        cls,
        operations: Operations,
        spec: ShardSpec,
        *,
        schema: str | None = None,
        if_exists: bool | None = None,
        **kw: Any,
    ) -> None:
        """Drop every physical table of ``spec`` in the current database (missing: skipped).

        ``if_exists`` needs Alembic 1.13.3 or later.
        """
        optional: dict[str, Any] = {} if if_exists is None else {"if_exists": if_exists}
        template = alembic_ops.DropTableOp(SENTINEL_TABLE, schema=schema, table_kw=kw, **optional)
        operations.invoke(cls(spec, template))


# --------------------------------------------------------------------------- columns


@_sharded("add_sharded_column")
class AddShardedColumnOp(ShardedOperation):
    """``op.add_sharded_column(spec, column)``."""

    template_type = alembic_ops.AddColumnOp
    template: alembic_ops.AddColumnOp
    change = Change("create", "column", "column.name")

    def use_batch(self, dialect_name: str) -> bool:
        # SQLite adds a column in place, but not its foreign key constraint
        return dialect_name == "sqlite" and bool(self.template.column.foreign_keys)

    @classmethod
    def add_sharded_column(
        cls,
        operations: Operations,
        spec: ShardSpec,
        column: sa.Column[Any],
        *,
        schema: str | None = None,
    ) -> None:
        """Add ``column`` to every physical table of ``spec`` in the current database.

        A ``sa.ForeignKey`` on the column may name a co-sharded target such as
        ``"orders_{index:02d}.id"``. Tables that already have the column are skipped.
        """
        template = alembic_ops.AddColumnOp(SENTINEL_TABLE, column, schema=schema)
        operations.invoke(cls(spec, template))


@_sharded("drop_sharded_column")
class DropShardedColumnOp(ShardedOperation):
    """``op.drop_sharded_column(spec, column_name)``."""

    template_type = alembic_ops.DropColumnOp
    change = Change("drop", "column", "column_name")
    undoes = "the original column"
    batch_on_sqlite = True

    @classmethod
    def drop_sharded_column(
        cls,
        operations: Operations,
        spec: ShardSpec,
        column_name: str,
        *,
        schema: str | None = None,
        **kw: Any,
    ) -> None:
        """Drop ``column_name`` from every physical table of ``spec`` in the database."""
        template = alembic_ops.DropColumnOp(SENTINEL_TABLE, column_name, schema=schema, **kw)
        operations.invoke(cls(spec, template))


@_sharded("alter_sharded_column")
class AlterShardedColumnOp(ShardedOperation):
    """``op.alter_sharded_column(spec, column_name, ...)``, as ``op.alter_column``.

    Without a new name it is applied again on every run: ``ALTER ... TYPE``, ``SET NOT
    NULL`` and ``SET DEFAULT`` are idempotent.
    """

    template_type = alembic_ops.AlterColumnOp
    change = Change("alter", "column", "column_name", renamed="modify_name")
    batch_on_sqlite = True

    @classmethod
    def alter_sharded_column(
        cls,
        operations: Operations,
        spec: ShardSpec,
        column_name: str,
        *,
        nullable: bool | None = None,
        comment: str | Literal[False] | None = False,
        server_default: Any = False,
        new_column_name: str | None = None,
        type_: Any = None,
        existing_type: Any = None,
        existing_server_default: Any = False,
        existing_nullable: bool | None = None,
        existing_comment: str | None = None,
        schema: str | None = None,
        **kw: Any,
    ) -> None:
        """Alter ``column_name`` on every physical table of ``spec``; see ``op.alter_column``."""
        template = alembic_ops.AlterColumnOp(
            SENTINEL_TABLE,
            column_name,
            schema=schema,
            existing_type=existing_type,
            existing_server_default=existing_server_default,
            existing_nullable=existing_nullable,
            existing_comment=existing_comment,
            modify_nullable=nullable,
            modify_comment=comment,
            modify_server_default=server_default,
            modify_name=new_column_name,
            modify_type=type_,
            **kw,
        )
        operations.invoke(cls(spec, template))


# --------------------------------------------------------------------------- indexes


@_sharded("create_sharded_index")
class CreateShardedIndexOp(ShardedOperation):
    """``op.create_sharded_index(name_template, spec, columns, unique=False)``."""

    template_type = alembic_ops.CreateIndexOp
    change = Change("create", "index", "index_name")

    @classmethod
    def create_sharded_index(
        cls,
        operations: Operations,
        index_name: str,
        spec: ShardSpec,
        columns: Sequence[str | TextClause | ColumnElement[Any]],
        *,
        schema: str | None = None,
        unique: bool = False,
        **kw: Any,
    ) -> None:
        """Create the index ``index_name`` (a template) on every physical table of ``spec``."""
        template = alembic_ops.CreateIndexOp(
            index_name, SENTINEL_TABLE, columns, schema=schema, unique=unique, **kw
        )
        operations.invoke(cls(spec, template))


@_sharded("drop_sharded_index")
class DropShardedIndexOp(ShardedOperation):
    """``op.drop_sharded_index(name_template, spec)``."""

    template_type = alembic_ops.DropIndexOp
    change = Change("drop", "index", "index_name")
    undoes = "the index definition"

    @classmethod
    def drop_sharded_index(
        cls,
        operations: Operations,
        index_name: str,
        spec: ShardSpec,
        *,
        schema: str | None = None,
        **kw: Any,
    ) -> None:
        """Drop the index ``index_name`` (a template) from every physical table of ``spec``."""
        template = alembic_ops.DropIndexOp(index_name, SENTINEL_TABLE, schema=schema, **kw)
        operations.invoke(cls(spec, template))


# --------------------------------------------------------------------------- constraints


@_sharded("create_sharded_unique_constraint")
class CreateShardedUniqueConstraintOp(ShardedOperation):
    """``op.create_sharded_unique_constraint(name_template, spec, columns)``."""

    template_type = alembic_ops.CreateUniqueConstraintOp
    change = Change("create", "constraint", "constraint_name")
    batch_on_sqlite = True

    @classmethod
    def create_sharded_unique_constraint(
        cls,
        operations: Operations,
        constraint_name: str,
        spec: ShardSpec,
        columns: Sequence[str],
        *,
        schema: str | None = None,
        **kw: Any,
    ) -> None:
        """Add a UNIQUE constraint to every physical table of ``spec`` (per table, not global).

        Uniqueness holds within each physical table only; global uniqueness across shards
        comes from the snowflake IDs or from routing equal keys to one shard.
        """
        template = alembic_ops.CreateUniqueConstraintOp(
            constraint_name, SENTINEL_TABLE, columns, schema=schema, **kw
        )
        operations.invoke(cls(spec, template))


@_sharded("create_sharded_foreign_key")
class CreateShardedForeignKeyOp(ShardedOperation):
    """``op.create_sharded_foreign_key(name_template, spec, referent_template, local, remote)``.

    Sensible targets: a co-sharded table with the same shard number (``"orders_{index:02d}"``,
    same count and placement), or a table present in every database that holds the spec.
    """

    template_type = alembic_ops.CreateForeignKeyOp
    template: alembic_ops.CreateForeignKeyOp
    change = Change("create", "constraint", "constraint_name")
    batch_on_sqlite = True

    @property
    def schema(self) -> str | None:
        schema: str | None = self.template.kw.get("source_schema")
        return schema

    @classmethod
    def create_sharded_foreign_key(
        cls,
        operations: Operations,
        constraint_name: str,
        spec: ShardSpec,
        referent_table: str,
        local_cols: list[str],
        remote_cols: list[str],
        *,
        onupdate: str | None = None,
        ondelete: str | None = None,
        deferrable: bool | None = None,
        initially: str | None = None,
        match: str | None = None,
        source_schema: str | None = None,
        referent_schema: str | None = None,
        **dialect_kw: Any,
    ) -> None:
        """Add a foreign key from every physical table of ``spec`` to ``referent_table``
        (a template: ``"orders_{index:02d}"`` points shard ``i`` at ``orders_i``)."""
        template = alembic_ops.CreateForeignKeyOp(
            constraint_name,
            SENTINEL_TABLE,
            referent_table,
            local_cols,
            remote_cols,
            onupdate=onupdate,
            ondelete=ondelete,
            deferrable=deferrable,
            initially=initially,
            match=match,
            source_schema=source_schema,
            referent_schema=referent_schema,
            **dialect_kw,
        )
        operations.invoke(cls(spec, template))


@_sharded("create_sharded_check_constraint")
class CreateShardedCheckConstraintOp(ShardedOperation):
    """``op.create_sharded_check_constraint(name_template, spec, condition)``."""

    template_type = alembic_ops.CreateCheckConstraintOp
    change = Change("create", "constraint", "constraint_name")
    batch_on_sqlite = True

    @classmethod
    def create_sharded_check_constraint(
        cls,
        operations: Operations,
        constraint_name: str,
        spec: ShardSpec,
        condition: str | TextClause | ColumnElement[Any],
        *,
        schema: str | None = None,
        **kw: Any,
    ) -> None:
        """Add a CHECK constraint to every physical table of ``spec``."""
        template = alembic_ops.CreateCheckConstraintOp(
            constraint_name, SENTINEL_TABLE, condition, schema=schema, **kw
        )
        operations.invoke(cls(spec, template))


@_sharded("drop_sharded_constraint")
class DropShardedConstraintOp(ShardedOperation):
    """``op.drop_sharded_constraint(name_template, spec, type_=None)``."""

    template_type = alembic_ops.DropConstraintOp
    change = Change("drop", "constraint", "constraint_name")
    undoes = "the constraint definition"
    batch_on_sqlite = True

    @classmethod
    def drop_sharded_constraint(
        cls,
        operations: Operations,
        constraint_name: str,
        spec: ShardSpec,
        type_: str | None = None,
        *,
        schema: str | None = None,
    ) -> None:
        """Drop the constraint ``constraint_name`` (a template) from every physical table.

        ``type_`` is Alembic's: ``"unique"``, ``"foreignkey"``, ``"check"`` (MySQL needs it).
        """
        template = alembic_ops.DropConstraintOp(
            constraint_name, SENTINEL_TABLE, type_=type_, schema=schema
        )
        operations.invoke(cls(spec, template))
