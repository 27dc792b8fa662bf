"""Autogenerate for sharded models: one operation per logical change, not one per shard.

Alembic compares each physical table on its own, so a column added to a sharded model shows
up as ``add_column('orders_00', ...)`` .. ``add_column('orders_07', ...)``.
:data:`collapse_sharded_ops` (an Alembic :class:`~alembic.autogenerate.Rewriter`) replaces
the operations that agree on every physical table of one
:class:`~snowshard.sharding.spec.ShardSpec` by a single sharded operation, which renders as
``op.add_sharded_column(ShardSpec('orders', 16, ...), sa.Column(...))``. Physical tables are
recognised by ``table.info["snowshard"] = ShardInfo(spec, shard)`` in the target metadata;
a table dropped from the models is recognised through the specs listed in the
``snowshard_specs`` option, if any, otherwise its ``drop_table`` ops stay as they are.
Operations that differ between shards (one shard is missing an index the others have
differently named, say) are left per table, so nothing is ever generated for a table that
does not need it.

In ``env.py``::

    from snowshard.migrations import collapse_sharded_ops, include_database

    context.configure(
        connection=connection,
        target_metadata=metadata,
        include_object=include_database(name),      # this database's tables only
        process_revision_directives=collapse_sharded_ops,
        snowshard_database=name,
    )

A database that already matches the models gives no operations, so an empty revision
(``alembic check`` passes).
"""

from __future__ import annotations

import copy
import string
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic.autogenerate import Rewriter, render_op_text, renderers
from alembic.autogenerate.api import AutogenContext
from alembic.operations import MigrateOperation
from alembic.operations import ops as alembic_ops
from alembic.runtime.migration import MigrationContext
from sqlalchemy.sql.elements import TextClause

from snowshard.migrations.ops import (
    SENTINEL_TABLE,
    ShardedOperation,
    _Shard,
    sharded_operation,
)
from snowshard.sharding.spec import DEFAULT_DATABASE, ShardInfo, ShardSpec

__all__ = [
    "SPECS_OPTION",
    "collapse_sharded_ops",
    "include_database",
    "render_spec",
    "shard_info_of",
]

SPECS_OPTION = "snowshard_specs"
"""``context.configure()`` keyword: extra specs, for tables no longer in the models."""

_SPEC_IMPORT = "from snowshard.sharding.spec import ShardSpec"


def shard_info_of(table: sa.Table) -> ShardInfo | None:
    """The :class:`ShardInfo` a physical table carries, or None for a plain table."""
    info = table.info.get("snowshard")
    return info if isinstance(info, ShardInfo) else None


# --------------------------------------------------------------------------- filter


def include_database(
    database: str, *, unsharded: str | Callable[[sa.Table], str] = DEFAULT_DATABASE
) -> Callable[..., bool]:
    """An ``include_object`` hook keeping the model tables that live in ``database``.

    A physical table lives where its spec puts its shard; any other table lives in
    ``unsharded`` (a bind key, or a function of the table). Tables found in the database
    but absent from the models are kept, so autogenerate proposes to drop them.
    """

    def include_object(
        obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
    ) -> bool:
        if type_ != "table" or reflected or not isinstance(obj, sa.Table):
            return True
        info = shard_info_of(obj)
        if info is not None:
            return info.spec.database_of(info.shard) == database
        home = unsharded(obj) if callable(unsharded) else unsharded
        return home == database

    return include_object


# --------------------------------------------------------------------------- rendering


def render_spec(spec: ShardSpec) -> str:
    """``spec`` as Python source: ``ShardSpec('orders', 16, databases={...})``."""
    args = [repr(spec.name), repr(spec.count)]
    if spec.pattern != ShardSpec(spec.name, spec.count).pattern:
        args.append(f"pattern={spec.pattern!r}")
    if set(spec.databases) != {DEFAULT_DATABASE}:
        parts = []
        for key, indices in spec.databases.items():
            seq = list(indices)
            if seq and seq == list(range(seq[0], seq[-1] + 1)):
                start = f"{seq[0]}, " if seq[0] else ""
                parts.append(f"{key!r}: range({start}{seq[-1] + 1})")
            else:
                parts.append(f"{key!r}: {tuple(seq)!r}")
        args.append("databases={" + ", ".join(parts) + "}")
    return f"ShardSpec({', '.join(args)})"


