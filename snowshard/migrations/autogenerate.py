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

Each physical table's operation becomes a template with the inverse of the rewrite the
runner applies (:mod:`snowshard.migrations.physical`, with a
:class:`~snowshard.migrations.naming.Templater`); the operations of one spec collapse when
their templates render alike.

It also makes generated revisions run as written, on every backend: it adds the imports
they need (:mod:`snowshard.migrations.render`; a table left per shard does not render its
``ShardInfo``: it is not part of the schema), and orders drops so that downgrades run on
MariaDB/MySQL (:mod:`snowshard.migrations.ordering`).

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

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic.autogenerate import Rewriter, render_op_text
from alembic.operations import MigrateOperation
from alembic.operations import ops as alembic_ops
from alembic.runtime.migration import MigrationContext

from snowshard.migrations.naming import Shard, Templater
from snowshard.migrations.ops import ShardedOperation, sharded_operation
from snowshard.migrations.ordering import Item, order_drops, regroup, table_of
from snowshard.migrations.physical import rewrite
from snowshard.migrations.render import autogen_context_for, imports_for
from snowshard.spec import DEFAULT_DATABASE, ShardConfigError, ShardInfo, ShardSpec

__all__ = [
    "SPECS_OPTION",
    "collapse_sharded_ops",
    "include_database",
    "shard_info_of",
]

SPECS_OPTION = "snowshard_specs"
"""``context.configure()`` keyword: extra specs, for tables no longer in the models."""


def shard_info_of(table: sa.Table) -> ShardInfo | None:
    """The :class:`ShardInfo` a physical table carries, or None for a plain table."""
    if not isinstance(table, sa.Table):
        raise ShardConfigError(
            f"shard_info_of needs a sqlalchemy Table (e.g. Base.metadata.tables['orders_00']), "
            f"got {type(table).__name__} {table!r}"
        )
    info = table.info.get("snowshard")
    return info if isinstance(info, ShardInfo) else None


def include_database(
    database: str, *, unsharded: str | Callable[[sa.Table], str] = DEFAULT_DATABASE
) -> Callable[..., bool]:
    """An ``include_object`` hook keeping the model tables that live in ``database``.

    A physical table lives where its spec puts its shard; any other table lives in
    ``unsharded`` (a bind key, or a function of the table). Tables found in the database
    but absent from the models are kept, so autogenerate proposes to drop them.
    ``database`` must be a non-empty str and ``unsharded`` one or a callable
    (:class:`ShardConfigError` otherwise).
    """
    for what, key in (("database", database), ("unsharded", unsharded)):
        if not (isinstance(key, str) and key) and not (what == "unsharded" and callable(key)):
            raise ShardConfigError(
                f"include_database: {what} must be a database key (a non-empty str"
                f"{', or a function of the table' if what == 'unsharded' else ''}), got "
                f"{type(key).__name__} {key!r}; e.g. include_database('default')"
            )

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


# --------------------------------------------------------------------------- collapsing


def _shards_by_table(context: MigrationContext) -> dict[str, ShardInfo]:
    """Physical table name -> ShardInfo, from the target metadata and the extra specs."""
    by_name: dict[str, ShardInfo] = {}
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
            by_name[spec.table_name(index)] = ShardInfo(spec, index)
    for md in metadatas:
        for table in md.tables.values():
            info = shard_info_of(table)
            if info is not None:
                by_name[table.name] = info
    return by_name


class _Entry:
    """One operation of the stream, with the table it changes and its sharded form."""

    def __init__(
        self, op: MigrateOperation, table: str | None, parent: alembic_ops.ModifyTableOps | None
    ) -> None:
        self.op = op
        self.table = table
        self.parent = parent
        self.sharded: ShardedOperation | None = None
        self.key: tuple[Any, ...] | None = None


def _without_shard_info(op: MigrateOperation) -> None:
    """Keep a per-table ``create_table`` from rendering ``info={'snowshard': ShardInfo(...)}``.

    The ShardInfo tells autogenerate which spec a table belongs to; it is not schema, and
    rendered it would need imports the revision does not have.
    """
    if isinstance(op, alembic_ops.CreateTableOp):
        info = getattr(op, "info", None)
        if isinstance(info, dict) and "snowshard" in info:
            op.info = {key: value for key, value in info.items() if key != "snowshard"}


def _collapsed(context: MigrationContext, entries: list[_Entry]) -> list[Item]:
    """The stream with the operations that agree on every table of a spec made one."""
    shards = _shards_by_table(context)
    if not shards:
        return [Item(entry.op, entry.parent) for entry in entries]
    rendering = autogen_context_for(context)
    renderings: dict[tuple[Any, ...], set[str]] = {}
    for entry in entries:
        info = None if entry.table is None else shards.get(entry.table)
        if info is None or isinstance(entry.op, ShardedOperation):
            continue
        templater = Templater(Shard(info.spec, info.shard), shards.get)
        try:
            entry.sharded = sharded_operation(info.spec, rewrite(entry.op, templater))
            rendered = render_op_text(rendering, entry.sharded)
        except (ValueError, KeyError):
            entry.sharded = None  # not expressible as a sharded operation: keep per table
            continue
        entry.key = (info.spec, type(entry.sharded), entry.sharded.target)
        renderings.setdefault(entry.key, set()).add(rendered)

    items: list[Item] = []
    emitted: set[tuple[Any, ...]] = set()
    for entry in entries:
        if entry.key is not None and len(renderings[entry.key]) == 1:
            if entry.key not in emitted:
                emitted.add(entry.key)
                assert entry.sharded is not None
                items.append(Item(entry.sharded, None))
        else:
            _without_shard_info(entry.op)
            items.append(Item(entry.op, entry.parent))
    return items


def _rewrite(context: MigrationContext, container: alembic_ops.OpContainer) -> None:
    entries: list[_Entry] = []
    for op in container.ops:
        if isinstance(op, alembic_ops.ModifyTableOps):
            entries += [_Entry(inner, op.table_name, op) for inner in op.ops]
        else:
            entries.append(_Entry(op, table_of(op), None))
    container.ops = regroup(order_drops(_collapsed(context, entries)))


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
            imports = imports_for(context, script)
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
