"""Alembic operations that change every physical table of a sharded table at once.

A sharded model has ``spec.count`` physical tables (``orders_00`` .. ``orders_15``) spread
over several databases (see :class:`~snowshard.spec.ShardSpec`). Each operation
here is an Alembic :class:`~alembic.operations.MigrateOperation`, registered on
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

**Which tables.** An operation touches the physical tables of ``spec`` that live in the
database being migrated *now*: ``spec.tables_in(key)``, where ``key`` is the
``snowshard_database`` option given to ``context.configure()`` in ``env.py`` (the
multi-database environment passes each database's name). Without that option a spec kept
in one database is migrated in whatever database the environment runs on (a single-database
``env.py`` needs no option), and a spec spread over several databases raises
:class:`ShardMigrationError` rather than guessing, whatever its database keys are called. A
database that holds none of the spec's tables is left alone.

**Names.** Index and constraint names, and the referent table of a foreign key, are
:meth:`str.format` templates filled in per physical table with ``{table}`` (the physical table
name), ``{name}`` (the spec's name) and ``{index}`` (the shard number)::

    op.create_sharded_foreign_key(
        "fk_{table}_order", ORDER_ITEMS, "orders_{index:02d}", ["order_id"], ["id"]
    )

PostgreSQL and SQLite need index names unique per database, so put ``{table}`` in them.
Write a literal brace as ``{{`` or ``}}``.

**Resuming.** Online, each physical table is checked with the SQLAlchemy inspector first and
skipped when it already has the change (the table exists, the column or the named index or
constraint is there or gone, a renamed column already has its new name; what a ``drop_*``
operation removes counts as gone when its whole table is gone). A failure on one
table raises :class:`ShardMigrationError` naming the database and the table and listing the
tables done before it; after fixing the cause, running the same upgrade again completes it.
``alter_sharded_column`` without a rename is simply applied again: ``ALTER ... TYPE``, ``SET
NOT NULL`` and ``SET DEFAULT`` are idempotent. Offline (``--sql``) nothing can be inspected,
so the DDL for every table is written out.

**MariaDB and MySQL commit DDL implicitly.** PostgreSQL and SQLite run DDL inside the
migration's transaction: when shard 7 fails, the environment rolls back and no table keeps
the change. MariaDB/MySQL commit before and after every ``CREATE``/``ALTER``/``DROP``, so the
tables changed before the failure stay changed, and rolling back cannot undo them (it only
undoes pending DML such as the ``alembic_version`` update, so the database keeps reporting
the previous revision). That half-applied state is what the idempotent operations are for:
fix the cause and run ``alembic upgrade`` again; the tables already changed are skipped and
the rest are done. Plain Alembic operations in the same revision are not idempotent on their
own; give them ``if_not_exists=True`` / ``if_exists=True`` where the backend supports it.

**SQLite** cannot ``ALTER`` a column or add and drop constraints, so on SQLite
``alter_sharded_column``, ``drop_sharded_column``, the constraint operations and
``add_sharded_column`` of a column with a foreign key run each table through Alembic's batch
mode (``recreate="auto"``: the table is copied). Batch mode needs to reflect the table, so
those operations are online-only on SQLite.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations
from alembic.operations import ops as alembic_ops
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine.reflection import Inspector
from sqlalchemy.sql.elements import ColumnElement, TextClause
from sqlalchemy.sql.schema import SchemaItem

from snowshard._compat import (
    alembic_reverse,
    copy_schema_item,
    is_type_bound,
    set_alembic_reverse,
)
from snowshard.errors import SnowshardError
from snowshard.spec import DEFAULT_DATABASE, ShardConfigError, ShardSpec

__all__ = [
    "DATABASE_OPTION",
    "SENTINEL_TABLE",
    "AddShardedColumnOp",
    "AlterShardedColumnOp",
    "CreateShardedCheckConstraintOp",
    "CreateShardedForeignKeyOp",
    "CreateShardedIndexOp",
    "CreateShardedTableOp",
    "CreateShardedUniqueConstraintOp",
    "DropShardedColumnOp",
    "DropShardedConstraintOp",
    "DropShardedIndexOp",
    "DropShardedTableOp",
    "ShardMigrationError",
    "ShardedOperation",
    "current_database",
    "sharded_operation",
]

log = logging.getLogger(__name__)

DATABASE_OPTION = "snowshard_database"
"""The ``context.configure()`` keyword naming the database (bind key) being migrated."""

SENTINEL_TABLE = "__snowshard_table__"
"""The table name of the plain Alembic operation a sharded operation wraps."""


class ShardMigrationError(SnowshardError):
    """A sharded operation failed on one physical table (or cannot tell which tables).

    ``database`` is the bind key, ``table`` the physical table that failed and ``done`` the
    tables of that database changed before it in this run. On MariaDB/MySQL those keep the
    change (DDL commits implicitly); running the upgrade again skips them and finishes.
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str = "",
        database: str | None = None,
        table: str | None = None,
        done: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.database = database
        self.table = table
        self.done = tuple(done)