def _render_sharded(autogen_context: AutogenContext, op: ShardedOperation) -> str:
    """Render the wrapped Alembic operation, then name the sharded one and its spec."""
    text = render_op_text(autogen_context, op.template)
    plain = op.op_name.replace("_sharded", "")
    head = f"{plain}("
    spec = render_spec(op.spec)
    sentinel = repr(SENTINEL_TABLE)
    if head not in text or sentinel not in text:
        raise ValueError(f"cannot render {op!r}: unexpected alembic output {text!r}")
    autogen_context.imports.add(_SPEC_IMPORT)
    text = text.replace(head, f"{op.op_name}(", 1)
    if f"table_name={sentinel}" in text:
        return text.replace(f"table_name={sentinel}", f"spec={spec}", 1)
    return text.replace(sentinel, spec, 1)


def _register_renderers() -> None:
    seen: set[type[ShardedOperation]] = set()
    pending: list[type[ShardedOperation]] = [ShardedOperation]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                pending.append(sub)
                if "op_name" in vars(sub):
                    renderers.dispatch_for(sub, replace=True)(_render_sharded)


_register_renderers()


# --------------------------------------------------------------------------- templates


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


class _Lookup:
    """Physical table name -> ShardInfo, from the target metadata and extra specs."""

    def __init__(self, context: MigrationContext) -> None:
        self.by_name: dict[str, ShardInfo] = {}
        metadata = context.opts.get("target_metadata")
        if metadata is None:
            metadatas: Sequence[sa.MetaData] = ()
        elif isinstance(metadata, sa.MetaData):
            metadatas = (metadata,)
        else:
            metadatas = tuple(metadata)
        specs: Iterable[ShardSpec] = context.opts.get(SPECS_OPTION) or ()
        for spec in specs:
            for index in range(spec.count):
                self.by_name[spec.table_name(index)] = ShardInfo(spec, index)
        for md in metadatas:
            for table in md.tables.values():
                info = shard_info_of(table)
                if info is not None:
                    self.by_name[table.name] = info

    def get(self, name: str | None) -> ShardInfo | None:
        return None if name is None else self.by_name.get(str(name))


def _pattern_template(spec: ShardSpec) -> str | None:
    """``spec.pattern`` with ``{name}`` filled in and ``{index...}`` kept: orders_{index:02d}."""
    out: list[str] = []
    for literal, field, format_spec, conversion in string.Formatter().parse(spec.pattern):
        out.append(_escape(literal))
        if field is None:
            continue
        if conversion or field not in ("name", "index"):
            return None
        if field == "name":
            out.append(_escape(format(spec.name, format_spec or "")))
        else:
            out.append("{index" + (f":{format_spec}" if format_spec else "") + "}")
    template = "".join(out)
    for index in range(spec.count):
        if template.format(index=index) != spec.table_name(index):
            return None
    return template


