"""What the ORM loads with each object that would name a sharded model's logical table.

SQLAlchemy adds some SQL when it compiles an ORM statement, after the statement was
routed, so nothing retargets it to physical tables; the SQL would name the logical table,
which no database holds (or, where an old unsharded table of that name remains, would
read that table, silently). Refused before any SQL:

* a joined eager load (``joinedload()``, ``joinedload("*")``, ``lazy="joined"``) from an
  unsharded class into a sharded model: ``selectinload()`` is the way out, reading the
  children by their parents' keys, shard by shard. A relationship of a sharded class is
  declared per physical class (``@declared_attr``) and joins its own table, so it stays;
* a ``column_property()`` of a loaded class (selected, or joined eagerly) whose SQL reads
  a sharded model (``select(func.count(Order.id))...scalar_subquery()``). On a sharded
  class itself such properties are refused when it is declared.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Column, Table, inspect

from snowshard._compat import loader_strategies
from snowshard.sharding.analysis import models_named, selected_entities
from snowshard.sharding.errors import UnsupportedShardQuery
from snowshard.sharding.model import model_of_mapper

__all__ = ["check_eager_joins"]

_JOINED = "joined"


def _sharded(mapper: Any) -> bool:
    """Whether ``mapper`` (or an alias's, in an option's path) maps a sharded model's
    logical class or one of its tables."""
    return model_of_mapper(mapper.mapper) is not None


def _entity_mappers(statement: Any) -> list[Any]:
    """The mappers of the entities ``statement`` selects whole."""
    return [inspect(entity).mapper for entity in selected_entities(statement)]


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


def _reads_sharded(mapper: Any) -> Iterator[tuple[str, Any]]:
    """``(attribute, model)`` of each SQL expression attribute of ``mapper`` (its
    ``Mapper.columns`` that are no table's columns) reading a sharded model."""
    for key, column in mapper.columns.items():
        if isinstance(column, Column) and isinstance(column.table, Table):
            continue
        for model in models_named(column)[:1]:
            yield key, model


def check_eager_joins(statement: Any) -> None:
    """Refuse a joined eager load from an unsharded class into a sharded model, and a
    column_property reading a sharded model on a class the statement loads (module
    docstring), before any SQL."""
    joined = list(_joined_loads(statement))
    for mapper in [*_entity_mappers(statement), *(prop.mapper for _, prop in joined)]:
        for key, model in _reads_sharded(mapper):
            column = f"{model.name}.{model.keys[-1]}"
            raise UnsupportedShardQuery(
                f"{mapper.class_.__name__}.{key} is a SQL expression loaded with each object "
                f"(column_property) that reads the sharded {model.name}: its SQL would name "
                f"the logical table, which no database holds; query {model.name} for it "
                f"instead (select({column}, func.count()).group_by({column}), say) and "
                f"match the rows in Python, or load the rows with a relationship"
            )
    for parent, prop in joined:
        if _sharded(prop.mapper) and not _sharded(parent):
            name = f"{parent.class_.__name__}.{prop.key}"
            raise UnsupportedShardQuery(
                f"a joined eager load of {name} (joinedload(), or lazy='joined') would join "
                f"the logical table of the sharded {prop.mapper.class_.__name__}, which no "
                f"database holds; load it with selectinload({name}), which reads each "
                f"shard for its parents' keys"
            )