# --------------------------------------------------------------------------- shards


@dataclass(frozen=True)
class _Shard:
    """One physical table of a spec; fills in name templates."""

    spec: ShardSpec
    index: int

    @property
    def table(self) -> str:
        return self.spec.table_name(self.index)

    def format(self, template: str) -> str:
        return template.format(table=self.table, name=self.spec.name, index=self.index)

    def format_name(self, template: object) -> str | None:
        """A name template filled in; None (or SQLAlchemy's "no name") stays None."""
        return self.format(template) if isinstance(template, str) else None


def _check_template(spec: ShardSpec, template: object, what: str) -> None:
    """Fail at construction, not on shard 7, when a name template does not format."""
    if template is None:
        return
    try:
        _Shard(spec, 0).format(str(template))
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise ShardConfigError(
            f"{spec.name}: {what} {str(template)!r} is not a name template: use the "
            f"placeholders {{table}}, {{name}} and {{index}} and write braces as {{{{ }}}} "
            f"({type(exc).__name__}: {exc})"
        ) from None


_D = TypeVar("_D", bound=MigrateOperation)


def _physical_drop(template: _D, table: str) -> _D:
    """A copy of the drop operation ``template`` for ``table``, without what it undoes.

    A copy keeps every option the template has (``if_exists`` and the like, which not every
    supported Alembic version has on every operation). Without its reverse, Alembic drops
    by name, as for an operation written by hand.
    """
    dropped = copy.copy(template)
    dropped.table_name = table  # type: ignore[attr-defined]
    set_alembic_reverse(dropped, None)
    table_kw = getattr(dropped, "table_kw", None)
    if isinstance(table_kw, dict):
        dropped.table_kw = dict(table_kw)  # type: ignore[attr-defined]
    return dropped


def current_database(context: MigrationContext, spec: ShardSpec | None = None) -> str:
    """The bind key being migrated: ``context.configure(snowshard_database=...)``.

    Without the option, a ``spec`` kept in one database is migrated wherever the
    environment runs (its one key is returned), and without a ``spec`` this is
    ``"default"``. A ``spec`` spread over several databases raises
    :class:`ShardMigrationError`: every database would otherwise get the same tables
    (those of whichever key was assumed) and the others none, whatever the keys are called.
    """
    key = context.opts.get(DATABASE_OPTION)
    if key is not None:
        return str(key)
    if spec is None:
        return DEFAULT_DATABASE
    if len(spec.databases) > 1:
        raise ShardMigrationError(
            f"{spec.name} is spread over the databases {sorted(spec.databases)}, but the "
            f"migration context does not say which of them it is migrating: pass "
            f"{DATABASE_OPTION}=<database key> to context.configure() in env.py, with the "
            f"key of the database its connection reaches (the multi-database env.py in "
            f"docs/migrations.md passes {DATABASE_OPTION}=name for each database)",
            operation=spec.name,
        )
    [only] = spec.databases
    return only


# --------------------------------------------------------------------------- inspection


def _names(items: Sequence[Any]) -> set[str]:
    return {str(item["name"]).casefold() for item in items if item.get("name")}


def _has(name: str | None, names: set[str]) -> bool:
    return name is not None and name.casefold() in names


