"""Autogenerate for sharded models: one operation per logical change, not one per shard.

Alembic compares each physical table on its own, so a column added to a sharded model shows
up as ``add_column('orders_00', ...)`` .. ``add_column('orders_07', ...)``.
:data:`collapse_sharded_ops` (an Alembic :class:`~alembic.autogenerate.Rewriter`) replaces
the operations that agree on every physical table of one
:class:`~snowshard.spec.ShardSpec` by a single sharded operation, which renders as
``op.add_sharded_column(ShardSpec('orders', 16, ...), sa.Column(...))``. Physical tables are
recognised by ``table.info["snowshard"] = ShardInfo(spec, shard)`` in the target metadata;
a table dropped from the models is recognised through the specs listed in the
``snowshard_specs`` option, if any, otherwise its ``drop_table`` ops stay as they are.
Operations that differ between shards (one shard is missing an index the others have
differently named, say) are left per table, so nothing is ever generated for a table that
does not need it.

It also makes generated revisions run as written, on every backend:

* **Imports.** Alembic renders a column type that is not SQLAlchemy's by its module path
  (``snowshard.orm.types.SnowflakeType()``) without importing it; the rewriter adds
  ``import snowshard.orm.types`` (and the like, for any such type the revision renders,
  also when ``render_item`` left it to Alembic) to the revision's imports, and
  ``from snowshard.spec import ShardSpec`` when a sharded operation is rendered.
  A table left per shard does not render its ``ShardInfo``: it is not part of the schema.
* **Order.** An index dropped just before its table (a downgrade of the revision that
  created both) is left out, since dropping the table drops it, and a foreign key dropped
  on a table is dropped before the indexes, unique constraints and columns dropped on the
  same table: MariaDB/MySQL refuse to drop an index a foreign key still needs.

In ``env.py`` (complete files: ``docs/migrations.md``)::

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
from typing import Any, NamedTuple

import sqlalchemy as sa
from alembic.autogenerate import Rewriter, render_op_text
from alembic.autogenerate.api import AutogenContext
from alembic.operations import MigrateOperation
from alembic.operations import ops as alembic_ops
from alembic.runtime.migration import MigrationContext
from sqlalchemy.sql.elements import TextClause

from snowshard._compat import (
    alembic_reverse,
    copy_schema_item,
    is_type_bound,
    register_renderer,
    set_alembic_reverse,
)
from snowshard.migrations.ops import (
    SENTINEL_TABLE,
    ShardedOperation,
    _Shard,
    sharded_operation,
)
from snowshard.spec import DEFAULT_DATABASE, ShardInfo, ShardSpec

__all__ = [
    "SPECS_OPTION",
    "collapse_sharded_ops",
    "include_database",
    "render_spec",
    "shard_info_of",
]

SPECS_OPTION = "snowshard_specs"
"""``context.configure()`` keyword: extra specs, for tables no longer in the models."""

_SPEC_IMPORT = "from snowshard.spec import ShardSpec"


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
                    register_renderer(sub, _render_sharded)


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
            made = copy_schema_item(column)  # attached: its FKs are constraints, re-made below
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
            elif is_type_bound(constraint):
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
            dropped_t = copy.copy(op)
            dropped_t.table_name = SENTINEL_TABLE
            dropped_t.table_kw = {k: v for k, v in op.table_kw.items() if k != "info"}
            original = alembic_reverse(op)
            set_alembic_reverse(dropped_t, original and self.create_table(original))
            return dropped_t
        if isinstance(op, alembic_ops.AddColumnOp):
            added = copy.copy(op)
            added.table_name = SENTINEL_TABLE
            added.column = copy_schema_item(op.column)
            return added
        if isinstance(op, alembic_ops.DropColumnOp):
            dropped = copy.copy(op)
            dropped.table_name = SENTINEL_TABLE
            original = alembic_reverse(op)
            if original is not None:
                converted = self.convert(original)
                assert isinstance(converted, alembic_ops.AddColumnOp)
                set_alembic_reverse(dropped, converted)
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
            original = alembic_reverse(op)
            if original is not None:
                reverse_ix = self.convert(original)
                if not isinstance(reverse_ix, alembic_ops.CreateIndexOp):
                    return None
                set_alembic_reverse(dropped_ix, reverse_ix)
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
            original = alembic_reverse(op)
            if original is not None:
                reverse_c = self.convert(original)
                if not isinstance(reverse_c, alembic_ops.AddConstraintOp):
                    return None
                set_alembic_reverse(dropped_c, reverse_c)
            return dropped_c
        return None


# --------------------------------------------------------------------------- collapsing


class _Entry:
    """One operation of the stream, with the table it changes and its sharded form."""

    def __init__(
        self,
        op: MigrateOperation,
        table: str | None,
        schema: str | None,
        parent: alembic_ops.ModifyTableOps | None,
    ) -> None:
        self.op = op
        self.table = table
        self.schema = schema
        self.parent = parent
        self.sharded: ShardedOperation | None = None
        self.key: tuple[Any, ...] | None = None
        self.rendered = ""


class _Item(NamedTuple):
    """One operation of the rewritten stream and the ModifyTableOps it came from, if any."""

    op: MigrateOperation
    parent: alembic_ops.ModifyTableOps | None


_TableKey = tuple[str | None, str]
"""(schema, physical table name)."""


def _table_of(op: MigrateOperation) -> str | None:
    if isinstance(op, alembic_ops.CreateForeignKeyOp):
        return op.source_table
    name = getattr(op, "table_name", None)
    return None if name is None else str(name)


def _autogen_context(context: MigrationContext, **opts: Any) -> AutogenContext:
    """An AutogenContext rendering as env.py's does (defaults for contexts made by hand)."""
    merged = {
        "alembic_module_prefix": "op.",
        "sqlalchemy_module_prefix": "sa.",
        "user_module_prefix": None,
        "render_item": None,
        **context.opts,
        **opts,
    }
    return AutogenContext(context, opts=merged, autogenerate=False)


