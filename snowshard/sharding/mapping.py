"""Physical tables and classes of a sharded model.

For ``class Order(Sharded, Base)`` declared with ``Shards(16, ...)``:

* declarative maps ``Order`` to its logical table ``orders``, which is then removed from
  ``Base.metadata.tables`` (it is never created; foreign keys *from* it still resolve);
* each physical table ``orders_00`` .. ``orders_15`` is a copy of it
  (:meth:`~sqlalchemy.schema.Table.to_metadata`) in ``Base.metadata``, with
  ``table.info["snowshard"] = ShardInfo(spec, index)``; explicitly named indexes and
  constraints get the physical table's name in place of the logical one;
* each physical class ``Order_00`` .. ``Order_15`` subclasses ``Order`` as a *concrete*
  inheriting mapper (polymorphic identity = table index) of its table.

With generations (:mod:`snowshard.sharding.generations`), each generation's tables follow
in one global index space (``orders_00`` .. ``orders_15``, then ``orders_g1_00`` ..), each
carrying ``ShardInfo(its generation's spec, its own index)``, and its classes are named
``Order_g1_00`` ..; a class's polymorphic identity is its global index.

So ``Base.metadata`` holds exactly the tables to create and migrate, and a flush writes
each object to its own table through the ordinary unit of work. A read of several tables
of one database uses :func:`union_entity`, a ``with_polymorphic`` entity over a
``UNION ALL`` of those tables.
"""

from __future__ import annotations

import copyreg
import warnings
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Column, Index, Table, UniqueConstraint, inspect
from sqlalchemy.exc import SAWarning
from sqlalchemy.orm import polymorphic_union, with_polymorphic
from sqlalchemy.sql.naming import conv

from snowshard._compat import keyed_subquery
from snowshard.sharding.generations import Timeline, build_timeline, default_strategy
from snowshard.sharding.model import (
    MODEL_INFO,
    ShardedModel,
    model_of_class,
    snowflake_default_of,
)
from snowshard.sharding.shards import Shards
from snowshard.spec import ShardConfigError, ShardInfo, ShardSpec
from snowshard.strategies import ShardStrategy, colocates_genes

__all__ = ["DISCRIMINATOR", "map_shards", "union_entity"]

_VERSION_WARNING = "Inheriting version_id_col"
"""SQLAlchemy's warning for a subclass versioning another column than its parent's, which
concerns a subclass whose rows are also in the parent's table (not a concrete one)."""

DISCRIMINATOR = "snowshard_shard"
"""Name of the table-index column of the UNION ALL that reads several tables at once."""


def _strategy(cls: type, count: int, strategy: Any, what: str = "__shards__") -> Any:
    if strategy is None:
        return default_strategy(count)
    if not isinstance(strategy, ShardStrategy):
        raise ShardConfigError(
            f"{cls.__name__}: strategy {strategy!r} has no count and shard_of(value); use "
            "Gene, Mod, Mix or Shift from snowshard.strategies, or an object with both"
        )
    if strategy.count != count:
        raise ShardConfigError(
            f"{cls.__name__}: strategy {strategy!r} has {strategy.count} shards, but "
            f"{what} declares {count} tables; make them equal"
        )
    return strategy


def _timeline(
    cls: type, table: Table, declaration: Shards, first: tuple[ShardSpec, Any]
) -> Timeline | None:
    """The generations of a model that declares some, checked against its ID column."""
    if not declaration.generations:
        return None
    default = snowflake_default_of(table)
    pk = list(table.primary_key.columns)
    if default is None or pk[0].key not in declaration.keys:
        raise ShardConfigError(
            f"{cls.__name__}: generations route a row by its ID's time, so the primary key "
            f"must be a snowflake ID (snowflake_pk(...)) and a shard key; declare "
            f"key=({pk[0].key if pk else 'id'!r}, ...) with id = snowflake_pk(...)"
        )
    return build_timeline(
        cls.__name__,
        first,
        declaration.generations,
        default.generator.layout,
        lambda count, strategy, what: _strategy(cls, count, strategy, what),
    )


def _check_columns(cls: type, table: Table, keys: tuple[str, ...]) -> None:
    if not keys:
        raise ShardConfigError(f"{cls.__name__}: Shards(key=...) needs at least one column")
    for key in keys:
        if key not in table.c:
            raise ShardConfigError(
                f"{cls.__name__}: shard key {key!r} is not a column of {table.name} "
                f"(columns: {', '.join(table.c.keys())})"
            )
    if DISCRIMINATOR in table.c:
        raise ShardConfigError(f"{cls.__name__}: the column name {DISCRIMINATOR!r} is reserved")