def _column_names(insp: Inspector, table: str, schema: str | None) -> set[str]:
    return _names(insp.get_columns(table, schema=schema))


def _index_names(insp: Inspector, table: str, schema: str | None) -> set[str]:
    return _names(insp.get_indexes(table, schema=schema))


def _constraint_names(
    insp: Inspector, table: str, schema: str | None, kind: str | None
) -> set[str]:
    """Names of the table's constraints of ``kind`` (Alembic's ``type_``; None: any)."""
    names: set[str] = set()
    if kind in (None, "unique"):
        names |= _names(insp.get_unique_constraints(table, schema=schema))
        names |= _names(insp.get_indexes(table, schema=schema))  # MySQL: unique = index
    if kind in (None, "foreignkey"):
        names |= _names(insp.get_foreign_keys(table, schema=schema))
    if kind in (None, "check"):
        names |= _names(insp.get_check_constraints(table, schema=schema))
    if kind in (None, "primary"):
        pk = insp.get_pk_constraint(table, schema=schema)
        if pk.get("name"):
            names.add(str(pk["name"]).casefold())
    return names


# --------------------------------------------------------------------------- base class

class ShardedOperation(MigrateOperation):
    """One schema change applied to every physical table of ``spec`` in the current database.

    ``template`` is the plain Alembic operation it stands for, on the table
    :data:`SENTINEL_TABLE` and with name templates; :meth:`physical` makes the operation
    for one real table. Autogenerate renders the template and puts the spec in the place of
    the sentinel.
    """

    op_name: ClassVar[str]
    """The ``op.<name>`` this class is registered as."""
    template_type: ClassVar[type[MigrateOperation]]
    """The Alembic operation class this one wraps."""
    batch_on_sqlite: ClassVar[bool] = False
    """Run each table through ``batch_alter_table`` on SQLite (it cannot ALTER this)."""

    def __init__(self, spec: ShardSpec, template: MigrateOperation) -> None:
        if not isinstance(spec, ShardSpec):
            raise TypeError(f"{self.op_name}: spec must be a ShardSpec, got {spec!r}")
        if not isinstance(template, self.template_type):
            raise TypeError(
                f"{self.op_name}: template must be an alembic {self.template_type.__name__}, "
                f"got {type(template).__name__}"
            )
        self.spec = spec
        self.template = self._normalize(template)
        for what, value in self._templates():
            _check_template(spec, value, what)

    # hooks -----------------------------------------------------------------------------

    def _normalize(self, template: Any) -> Any:
        """A private copy of ``template`` on the sentinel table."""
        template = copy.copy(template)
        template.table_name = SENTINEL_TABLE
        return template

    def _templates(self) -> list[tuple[str, object]]:
        """(what, template) pairs checked at construction."""
        return []

    def physical(self, shard: _Shard) -> MigrateOperation:
        """The plain Alembic operation for one physical table."""
        raise NotImplementedError

    def applied(self, insp: Inspector, shard: _Shard) -> bool:
        """True if ``shard``'s table already has this change (online runs only)."""
        return False

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
        return ""

    def describe(self) -> str:
        target = f".{self.target}" if self.target else ""
        return f"{self.op_name} {self.spec.name}{target}"

    # MigrateOperation ------------------------------------------------------------------

    def _reversed_template(self, missing: str) -> Any:
        """The template's own reverse, or a ValueError naming what is not known."""
        reverse = alembic_reverse(self.template)
        if reverse is None:
            raise ValueError(f"{self.describe()} is not reversible: {missing} is not known")
        return reverse

    def reverse(self) -> ShardedOperation:
        return sharded_operation(self.spec, self.template.reverse())

    def to_diff_tuple(self) -> tuple[Any, ...]:
        return (self.op_name, self.spec.name, self.target, self.template.to_diff_tuple())

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"


_SHARDED: dict[type[MigrateOperation], type[ShardedOperation]] = {}
_C = TypeVar("_C", bound=type[ShardedOperation])


def _sharded(name: str) -> Callable[[_C], _C]:
    """Register ``cls`` as ``op.<name>`` with the shared implementation."""

    def register(cls: _C) -> _C:
        cls.op_name = name
        _SHARDED[cls.template_type] = cls
        Operations.register_operation(name)(cls)
        Operations.implementation_for(cls)(_run_sharded)
        return cls

    return register