def _without_shard_info(op: MigrateOperation) -> None:
    """Keep a per-table ``create_table`` from rendering ``info={'snowshard': ShardInfo(...)}``.

    The ShardInfo tells autogenerate which spec a table belongs to; it is not schema, and
    rendered it would need imports the revision does not have.
    """
    if isinstance(op, alembic_ops.CreateTableOp):
        info = getattr(op, "info", None)
        if isinstance(info, dict) and "snowshard" in info:
            op.info = {key: value for key, value in info.items() if key != "snowshard"}


def _collapsed(context: MigrationContext, entries: list[_Entry]) -> list[_Item]:
    """The stream with the operations that agree on every table of a spec made one."""
    lookup = _Lookup(context)
    if not lookup.by_name:
        return [_Item(entry.op, entry.parent) for entry in entries]
    autogen_context = _autogen_context(context)
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

    items: list[_Item] = []
    emitted: set[tuple[Any, ...]] = set()
    for entry in entries:
        if entry.key is not None and len(renderings[entry.key]) == 1:
            if entry.key not in emitted:
                emitted.add(entry.key)
                assert entry.sharded is not None
                items.append(_Item(entry.sharded, None))
        else:
            _without_shard_info(entry.op)
            items.append(_Item(entry.op, entry.parent))
    return items


# --------------------------------------------------------------------------- ordering


def _plain(op: MigrateOperation) -> MigrateOperation:
    """The Alembic operation ``op`` is, or stands for (a sharded one's template)."""
    return op.template if isinstance(op, ShardedOperation) else op


def _tables(item: _Item) -> frozenset[_TableKey]:
    """The physical tables an operation changes (every table of a sharded one's spec)."""
    op = item.op
    if isinstance(op, ShardedOperation):
        return frozenset((op.schema, name) for name in op.spec.table_names)
    if item.parent is not None:
        return frozenset({(item.parent.schema, item.parent.table_name)})
    table = _table_of(op)
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


def _fk_tables(item: _Item) -> frozenset[_TableKey]:
    """The tables a dropped foreign key is on, and the ones it refers to (when known)."""
    tables = set(_tables(item))
    reverse = alembic_reverse(_plain(item.op))
    if isinstance(reverse, alembic_ops.CreateForeignKeyOp):
        schema = reverse.kw.get("referent_schema")
        op = item.op
        if isinstance(op, ShardedOperation):
            for index in range(op.spec.count):
                try:
                    tables.add((schema, _Shard(op.spec, index).format(reverse.referent_table)))
                except (KeyError, IndexError, ValueError):
                    break
        else:
            tables.add((schema, reverse.referent_table))
    return frozenset(tables)