def _check_column_properties(cls: type, mapper: Any, table: Table) -> None:
    """Refuse a ``column_property()`` (or ``query_expression()``) that is not a column of
    ``table``: its SQL names the logical table, which no database holds (or, where an
    old unsharded table of that name remains, silently reads it)."""
    # Mapper.columns, filled when the mapper is built (column_attrs would configure every
    # mapper of the registry, while classes it names may not be declared yet)
    for key, column in mapper.columns.items():
        if isinstance(column, Column) and column.table is table:
            continue
        raise ShardConfigError(
            f"{cls.__name__}.{key}: column_property() and query_expression() are not "
            f"supported on a sharded model: their SQL would name the logical table "
            f"{table.name!r}, which no database holds; use a hybrid_property (Python on "
            f"the object, SQL in queries), or select the expression in the query "
            f"(select({cls.__name__}, expression.label({key!r})))"
        )


def _check_keys(model: ShardedModel) -> None:
    name = model.name
    if len(model.keys) == 1:
        return
    default = model.id_default
    others = [k for k in model.keys if k != model.id_key]
    if (
        len(others) != 1
        or model.id_key not in model.keys
        or default is None
        or default.gene_from != others[0]
    ):
        raise ShardConfigError(
            f"{name}: several shard keys {model.keys} must name the same shard for every row; "
            "that holds for (id, parent) when the id is snowflake_pk(..., gene_from=parent)"
        )
    for period in model.generations:
        if not colocates_genes(period.strategy, default.generator.layout):
            where = f" (generation {period.number})" if period.number else ""
            raise ShardConfigError(
                f"{name}: {period.strategy!r}{where} does not send {others[0]} and the ID "
                f"carrying its gene to the same shard "
                f"(gene_bits={default.generator.layout.gene_bits}); use "
                f"Gene(n) with n <= 2**gene_bits, or shard by one key"
            )


PER_TABLE = "snowshard_per_table"
"""``info`` key of a unique constraint or index meant to hold within each table only."""


def _pinning_columns(model: ShardedModel) -> set[str]:
    """Columns whose value alone picks a row's table: equal values, one table."""
    if model.timeline is not None:  # a parent key names one table per generation
        return {k for k in model.keys if k == model.id_key}
    pins = set(model.keys)
    default = model.id_default
    if (
        model.id_key in model.keys
        and default is not None
        and default.gene_from is not None
        and colocates_genes(model.strategy, default.generator.layout)
    ):
        pins.add(default.gene_from)  # its gene, carried by the ID, picks the table
    return pins


def _check_unique(model: ShardedModel) -> None:
    """Refuse a unique constraint or index that each table would enforce on its own rows
    only: one without a column that picks the table (unless marked :data:`PER_TABLE`)."""
    pins = _pinning_columns(model)
    table = model.table
    for item in (*table.constraints, *table.indexes):
        unique = isinstance(item, UniqueConstraint) or (isinstance(item, Index) and item.unique)
        if not unique or item.info.get(PER_TABLE):
            continue
        columns = [c.key for c in item.columns]  # type: ignore[attr-defined]
        if pins & set(columns):
            continue
        shown = ", ".join(columns) or str(item)
        listed = ", ".join(repr(c) for c in columns)
        raise ShardConfigError(
            f"{model.name}: UNIQUE ({shown}) would hold within each of its {model.count} "
            f"tables, not across them: a row whose ({shown}) another table holds would be "
            f"accepted where one table refuses it. Include a column that picks the table "
            f"({', '.join(sorted(pins)) or 'none, with layout generations, but the ID'}) in "
            f"it; or, if one per table is what you mean, declare it in __table_args__ as "
            f"UniqueConstraint({listed}, info={{{PER_TABLE!r}: True}})"
        )


def _copy_table(logical: Table, name: str) -> Table:
    assert logical.metadata is not None
    table = logical.to_metadata(logical.metadata, name=name)
    given = {item.name for item in (*logical.indexes, *logical.constraints)}  # type: ignore[attr-defined]
    items: list[Any] = [*table.indexes, *table.constraints]
    for item in items:
        old = item.name
        if isinstance(old, str) and old in given:
            new = old.replace(logical.name, name) if logical.name in old else f"{name}_{old}"
            item.name = conv(new) if isinstance(old, conv) else new
    return table


def _physical_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    return object.__new__(cls)


def physical_class(model_class: type, index: int) -> type:
    """The physical class ``index`` of the sharded model ``model_class``: how pickle finds
    one. A physical class is built at run time, so pickle cannot import it by name; it
    stores the logical class (importable) and the index instead (:func:`_reduce_class`)."""
    entry = model_of_class(model_class)
    assert entry is not None, f"{model_class!r} is not a sharded model"
    return entry[0].classes[index]


def _reduce_class(physical: type) -> tuple[Any, ...]:
    entry = model_of_class(physical)
    assert entry is not None and entry[1] is not None, f"{physical!r} is no physical class"
    return physical_class, (entry[0].cls, entry[1])


_metaclasses: dict[type, type] = {}
"""Metaclass of the logical classes -> that of their physical classes (one per kind)."""