def sharded_operation(spec: ShardSpec, template: MigrateOperation) -> ShardedOperation:
    """The sharded operation that applies the plain Alembic ``template`` to ``spec``."""
    for cls in type(template).__mro__:
        sharded = _SHARDED.get(cls)
        if sharded is not None:
            return sharded(spec, template)
    raise NotImplementedError(
        f"{spec.name}: no sharded operation for alembic {type(template).__name__}"
    )


def _with_sharded_reverse(spec: ShardSpec, template: Any) -> Any:
    """``template`` (a drop) with what it undoes normalized as its sharded operation's own.

    Then the drop's ``reverse()`` gives the template of the matching sharded create.
    """
    reverse = alembic_reverse(template)
    if reverse is not None:
        set_alembic_reverse(template, sharded_operation(spec, reverse).template)
    return template


def _run_sharded(operations: Operations, operation: ShardedOperation) -> None:
    """The implementation of every sharded operation: each table of this database in turn."""
    context = operations.get_context()
    spec = operation.spec
    database = current_database(context, spec)
    indices = spec.tables_in(database)
    if not indices:
        log.info("%s: database %r holds none of its tables", operation.describe(), database)
        return
    online = not context.as_sql
    done: list[str] = []
    for index in indices:
        shard = _Shard(spec, index)
        try:
            if online and operation.applied(sa.inspect(operations.get_bind()), shard):
                log.info("%s: %s already done, skipped", operation.describe(), shard.table)
                continue
            plain = operation.physical(shard)
            if operation.use_batch(context.dialect.name):
                with operations.batch_alter_table(
                    shard.table, schema=operation.schema, recreate="auto"
                ) as batch:
                    batch.invoke(plain)
            else:
                operations.invoke(plain)
        except Exception as exc:
            raise _failure(operations, operation, database, shard.table, done, exc) from exc
        done.append(shard.table)


def _failure(
    operations: Operations,
    operation: ShardedOperation,
    database: str,
    table: str,
    done: list[str],
    exc: Exception,
) -> ShardMigrationError:
    context = operations.get_context()
    where = f"database {database!r}"
    if not context.as_sql:
        url_database = operations.get_bind().engine.url.database
        if url_database:
            where += f" ({url_database})"
    before = ", ".join(done) if done else "none"
    kept = (
        " MariaDB/MySQL committed those already (DDL commits implicitly)."
        if done and context.dialect.name in ("mysql", "mariadb")
        else ""
    )
    detail = " ".join(str(exc).split()).rstrip(".")
    return ShardMigrationError(
        f"{operation.describe()} failed on {where}, table {table!r}: "
        f"{type(exc).__name__}: {detail}. Changed before it in this run: {before}.{kept} "
        f"Fix the cause and run the upgrade again: tables that already have the change are "
        f"skipped.",
        operation=operation.describe(),
        database=database,
        table=table,
        done=done,
    )


# --------------------------------------------------------------------------- tables


def _physical_table(template: sa.Table, shard: _Shard) -> sa.Table:
    """A copy of ``template`` named for ``shard``, with every name template filled in."""
    columns = [copy_schema_item(column) for column in template.columns]  # FKs are re-made below
    for column in columns:
        column.unique = column.index = False  # their constraints are copied explicitly
    table = sa.Table(
        shard.table,
        sa.MetaData(),
        *columns,
        schema=template.schema,
        comment=template.comment,
        **template.kwargs,
    )
    for constraint in template.constraints:
        if isinstance(constraint, sa.ForeignKeyConstraint):
            table.append_constraint(_physical_foreign_key(constraint, shard))
        elif is_type_bound(constraint):
            continue  # re-created by the column's type (Boolean / Enum CHECK)
        elif isinstance(constraint, sa.PrimaryKeyConstraint) and not constraint.columns:
            continue
        else:
            made = copy_schema_item(constraint, target_table=table)
            made.name = shard.format_name(constraint.name)
            table.append_constraint(made)
    for index in template.indexes:
        columns_only = [e for e in index.expressions if isinstance(e, sa.Column)]
        if len(columns_only) != len(index.expressions):
            raise ShardConfigError(
                f"{shard.spec.name}: expression index {index.name!r} in a sharded table: "
                "add it with op.create_sharded_index(..., [sa.text(...)]) instead"
            )
        sa.Index(
            shard.format_name(index.name),
            *[table.c[column.key] for column in columns_only],
            unique=index.unique,
            **index.dialect_kwargs,
        )
    return table


