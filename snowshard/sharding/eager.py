"""Joined eager loads that would name a sharded model's logical table in SQL.

A ``joinedload()`` (or ``relationship(lazy="joined")``) from an unsharded class to a
sharded model adds its JOIN when SQLAlchemy compiles the statement, after the statement
was routed: the SQL would name the logical table, which no database holds (or, where an
old unsharded table of that name remains, would read that table, silently). Such a load
is refused before any SQL, with ``selectinload()`` as the way out: it reads the children
by their parents' keys, shard by shard. A relationship of a sharded class is declared per
physical class (``@declared_attr``) and joins its own table, so it is left alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from snowshard._compat import loader_strategies
from snowshard.sharding.errors import UnsupportedShardQuery
from snowshard.sharding.model import model_of_table

__all__ = ["check_eager_joins"]

_JOINED = "joined"


def _sharded(mapper: Any) -> bool:
    """Whether ``mapper`` maps a sharded model's logical table or one of its tables."""
    table = getattr(mapper, "local_table", None)
    return model_of_table(table) is not None or "snowshard" in getattr(table, "info", {})


def _entity_mappers(statement: Any) -> list[Any]:
    found = []
    for description in getattr(statement, "column_descriptions", ()):
        entity = description.get("entity")
        if entity is not None and description.get("expr") is entity:
            found.append(getattr(entity, "__mapper__", None) or getattr(entity, "mapper", None))
    return [mapper for mapper in found if mapper is not None]


def _joined_loads(statement: Any) -> Iterator[tuple[Any, Any]]:
    """``(parent mapper, relationship)`` of each joined eager load of ``statement``: by an
    option, or by a relationship's own ``lazy="joined"`` (or a ``joinedload("*")``) on a
    selected entity, unless an option names another strategy for it."""
    chosen: dict[tuple[Any, str], Any] = {}
    wildcard = None
    for path, strategy in loader_strategies(statement):
        lazy = strategy.get("lazy")
        if not path:
            wildcard = lazy if wildcard is None else wildcard
            continue
        if len(path) >= 3 and hasattr(path[-2], "mapper"):
            chosen[(path[-3], path[-2].key)] = lazy
            if lazy == _JOINED:
                yield path[-3], path[-2]
    for mapper in _entity_mappers(statement):
        for prop in mapper.relationships:
            if (mapper, prop.key) not in chosen and (wildcard or prop.lazy) == _JOINED:
                yield mapper, prop


def check_eager_joins(statement: Any) -> None:
    """Refuse a joined eager load from an unsharded class into a sharded model
    (module docstring), before any SQL."""
    for parent, prop in _joined_loads(statement):
        if _sharded(prop.mapper) and not _sharded(parent):
            name = f"{parent.class_.__name__}.{prop.key}"
            raise UnsupportedShardQuery(
                f"a joined eager load of {name} (joinedload(), or lazy='joined') would join "
                f"the logical table of the sharded {prop.mapper.class_.__name__}, which no "
                f"database holds; load it with selectinload({name}), which reads each "
                f"shard for its parents' keys"
            )
