"""The ``before_flush`` hook: every new or changed sharded row still belongs where it is.

A SQL expression set on an attribute (``order.amount = Order.amount + 1``, the ORM's way
to compute a value in the UPDATE) names the logical model; it is pointed at the row's own
table here. One that reads a sharded model in a subquery, or names another model, is
refused: it would read the row's table only. So is one set on an unsharded object that
reads a sharded model (no database holds the model's logical table).

Raised here, an error precedes any SQL of the flush: a row built without a shard key,
a key changed to another shard's value (moving rows is not an update), a key set to
None, or a NULL gene parent for an ID still to be issued. With generations
(:mod:`snowshard.sharding.generations`) a row's table must be the one of its ID's
generation, and a parent key must be one its table's generation can hold; a new row must
have its ID (the logical class's constructor issues it), since an ID issued by the column
default during the flush could belong to another generation than the row's table.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ClauseElement

from snowshard.sharding.analysis import models_in_subqueries, models_named
from snowshard.sharding.collation import check_string_keys
from snowshard.sharding.declare import ROUTED_KEYS
from snowshard.sharding.errors import MissingShardKey, ShardKeyChanged, UnsupportedShardQuery
from snowshard.sharding.listeners import check_listeners
from snowshard.sharding.model import ShardedModel, model_of_class
from snowshard.sharding.rewrite import Target, retarget

__all__ = ["check_flush"]


def check_flush(session: Session, flush_context: Any, instances: Any) -> None:
    """``before_flush`` hook: every new or changed sharded row still belongs where it is,
    and the listeners on its model reach it (:mod:`~snowshard.sharding.listeners`)."""
    checked: set[int] = set()
    models: set[ShardedModel] = set()
    for obj in session.new:
        entry = model_of_class(type(obj))
        if entry is None:
            _check_unsharded_row(obj, "new")
            continue
        model, shard = entry
        models.add(model)
        if shard is None:
            raise MissingShardKey(
                f"a {model.name} was built without its shard key; pass "
                f"{' or '.join(model.keys)} to {model.name}(...), which picks its table"
            )
        if id(model) not in checked:  # string keys only where the database matches exactly
            checked.add(id(model))
            check_string_keys(model, session.get_bind(mapper=model.mappers[shard]).dialect.name)
        values = obj.__dict__  # the ORM keeps loaded attribute values here
        _point_expressions(obj, model, shard, "new")
        if values.get(ROUTED_KEYS) == tuple(values.get(key) for key in model.keys):
            gene = model.gene_parent
            if gene is None or values.get(gene[0]) is not None or values.get(gene[1]) is not None:
                continue  # keys as the constructor routed them
        _check_row(obj, model, shard, "new")
    for obj in session.dirty:
        entry = model_of_class(type(obj))
        if entry is None:
            _check_unsharded_row(obj, "changed")
        elif entry[1] is not None:
            models.add(entry[0])
            _point_expressions(obj, entry[0], entry[1], "changed")
            _check_row(obj, entry[0], entry[1], "changed")
    for obj in session.deleted:
        entry = model_of_class(type(obj))
        if entry is not None:
            models.add(entry[0])
    check_listeners(models)


def _point_expressions(obj: Any, model: ShardedModel, shard: int, what: str) -> None:
    """Point the SQL expressions set on ``obj``'s attributes at its table (module docstring)."""
    for key, value in list(obj.__dict__.items()):
        if not isinstance(value, ClauseElement):
            continue
        named = models_named(value, nested=False)
        read = models_in_subqueries(value)
        if read or any(m is not model for m in named):
            raise UnsupportedShardQuery(
                f"a {what} {model.name} row in {model.tables[shard].name} sets {key} to a SQL "
                f"expression that reads {', '.join(m.name for m in read or named)}: the "
                "row's statement runs on its own table, where it would read that table's "
                "rows only; run the query first and set its result"
            )
        if named:
            setattr(obj, key, retarget(value, {model: Target(model, (shard,))}))


def _check_unsharded_row(obj: Any, what: str) -> None:
    """Refuse a SQL expression set on an unsharded object's attribute that reads a sharded
    model: no database holds the model's logical table, and the row's statement runs in one
    database (the guard of :mod:`~snowshard.sharding.logical_guard` would stop it later, in
    the middle of the flush)."""
    for key, value in obj.__dict__.items():
        if isinstance(value, ClauseElement) and (named := models_named(value)):
            raise UnsupportedShardQuery(
                f"a {what} {type(obj).__name__} row sets {key} to a SQL expression that reads "
                f"{', '.join(m.name for m in named)}, which is sharded: its statement runs in "
                "one database, where no table holds all of its rows; run the query first "
                "(the session merges it across shards) and set its result"
            )


def _check_row(obj: Any, model: ShardedModel, shard: int, what: str) -> None:
    label = f"a {what} {model.name} row in {model.tables[shard].name}"
    present = 0
    for key in model.keys:
        value = getattr(obj, key)
        if value is None:
            continue
        present += 1
        found = model.shards_of(key, value)
        if shard not in found:
            shown = found[0] if len(found) == 1 else list(found)
            raise ShardKeyChanged(
                f"{label} now has {key}={value!r}, which belongs to shard {shown}; rows "
                "cannot move between tables: add a new row and delete this one"
            )
    id_key = model.id_key
    if model.timeline is not None and id_key is not None and getattr(obj, id_key) is None:
        raise MissingShardKey(
            f"{label} has no {id_key}; with generations the ID's time picks the table: "
            f"build it with {model.name}(...), which issues the ID, or set {id_key}"
        )
    if not present:
        raise MissingShardKey(
            f"{label} has {' and '.join(model.keys)} set to None; a row needs its shard key"
        )
    default = model.id_default
    if default is not None and default.gene_from is not None and model.id_key is not None:
        if getattr(obj, model.id_key) is None and getattr(obj, default.gene_from) is None:
            raise MissingShardKey(
                f"{label} takes its ID's gene from {default.gene_from}, which is None; set it"
            )