def _physical_foreign_key(
    constraint: sa.ForeignKeyConstraint, shard: _Shard
) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        constraint.column_keys,
        [shard.format(element.target_fullname) for element in constraint.elements],
        name=shard.format_name(constraint.name),
        onupdate=constraint.onupdate,
        ondelete=constraint.ondelete,
        deferrable=constraint.deferrable,
        initially=constraint.initially,
        use_alter=constraint.use_alter,
        match=constraint.match,
        **constraint.dialect_kwargs,
    )


def _name_templates(table: sa.Table) -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = []
    for constraint in table.constraints:
        found.append(("constraint name", constraint.name))
        if isinstance(constraint, sa.ForeignKeyConstraint):
            found += [("foreign key target", e.target_fullname) for e in constraint.elements]
    found += [("index name", index.name) for index in table.indexes]
    return found


@_sharded("create_sharded_table")
class CreateShardedTableOp(ShardedOperation):
    """``op.create_sharded_table(spec, *columns_and_constraints, **kw)``."""

    template_type = alembic_ops.CreateTableOp
    template: alembic_ops.CreateTableOp

    def _normalize(self, template: Any) -> Any:
        # to_table() gives attached copies: FKs become constraints, column flags explicit.
        table = super()._normalize(template).to_table()
        table.info.pop("snowshard", None)
        return alembic_ops.CreateTableOp.from_table(table)

    def _templates(self) -> list[tuple[str, object]]:
        return _name_templates(self.template.to_table())

    def physical(self, shard: _Shard) -> MigrateOperation:
        return alembic_ops.CreateTableOp.from_table(
            _physical_table(self.template.to_table(), shard)
        )

    def applied(self, insp: Inspector, shard: _Shard) -> bool:
        return insp.has_table(shard.table, schema=self.schema)

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
    template: alembic_ops.DropTableOp

    def _normalize(self, template: Any) -> Any:
        return _with_sharded_reverse(self.spec, super()._normalize(template))

    def physical(self, shard: _Shard) -> MigrateOperation:
        return _physical_drop(self.template, shard.table)

    def applied(self, insp: Inspector, shard: _Shard) -> bool:
        return not insp.has_table(shard.table, schema=self.schema)

    def reverse(self) -> ShardedOperation:
        return CreateShardedTableOp(self.spec, self._reversed_template("the table definition"))

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

    def _normalize(self, template: Any) -> Any:
        template = super()._normalize(template)
        column = template.column
        if column.table is not None and column.table.name == SENTINEL_TABLE:
            return template  # already ours (a reverse of a reverse)
        if column.table is not None:
            column = copy_schema_item(column)  # attached (autogenerate): its FKs are separate ops
        # a scratch table turns column-level ForeignKey()s into constraints we can re-make
        sa.Table(SENTINEL_TABLE, sa.MetaData(), column, schema=template.schema)
        template.column = column
        return template

    def _templates(self) -> list[tuple[str, object]]:
        return _name_templates(self.template.column.table)

    @property
    def target(self) -> str:
        return str(self.template.column.name)

    def physical(self, shard: _Shard) -> MigrateOperation:
        column = copy_schema_item(self.template.column)
        for constraint in self.template.column.table.foreign_key_constraints:
            made = _physical_foreign_key(constraint, shard)
            for element in made.elements:
                column.append_foreign_key(
                    sa.ForeignKey(
                        element.target_fullname,
                        name=made.name,
                        onupdate=made.onupdate,
                        ondelete=made.ondelete,
                        deferrable=made.deferrable,
                        initially=made.initially,
                        use_alter=made.use_alter,
                        match=made.match,
                    )
                )
        plain = copy.copy(self.template)
        plain.table_name = shard.table
        plain.column = column
        return plain

    def applied(self, insp: Inspector, shard: _Shard) -> bool:
        return _has(self.target, _column_names(insp, shard.table, self.schema))

    def use_batch(self, dialect_name: str) -> bool:
        # SQLite adds a column in place, but not its foreign key constraint
        foreign_keys = self.template.column.table.foreign_key_constraints
        return dialect_name == "sqlite" and bool(foreign_keys)

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
    template: alembic_ops.DropColumnOp
    batch_on_sqlite = True

    def _normalize(self, template: Any) -> Any:
        return _with_sharded_reverse(self.spec, super()._normalize(template))

    @property
    def target(self) -> str:
        return str(self.template.column_name)

    def physical(self, shard: _Shard) -> MigrateOperation:
        return _physical_drop(self.template, shard.table)

    def applied(self, insp: Inspector, shard: _Shard) -> bool:
        if not insp.has_table(shard.table, schema=self.schema):
            return True  # gone with its table
        return not _has(self.target, _column_names(insp, shard.table, self.schema))

    def reverse(self) -> ShardedOperation:
        return AddShardedColumnOp(self.spec, self._reversed_template("the original column"))

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
    """``op.alter_sharded_column(spec, column_name, ...)``, as ``op.alter_column``."""

    template_type = alembic_ops.AlterColumnOp
    template: alembic_ops.AlterColumnOp
    batch_on_sqlite = True

    @property
    def target(self) -> str:
        return str(self.template.column_name)

    def physical(self, shard: _Shard) -> MigrateOperation:
        plain = copy.copy(self.template)
        plain.table_name = shard.table
        return plain

    def applied(self, insp: Inspector, shard: _Shard) -> bool:
        new_name = self.template.modify_name
        if not new_name:
            return False  # ALTER of type / nullability / default is idempotent: re-apply
        names = _column_names(insp, shard.table, self.schema)
        return _has(new_name, names) and not _has(self.target, names)

    def reverse(self) -> ShardedOperation:
        return AlterShardedColumnOp(self.spec, self.template.reverse())

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
    template: alembic_ops.CreateIndexOp

    def _templates(self) -> list[tuple[str, object]]:
        if self.template.index_name is None:
            raise ShardConfigError(
                f"{self.spec.name}: a sharded index needs a name template such as "
                "'ix_{table}_user_id'"
            )
        return [("index name", self.template.index_name)]

    @property
    def target(self) -> str:
        return str(self.template.index_name)

    def physical(self, shard: _Shard) -> MigrateOperation:
        t = self.template
        return alembic_ops.CreateIndexOp(
            shard.format_name(t.index_name),
            shard.table,
            t.columns,
            schema=t.schema,
            unique=t.unique,
            if_not_exists=t.if_not_exists,
            **t.kw,
        )

    def applied(self, insp: Inspector, shard: _Shard) -> bool:
        name = shard.format_name(self.template.index_name)
        return _has(name, _index_names(insp, shard.table, self.schema))

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
    template: alembic_ops.DropIndexOp

    def _normalize(self, template: Any) -> Any:
        return _with_sharded_reverse(self.spec, super()._normalize(template))

    def _templates(self) -> list[tuple[str, object]]:
        return [("index name", self.template.index_name)]

    @property
    def target(self) -> str:
        return str(self.template.index_name)

    def physical(self, shard: _Shard) -> MigrateOperation:
        t = self.template
        return alembic_ops.DropIndexOp(
            shard.format(str(t.index_name)),
            shard.table,
            schema=t.schema,
            if_exists=t.if_exists,
            **t.kw,
        )

    def applied(self, insp: Inspector, shard: _Shard) -> bool:
        if not insp.has_table(shard.table, schema=self.schema):
            return True  # gone with its table (a half-done downgrade, say)
        name = shard.format_name(self.template.index_name)
        return not _has(name, _index_names(insp, shard.table, self.schema))

    def reverse(self) -> ShardedOperation:
        return CreateShardedIndexOp(self.spec, self._reversed_template("the index definition"))

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