def _physical_metaclass(meta: type) -> type:
    """A subclass of ``meta`` for physical classes, which pickle reduces with
    :func:`_reduce_class` (``copyreg`` looks a class's metaclass up before its name)."""
    found = _metaclasses.get(meta)
    if found is None:
        namespace = {"__module__": __name__, "__doc__": "The metaclass of physical classes."}
        found = _metaclasses[meta] = type(f"Physical{meta.__name__}", (meta,), namespace)
        copyreg.pickle(found, _reduce_class)
    return found


def map_shards(
    cls: type, declaration: Shards, marker: str, per_class: Mapping[str, Any]
) -> ShardedModel:
    """Create the physical tables and classes of the freshly mapped logical ``cls``."""
    mapper: Any = inspect(cls)
    table = mapper.local_table
    if not isinstance(table, Table) or table.metadata is None:
        raise ShardConfigError(f"{cls.__name__}: a sharded model must map a single table")
    spec = ShardSpec(
        table.name,
        declaration.count,
        declaration.pattern,
        {key: tuple(indices) for key, indices in declaration.databases.items()},
    )
    _check_columns(cls, table, declaration.keys)
    _check_column_properties(cls, mapper, table)
    strategy = _strategy(cls, declaration.count, declaration.strategy)
    timeline = _timeline(cls, table, declaration, (spec, strategy))
    model = ShardedModel(
        cls, table, spec, strategy, declaration.keys, declaration.fan_out, timeline
    )
    _check_keys(model)
    _check_unique(model)
    table.metadata.remove(table)
    classes = []
    for period in model.generations:
        local_spec = period.spec
        width = max(2, len(str(local_spec.count - 1)))
        prefix = f"{cls.__name__}_g{period.number}" if period.number else cls.__name__
        for local in range(local_spec.count):
            index = period.offset + local
            classes.append(
                _physical_class(
                    cls, table, mapper, marker, per_class,
                    ShardInfo(local_spec, local), index, f"{prefix}_{local:0{width}d}",
                )
            )  # fmt: skip
    model.classes = tuple(classes)
    model.mappers = tuple(inspect(c) for c in classes)
    model.tables = tuple(m.local_table for m in model.mappers)  # type: ignore[misc]
    table.info[MODEL_INFO] = model
    mapper.class_manager.info[MODEL_INFO] = (model, None)
    for index, physical_mapper in enumerate(model.mappers):
        physical_mapper.class_manager.info[MODEL_INFO] = (model, index)
    return model


def _physical_class(
    cls: type,
    table: Table,
    mapper: Any,
    marker: str,
    per_class: Mapping[str, Any],
    info: ShardInfo,
    index: int,
    name: str,
) -> type:
    """The class of one physical table; ``index`` is its global table index."""
    physical = _copy_table(table, info.spec.table_name(info.shard))
    physical.info["snowshard"] = info
    arguments: dict[str, Any] = {"concrete": True, "polymorphic_identity": index}
    versioned = mapper.version_id_col is not None
    if versioned:  # the row's own version column, counted as the logical model counts it
        arguments["version_id_col"] = physical.c[mapper.version_id_col.key]
        arguments["version_id_generator"] = mapper.version_id_generator
    namespace = {
        "__table__": physical,
        "__mapper_args__": arguments,
        "__module__": cls.__module__,
        "__qualname__": name,
        "__doc__": f"Rows of {cls.__name__} in table {physical.name} (shard {index}).",
        "__new__": _physical_new,  # no routing: the class is the table
        # the logical class's own constructor, so that the ORM instruments it once
        # (inheriting the logical class's instrumented __init__ would wrap it twice)
        "__init__": mapper.class_manager.original_init,
        marker: index,
        **per_class,
    }
    with warnings.catch_warnings():
        if versioned:  # a concrete class has no row in the inherited table to version
            warnings.filterwarnings("ignore", _VERSION_WARNING, SAWarning)
        physical_type = _physical_metaclass(type(cls))
        return physical_type(name, (cls,), namespace)  # type: ignore[no-any-return]


def union_entity(model: ShardedModel, shards: tuple[int, ...]) -> Any:
    """A ``with_polymorphic`` entity reading ``shards`` of ``model`` as one UNION ALL.

    Rows load as instances of their physical classes. Cached per set of shards.
    """
    entity = model.unions.get(shards)
    if entity is None:
        compound = polymorphic_union(  # type: ignore[no-untyped-call]
            {index: model.tables[index] for index in shards}, DISCRIMINATOR
        ).element
        # the UNION's SQL is fully determined by the model and the shards: let that be its
        # cache key, so statements over 16 tables are as cheap to look up as over one
        key = f"{model.serial}:{model.table.name}:{','.join(map(str, shards))}"
        union = keyed_subquery(compound, name=model.table.name, key=key)
        entity = with_polymorphic(
            model.cls,
            [model.classes[index] for index in shards],
            selectable=union,
            polymorphic_on=union.c[DISCRIMINATOR],
            adapt_on_names=True,
        )
        model.unions[shards] = entity
    return entity