class _Templater:
    """Turns names of one physical table's operations into the templates of its spec."""

    def __init__(self, info: ShardInfo, lookup: _Lookup, dialect: sa.engine.Dialect) -> None:
        self.shard = _Shard(info.spec, info.shard)
        self.lookup = lookup
        self.dialect = dialect

    def name(self, name: Any) -> str | None:
        if name is None:
            return None
        return _escape(str(name)).replace(_escape(self.shard.table), "{table}")

    def table(self, table: str) -> str:
        """A referred table: {table} for itself, a pattern for a co-sharded one."""
        if table == self.shard.table:
            return "{table}"
        info = self.lookup.get(table)
        if info is not None and info.shard == self.shard.index:
            pattern = _pattern_template(info.spec)
            if pattern is not None:
                return pattern
        return _escape(table)

    def target(self, fullname: str) -> str:
        *schema, table, column = fullname.split(".")
        return ".".join([*map(_escape, schema), self.table(table), _escape(column)])

    def check_text(self, constraint: sa.CheckConstraint) -> TextClause:
        if isinstance(constraint.sqltext, TextClause):
            return constraint.sqltext
        compiled = constraint.sqltext.compile(
            dialect=self.dialect, compile_kwargs={"include_table": False, "literal_binds": True}
        )
        return sa.text(str(compiled))

    # operations ------------------------------------------------------------------------

    def create_table(self, op: alembic_ops.CreateTableOp) -> alembic_ops.CreateTableOp:
        table = op.to_table()
        items: list[Any] = []
        for column in table.columns:
            made = column._copy()  # attached: its FKs are constraints, re-made below
            made.unique = made.index = False
            items.append(made)
        for constraint in table.constraints:
            name = self.name(constraint.name)
            if isinstance(constraint, sa.ForeignKeyConstraint):
                items.append(
                    sa.ForeignKeyConstraint(
                        constraint.column_keys,
                        [self.target(e.target_fullname) for e in constraint.elements],
                        name=name,
                        onupdate=constraint.onupdate,
                        ondelete=constraint.ondelete,
                        deferrable=constraint.deferrable,
                        initially=constraint.initially,
                        use_alter=constraint.use_alter,
                        match=constraint.match,
                        **constraint.dialect_kwargs,
                    )
                )
            elif getattr(constraint, "_type_bound", False):
                continue
            elif isinstance(constraint, sa.PrimaryKeyConstraint):
                if constraint.columns:
                    items.append(sa.PrimaryKeyConstraint(*constraint.columns.keys(), name=name))
            elif isinstance(constraint, sa.UniqueConstraint):
                items.append(
                    sa.UniqueConstraint(
                        *constraint.columns.keys(), name=name, **constraint.dialect_kwargs
                    )
                )
            elif isinstance(constraint, sa.CheckConstraint):
                items.append(
                    sa.CheckConstraint(
                        self.check_text(constraint), name=name, **constraint.dialect_kwargs
                    )
                )
            else:
                raise NotImplementedError(type(constraint).__name__)
        info = {k: v for k, v in table.info.items() if k != "snowshard"}
        kw: dict[str, Any] = dict(table.kwargs)
        if info:
            kw["info"] = info
        if table.comment is not None:
            kw["comment"] = table.comment
        return alembic_ops.CreateTableOp(SENTINEL_TABLE, items, schema=table.schema, **kw)

    def convert(self, op: MigrateOperation) -> MigrateOperation | None:
        """The template of ``op`` (an operation on this physical table), or None."""
        if isinstance(op, alembic_ops.CreateTableOp):
            return self.create_table(op)
        if isinstance(op, alembic_ops.DropTableOp):
            reverse = op._reverse and self.create_table(op._reverse)
            return alembic_ops.DropTableOp(
                SENTINEL_TABLE, schema=op.schema, if_exists=op.if_exists, _reverse=reverse
            )
        if isinstance(op, alembic_ops.AddColumnOp):
            added = copy.copy(op)
            added.table_name = SENTINEL_TABLE
            added.column = op.column._copy()
            return added
        if isinstance(op, alembic_ops.DropColumnOp):
            dropped = copy.copy(op)
            dropped.table_name = SENTINEL_TABLE
            if op._reverse is not None:
                converted = self.convert(op._reverse)
                assert isinstance(converted, alembic_ops.AddColumnOp)
                dropped._reverse = converted
            return dropped
        if isinstance(op, alembic_ops.AlterColumnOp):
            altered = copy.copy(op)
            altered.table_name = SENTINEL_TABLE
            return altered
        if isinstance(op, alembic_ops.CreateIndexOp):
            columns: list[Any] = []
            for expr in op.columns:
                if isinstance(expr, sa.Column):
                    columns.append(expr.name)
                elif isinstance(expr, (str, TextClause)):
                    columns.append(expr)
                else:
                    return None  # an expression bound to the physical table
            created = copy.copy(op)
            created.table_name = SENTINEL_TABLE
            created.index_name = self.name(op.index_name)
            created.columns = columns
            return created
        if isinstance(op, alembic_ops.DropIndexOp):
            dropped_ix = copy.copy(op)
            dropped_ix.table_name = SENTINEL_TABLE
            dropped_ix.index_name = self.name(op.index_name) or ""
            if op._reverse is not None:
                reverse_ix = self.convert(op._reverse)
                if not isinstance(reverse_ix, alembic_ops.CreateIndexOp):
                    return None
                dropped_ix._reverse = reverse_ix
            return dropped_ix
        if isinstance(op, alembic_ops.CreateForeignKeyOp):
            fk = copy.copy(op)
            fk.source_table = SENTINEL_TABLE
            fk.constraint_name = self.name(op.constraint_name)
            fk.referent_table = self.table(op.referent_table)
            return fk
        if isinstance(
            op, (alembic_ops.CreateUniqueConstraintOp, alembic_ops.CreateCheckConstraintOp)
        ):
            made_c = copy.copy(op)
            made_c.table_name = SENTINEL_TABLE
            made_c.constraint_name = self.name(op.constraint_name)
            return made_c
        if isinstance(op, alembic_ops.DropConstraintOp):
            dropped_c = copy.copy(op)
            dropped_c.table_name = SENTINEL_TABLE
            dropped_c.constraint_name = self.name(op.constraint_name)
            if op._reverse is not None:
                reverse_c = self.convert(op._reverse)
                if not isinstance(reverse_c, alembic_ops.AddConstraintOp):
                    return None
                dropped_c._reverse = reverse_c
            return dropped_c
        return None