class _ConstraintOp(ShardedOperation):
    batch_on_sqlite = True
    kind: ClassVar[str | None] = None
    """Alembic's constraint ``type_`` this operation is about (None: any)."""

    def constraint_kind(self) -> str | None:
        return self.kind

    def _constraint_name(self) -> object:
        name: object = getattr(self.template, "constraint_name", None)
        return name

    def _templates(self) -> list[tuple[str, object]]:
        name = self._constraint_name()
        if name is None:
            raise ShardConfigError(
                f"{self.spec.name}: {self.op_name} needs a constraint name template such "
                "as 'uq_{table}_email'"
            )
        return [("constraint name", name)]

    @property
    def target(self) -> str:
        return str(self._constraint_name())

    def _present(self, insp: Inspector, shard: _Shard) -> bool:
        name = shard.format_name(self.target)
        kind = self.constraint_kind()
        return _has(name, _constraint_names(insp, shard.table, self.schema, kind))

    def applied(self, insp: Inspector, shard: _Shard) -> bool:
        return self._present(insp, shard)


@_sharded("create_sharded_unique_constraint")
class CreateShardedUniqueConstraintOp(_ConstraintOp):
    """``op.create_sharded_unique_constraint(name_template, spec, columns)``."""

    template_type = alembic_ops.CreateUniqueConstraintOp
    template: alembic_ops.CreateUniqueConstraintOp
    kind = "unique"

    def physical(self, shard: _Shard) -> MigrateOperation:
        t = self.template
        return alembic_ops.CreateUniqueConstraintOp(
            shard.format_name(t.constraint_name), shard.table, t.columns, schema=t.schema, **t.kw
        )

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
class CreateShardedForeignKeyOp(_ConstraintOp):
    """``op.create_sharded_foreign_key(name_template, spec, referent_template, local, remote)``.

    Sensible targets: a co-sharded table with the same shard number (``"orders_{index:02d}"``,
    same count and placement), or a table present in every database that holds the spec.
    """

    template_type = alembic_ops.CreateForeignKeyOp
    template: alembic_ops.CreateForeignKeyOp
    kind = "foreignkey"

    def _normalize(self, template: Any) -> Any:
        template = copy.copy(template)
        template.source_table = SENTINEL_TABLE
        return template

    def _templates(self) -> list[tuple[str, object]]:
        return super()._templates() + [("referent table", self.template.referent_table)]

    def physical(self, shard: _Shard) -> MigrateOperation:
        t = self.template
        return alembic_ops.CreateForeignKeyOp(
            shard.format_name(t.constraint_name),
            shard.table,
            shard.format(t.referent_table),
            list(t.local_cols),
            list(t.remote_cols),
            **t.kw,
        )

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
class CreateShardedCheckConstraintOp(_ConstraintOp):
    """``op.create_sharded_check_constraint(name_template, spec, condition)``."""

    template_type = alembic_ops.CreateCheckConstraintOp
    template: alembic_ops.CreateCheckConstraintOp
    kind = "check"

    def physical(self, shard: _Shard) -> MigrateOperation:
        t = self.template
        return alembic_ops.CreateCheckConstraintOp(
            shard.format_name(t.constraint_name), shard.table, t.condition, schema=t.schema, **t.kw
        )

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
class DropShardedConstraintOp(_ConstraintOp):
    """``op.drop_sharded_constraint(name_template, spec, type_=None)``."""

    template_type = alembic_ops.DropConstraintOp
    template: alembic_ops.DropConstraintOp

    def _normalize(self, template: Any) -> Any:
        return _with_sharded_reverse(self.spec, super()._normalize(template))

    def constraint_kind(self) -> str | None:
        return self.template.constraint_type

    def physical(self, shard: _Shard) -> MigrateOperation:
        dropped = _physical_drop(self.template, shard.table)
        dropped.constraint_name = shard.format_name(self.template.constraint_name)
        return dropped

    def applied(self, insp: Inspector, shard: _Shard) -> bool:
        if not insp.has_table(shard.table, schema=self.schema):
            return True  # gone with its table
        return not self._present(insp, shard)

    def reverse(self) -> ShardedOperation:
        return sharded_operation(self.spec, self._reversed_template("the constraint definition"))

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