def _order_drops(items: list[_Item]) -> list[_Item]:
    """Order the drops so that the stream runs on every backend.

    An index dropped before its table is dropped later in the stream is left out: the table
    takes it along, and MariaDB/MySQL refuse to drop an index a foreign key of the table
    still uses (the downgrade of a revision that created both). A dropped foreign key moves
    before the first index, unique constraint or column dropped on its tables, for the same
    reason; dropping a foreign key earlier never breaks anything.
    """
    kept: list[_Item] = []
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

    ordered: list[_Item] = []
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


def _regroup(items: list[_Item]) -> list[MigrateOperation]:
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


def _rewrite(context: MigrationContext, container: alembic_ops.OpContainer) -> None:
    entries: list[_Entry] = []
    for op in container.ops:
        if isinstance(op, alembic_ops.ModifyTableOps):
            entries += [_Entry(inner, op.table_name, op.schema, op) for inner in op.ops]
        else:
            entries.append(_Entry(op, _table_of(op), getattr(op, "schema", None), None))
    container.ops = _regroup(_order_drops(_collapsed(context, entries)))


# --------------------------------------------------------------------------- imports


_NOT_IMPORTED = ("sqlalchemy", "builtins", "__main__")


def _imports_for(context: MigrationContext, script: alembic_ops.MigrationScript) -> set[str]:
    """``import <module>`` for every type the script renders by its module path.

    Alembic renders a type that is not SQLAlchemy's as ``<module>.<repr>`` (with the default
    ``user_module_prefix=None``) and imports nothing for it. The script is rendered once here
    with a ``render_item`` hook (wrapping the environment's own) noting those types; a
    module is imported when its path shows up in what was rendered.
    """
    if context.opts.get("user_module_prefix") is not None:
        return set()  # the environment chose how such types are spelled and imported
    user_render = context.opts.get("render_item")
    seen: set[str] = set()

    def note(type_: str, obj: Any, autogen_context: AutogenContext) -> Any:
        rendered = user_render(type_, obj, autogen_context) if user_render else False
        if rendered is False and type_ == "type":
            module = type(obj).__module__
            if module.split(".")[0] not in _NOT_IMPORTED and module.isascii():
                seen.add(module)
        return rendered

    autogen_context = _autogen_context(context, render_item=note)
    imports: set[str] = set()
    for container in (*script.upgrade_ops_list, *script.downgrade_ops_list):
        for op in container.ops:
            seen.clear()
            try:
                text = render_op_text(autogen_context, op)
            except Exception:  # noqa: BLE001 - rendered for real later, which reports it
                continue
            imports.update(f"import {module}" for module in seen if f"{module}." in text)
    return imports


# --------------------------------------------------------------------------- the rewriter


class _CollapseShardedOps(Rewriter):
    """A Rewriter that, after every rewrite (chained ones too), completes the imports."""

    def __call__(
        self,
        context: MigrationContext,
        revision: Any,
        directives: list[alembic_ops.MigrationScript],
    ) -> None:
        super().__call__(context, revision, directives)
        for script in directives:
            imports = _imports_for(context, script)
            if not imports <= script.imports:
                # a new set: MigrationScript's default ``imports`` is shared by every script
                script.imports = set(script.imports) | imports


collapse_sharded_ops = _CollapseShardedOps()
"""``process_revision_directives`` for env.py: per-shard operations become sharded ones.

An Alembic :class:`~alembic.autogenerate.Rewriter`; chain it with your own rewriters with
``collapse_sharded_ops.chain(other)``. Besides collapsing, it orders drops so that
downgrades run on MariaDB/MySQL too, and adds the imports of the snowshard column types
(and any other non-SQLAlchemy type) the revision renders.
"""


@collapse_sharded_ops.rewrites(alembic_ops.UpgradeOps)
def _collapse_upgrade(
    context: MigrationContext, revision: Any, directive: alembic_ops.UpgradeOps
) -> alembic_ops.UpgradeOps:
    _rewrite(context, directive)
    return directive


@collapse_sharded_ops.rewrites(alembic_ops.DowngradeOps)
def _collapse_downgrade(
    context: MigrationContext, revision: Any, directive: alembic_ops.DowngradeOps
) -> alembic_ops.DowngradeOps:
    _rewrite(context, directive)
    return directive