# --------------------------------------------------------------------------- collapsing


class _Entry:
    """One operation of the stream, with the table it changes and its sharded form."""

    def __init__(self, op: MigrateOperation, table: str | None, schema: str | None) -> None:
        self.op = op
        self.table = table
        self.schema = schema
        self.sharded: ShardedOperation | None = None
        self.key: tuple[Any, ...] | None = None
        self.rendered = ""


def _table_of(op: MigrateOperation) -> str | None:
    if isinstance(op, alembic_ops.CreateForeignKeyOp):
        return op.source_table
    name = getattr(op, "table_name", None)
    return None if name is None else str(name)


def _collapse(context: MigrationContext, container: alembic_ops.OpContainer) -> None:
    lookup = _Lookup(context)
    if not lookup.by_name:
        return
    opts = {
        "alembic_module_prefix": "op.",
        "sqlalchemy_module_prefix": "sa.",
        "user_module_prefix": None,
        **context.opts,
    }
    autogen_context = AutogenContext(context, opts=opts, autogenerate=False)
    entries: list[_Entry] = []
    for op in container.ops:
        if isinstance(op, alembic_ops.ModifyTableOps):
            entries += [_Entry(inner, op.table_name, op.schema) for inner in op.ops]
        else:
            entries.append(_Entry(op, _table_of(op), getattr(op, "schema", None)))

    renderings: dict[tuple[Any, ...], set[str]] = {}
    for entry in entries:
        info = lookup.get(entry.table)
        if info is None or isinstance(entry.op, ShardedOperation):
            continue
        try:
            template = _Templater(info, lookup, context.dialect).convert(entry.op)
            if template is None:
                continue
            entry.sharded = sharded_operation(info.spec, template)
            entry.rendered = render_op_text(autogen_context, entry.sharded)
        except (NotImplementedError, ValueError, KeyError):
            entry.sharded = None  # not expressible as a sharded operation: keep per table
            continue
        entry.key = (info.spec, type(entry.sharded), entry.sharded.target)
        renderings.setdefault(entry.key, set()).add(entry.rendered)

    result: list[MigrateOperation] = []
    pending: alembic_ops.ModifyTableOps | None = None
    emitted: set[tuple[Any, ...]] = set()

    def flush() -> None:
        nonlocal pending
        if pending is not None and pending.ops:
            result.append(pending)
        pending = None

    modify_tables = {
        id(inner): op
        for op in container.ops
        if isinstance(op, alembic_ops.ModifyTableOps)
        for inner in op.ops
    }
    for entry in entries:
        parent = modify_tables.get(id(entry.op))
        if entry.key is not None and len(renderings[entry.key]) == 1:
            if entry.key in emitted:
                continue
            emitted.add(entry.key)
            flush()
            assert entry.sharded is not None
            result.append(entry.sharded)
        elif parent is None:
            flush()
            result.append(entry.op)
        else:
            if pending is None or pending.table_name != parent.table_name:
                flush()
                pending = alembic_ops.ModifyTableOps(
                    parent.table_name, [], schema=parent.schema
                )
            pending.ops.append(entry.op)
    flush()
    container.ops = result


collapse_sharded_ops = Rewriter()
"""``process_revision_directives`` for env.py: per-shard operations become sharded ones.

An Alembic :class:`~alembic.autogenerate.Rewriter`; chain it with your own rewriters with
``collapse_sharded_ops.chain(other)``.
"""


@collapse_sharded_ops.rewrites(alembic_ops.UpgradeOps)
def _collapse_upgrade(
    context: MigrationContext, revision: Any, directive: alembic_ops.UpgradeOps
) -> alembic_ops.UpgradeOps:
    _collapse(context, directive)
    return directive


@collapse_sharded_ops.rewrites(alembic_ops.DowngradeOps)
def _collapse_downgrade(
    context: MigrationContext, revision: Any, directive: alembic_ops.DowngradeOps
) -> alembic_ops.DowngradeOps:
    _collapse(context, directive)
    return directive

