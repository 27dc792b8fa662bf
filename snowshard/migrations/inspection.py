"""Whether a physical table already has a sharded operation's change, from its Inspector.

Online, the runner asks :func:`applied` before changing each table and skips those that
already have the change: the table exists (or is gone), the column, index or constraint is
there (or gone), a renamed column already has its new name. What a drop removes counts as
gone when its whole table is gone. An alter without a rename is never "applied": it is
idempotent, so it runs again. Names are compared case-insensitively (MySQL and the
identifier folding of other backends).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from sqlalchemy.engine.reflection import Inspector

from snowshard.migrations.naming import Shard
from snowshard.migrations.ops import ShardedOperation

__all__ = ["applied"]


def _names(items: Sequence[Any]) -> set[str]:
    return {str(item["name"]).casefold() for item in items if item.get("name")}


def _column_names(insp: Inspector, table: str, schema: str | None, kind: str | None) -> set[str]:
    return _names(insp.get_columns(table, schema=schema))


def _index_names(insp: Inspector, table: str, schema: str | None, kind: str | None) -> set[str]:
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


_NAMES: dict[str, Callable[[Inspector, str, str | None, str | None], set[str]]] = {
    "column": _column_names,
    "index": _index_names,
    "constraint": _constraint_names,
}
"""What is in a table, by the kind of object a change is about."""


def applied(operation: ShardedOperation, insp: Inspector, shard: Shard) -> bool:
    """True if ``shard``'s table already has ``operation``'s change."""
    action, kind, target, renamed = operation.change
    table, schema = shard.table, operation.schema
    if kind == "table":
        exists = insp.has_table(table, schema=schema)
        return exists if action == "create" else not exists
    if action == "drop" and not insp.has_table(table, schema=schema):
        return True  # gone with its table (a half-done downgrade, say)
    new_name = getattr(operation.template, renamed) if renamed else None
    if action == "alter" and not new_name:
        return False  # a type / nullability / default change is idempotent: apply it again
    raw = attrgetter(target)(operation.template)
    name = raw if kind == "column" else shard.name(raw, target.replace("_", " "))
    # Alembic's constraint operations say which kind they are about (None: any)
    constraint_kind = getattr(operation.template, "constraint_type", None)
    present = _NAMES[kind](insp, table, schema, constraint_kind)
    if action == "alter":
        return _has(new_name, present) and not _has(name, present)
    return _has(name, present) if action == "create" else not _has(name, present)


def _has(name: object, names: set[str]) -> bool:
    return isinstance(name, str) and name.casefold() in names
