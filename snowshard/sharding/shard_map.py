"""The versioned shard map: which declared layout holds a logical table's rows now.

A reshard (:mod:`snowshard.operations.reshard`) moves a table's rows from one layout to
another while the application keeps writing. Application instances are deployed knowing
**both** layouts (two declarations of the model, e.g. in two declarative bases) and ask
the map, in the control database, which one to use::

    shard_map = ShardMap(control_engine)
    Order = shard_map.pick(OrderV1, OrderV2)     # once per transaction (one SELECT)

At cutover the reshard *fences* the old tables (a write to them fails in the database
itself, with :class:`StaleShardMap`), drains the last changes, then flips the map's row
in one statement. An instance still holding the old choice can therefore never write to
the old place: its write fails with :class:`StaleShardMap`, and retrying the transaction
after ``pick`` again routes it to the new layout. Nothing is lost or misplaced.

The layout is named by a fingerprint of what places rows (:func:`fingerprint`): table
count, name pattern, databases, strategy and shard key.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, TypeVar

from sqlalchemy import BigInteger, Column, Engine, Integer, MetaData, String, Table, select

from snowshard.sharding.errors import ShardingError
from snowshard.sharding.model import ShardedModel

__all__ = [
    "FENCE_MARK",
    "MAP_TABLE",
    "ShardMap",
    "StaleShardMap",
    "fingerprint",
    "placement_fingerprint",
]

FENCE_MARK = "snowshard: stale shard map"
"""Text of the error a fenced table raises on a write (see :mod:`~snowshard.operations.reshard`)."""

MAP_TABLE = Table(
    "snowshard_shard_map",
    MetaData(),
    Column("name", String(128), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("layout", String(64), nullable=False),
    Column("changed_ms", BigInteger, nullable=False),
)
"""One row per logical table that has ever been resharded: the layout holding it now."""

M = TypeVar("M")


class StaleShardMap(ShardingError):
    """A write reached tables of a layout that no longer holds the rows (or a model was
    picked that the map does not name). Roll back, pick the model again, and retry."""


def placement_fingerprint(spec: Any, strategy: object, key: str) -> str:
    """A short, stable name of a layout: table count, pattern, databases, strategy, key."""
    parts = (
        spec.count,
        spec.pattern,
        tuple(sorted((name, tuple(indices)) for name, indices in spec.databases.items())),
        repr(strategy),
        key,
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def fingerprint(model: ShardedModel) -> str:
    """The fingerprint of ``model``'s layout (:func:`placement_fingerprint`)."""
    return placement_fingerprint(model.spec, model.strategy, model.keys[0])


class ShardMap:
    """Reads the versioned shard map in ``engine``'s database (the control database)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def __repr__(self) -> str:
        return f"ShardMap({self.engine.url.render_as_string(hide_password=True)})"

    def layout_of(self, name: str) -> tuple[int, str] | None:
        """``(version, fingerprint)`` of logical table ``name``, or None if never resharded."""
        with self.engine.connect() as connection:
            if not self.engine.dialect.has_table(connection, MAP_TABLE.name):
                return None
            row = connection.execute(
                select(MAP_TABLE.c.version, MAP_TABLE.c.layout).where(MAP_TABLE.c.name == name)
            ).first()
        return None if row is None else (int(row[0]), str(row[1]))

    def pick(self, *declared: M) -> M:
        """The one of ``declared`` (sharded model classes of one logical table, the first
        being the original layout) whose layout the map names now."""
        from snowshard.sharding.declare import sharded_model

        if not declared:
            raise TypeError("ShardMap.pick() needs the model classes to choose between")
        models = [sharded_model(cls) for cls in declared]  # type: ignore[arg-type]
        names = {model.table.name for model in models}
        if len(names) != 1:
            raise StaleShardMap(
                f"ShardMap.pick() got models of different logical tables {sorted(names)}; "
                "pass the declarations of one table"
            )
        found = self.layout_of(models[0].table.name)
        if found is None:
            return declared[0]
        for cls, model in zip(declared, models):
            if fingerprint(model) == found[1]:
                return cls
        raise StaleShardMap(
            f"the shard map names layout {found[1]} (version {found[0]}) for table "
            f"{models[0].table.name!r}, and none of the {len(declared)} declared models has "
            "it; deploy code that declares the layout the reshard moved the rows to"
        )


def now_ms() -> int:
    return int(time.time() * 1000)
