"""What a reshard moves: a logical table's rows from one placement to another.

A :class:`Placement` is a layout (:class:`~snowshard.spec.ShardSpec`: table count, name
pattern, databases), the strategy that picks a table, and the shard-key column it reads.
A :class:`ReshardPlan` pairs the model's current placement with the target one; the two
must not share a physical table (give the target its own name pattern, e.g.
``"{name}_v2_{index:02d}"``), so old and new tables live side by side until cleanup.

Keys: the primary key must be one integer column (a snowflake ID) and the shard key an
integer column; other models are refused with :class:`ReshardPlanError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Integer, MetaData, Table

from snowshard.operations.reshard.errors import ReshardPlanError
from snowshard.sharding.model import ShardedModel
from snowshard.sharding.shards import Shards
from snowshard.spec import ShardSpec
from snowshard.strategies import Gene, Mod, ShardStrategy, check_strategy

__all__ = ["CAPTURES", "Placement", "ReshardPlan", "physical_table"]

CAPTURES = ("triggers", "logical")

_JOB = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,39}")


@dataclass(frozen=True)
class Placement:
    """Where rows live: ``spec`` (tables and databases), ``strategy`` and shard ``key``."""

    spec: ShardSpec
    strategy: ShardStrategy
    key: str

    def table_of(self, key_value: int) -> int:
        """The table index a row with shard key ``key_value`` belongs to."""
        return self.strategy.shard_of(key_value)

    def describe(self) -> str:
        databases = ", ".join(f"{k}: {len(v)}" for k, v in sorted(self.spec.databases.items()))
        return f"{self.spec.count} tables ({self.spec.table_name(0)} ..) by {self.strategy!r} of {self.key}; {databases}"


def physical_table(logical: Table, name: str, metadata: MetaData) -> Table:
    """A copy of ``logical`` named ``name`` in ``metadata``, its named indexes and
    constraints renamed after it (index names are per schema on PostgreSQL). Tables its
    foreign keys refer to are copied along (for DDL only; they are never created)."""
    for fk in logical.foreign_keys:
        referred = fk.column.table
        if isinstance(referred, Table) and referred.key not in metadata.tables:
            referred.to_metadata(metadata)
    table = logical.to_metadata(metadata, name=name)
    # names from a naming convention were made again for the new name by to_metadata;
    # only names given on the logical table are still the same and need renaming
    named: list[Any] = [*logical.indexes, *logical.constraints]
    given = {item.name for item in named if item.name}
    items: list[Any] = [*table.indexes, *table.constraints]
    for item in items:
        old = item.name
        if isinstance(old, str) and old and old in given:
            item.name = old.replace(logical.name, name) if logical.name in old else f"{name}_{old}"
    return table


@dataclass(frozen=True)
class ReshardPlan:
    """Move ``logical``'s rows from ``source`` to ``target``; state kept under ``job``.

    ``control`` is the database key holding the job row and the shard map.
    """

    job: str
    logical: Table
    pk: str
    source: Placement
    target: Placement
    control: str
    chunk_rows: int = 10_000
    reverse: bool = False
    capture: str = "triggers"
    """How the source's changes are captured: ``"triggers"`` (every database) or
    ``"logical"`` (PostgreSQL logical replication, :mod:`.logical`)."""
    _tables: dict[tuple[str, int], dict[int, Table]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.job, str) or not _JOB.fullmatch(self.job):
            raise ReshardPlanError(
                f"job name {self.job!r} must be 1-40 letters, digits, '-' or '_' starting with "
                "a letter or digit, e.g. 'orders-64'"
            )
        if isinstance(self.chunk_rows, bool) or not isinstance(self.chunk_rows, int) or not (
            1 <= self.chunk_rows <= 1_000_000
        ):
            raise ReshardPlanError(
                f"chunk_rows must be an int in 1..1000000, got {self.chunk_rows!r}; 10000 suits most tables"
            )
        if self.capture not in CAPTURES:
            raise ReshardPlanError(
                f"capture must be one of {CAPTURES}, got {self.capture!r}; 'logical' needs "
                "PostgreSQL sources with wal_level = logical"
            )
        overlap = set(self.source.spec.table_names) & set(self.target.spec.table_names)
        if overlap and not self.reverse:
            raise ReshardPlanError(
                f"source and target layouts share tables {sorted(overlap)[:4]}; give the "
                "target its own pattern, e.g. pattern='{name}_v2_{index:02d}'"
            )
        every = set(self.source.spec.databases) | set(self.target.spec.databases)
        if self.control not in every:
            raise ReshardPlanError(
                f"control database {self.control!r} is not one of the plan's databases {sorted(every)}"
            )

    # ------------------------------------------------------------------ building

    @classmethod
    def for_model(
        cls,
        model: ShardedModel,
        to: Shards,
        *,
        job: str | None = None,
        control: str | None = None,
        chunk_rows: int = 10_000,
        capture: str = "triggers",
    ) -> ReshardPlan:
        """The plan moving ``model``'s rows to the layout ``to`` (a :class:`Shards`)."""
        if model.timeline is not None:
            raise ReshardPlanError(
                f"{model.name} has layout generations; resharding moves one layout's rows, so "
                "reshard a model without generations"
            )
        pk_columns = list(model.table.primary_key.columns)
        if len(pk_columns) != 1 or not isinstance(pk_columns[0].type, Integer):
            raise ReshardPlanError(
                f"{model.name}: resharding copies in primary-key order and needs one integer "
                f"primary key column, got {[c.name for c in pk_columns]}"
            )
        source_key = model.keys[0]
        keys = (to.key,) if isinstance(to.key, str) else tuple(to.key)
        target_key = keys[0]
        for key in (source_key, target_key):
            column = model.table.c.get(key)
            if column is None or not isinstance(column.type, Integer):
                raise ReshardPlanError(
                    f"{model.name}: shard key {key!r} must be an integer column of the table "
                    "to be resharded online"
                )
        spec = ShardSpec(
            model.table.name, to.count, to.pattern,
            {key: tuple(indices) for key, indices in to.databases.items()},
        )
        strategy = check_strategy(to.strategy) if to.strategy is not None else (
            Gene(to.count) if to.count & (to.count - 1) == 0 else Mod(to.count)
        )
        source = Placement(model.spec, model.strategy, source_key)  # type: ignore[arg-type]
        target = Placement(spec, strategy, target_key)
        if control is None:
            control = sorted(source.spec.databases)[0]
        return cls(
            job or f"{model.table.name[:30]}-{to.count}",
            model.table,
            pk_columns[0].name,
            source,
            target,
            control,
            chunk_rows,
            capture=capture,
        )

    @classmethod
    def between(
        cls,
        old: ShardedModel,
        new: ShardedModel,
        *,
        job: str | None = None,
        control: str | None = None,
        chunk_rows: int = 10_000,
        capture: str = "triggers",
    ) -> ReshardPlan:
        """The plan moving ``old``'s rows to ``new``'s layout: two declarations of one
        logical table (as the application declares them to follow the move)."""
        if old.table.name != new.table.name:
            raise ReshardPlanError(
                f"{old.name} and {new.name} declare different tables ({old.table.name!r}, "
                f"{new.table.name!r}); pass two declarations of the same table"
            )
        if new.timeline is not None:
            raise ReshardPlanError(f"{new.name} has layout generations; reshard to a single layout")
        spec = new.spec
        assert isinstance(spec, ShardSpec)
        to = Shards(spec.count, key=new.keys[0], strategy=new.strategy, pattern=spec.pattern,
                    databases=dict(spec.databases))
        return cls.for_model(old, to, job=job, control=control, chunk_rows=chunk_rows, capture=capture)

    def reversed(self) -> ReshardPlan:
        """The same move backwards (for rollback): target tables to source tables."""
        # the way back is captured by triggers on the target tables, whatever the way there
        return replace(self, source=self.target, target=self.source, reverse=not self.reverse,
                       capture="triggers")

    # ------------------------------------------------------------------ tables

    @property
    def log_job(self) -> str:
        """The job name in the change log of this direction (the reverse has its own)."""
        return f"{self.job}~r" if self.reverse else self.job

    def tables(self, placement: Placement) -> dict[int, Table]:
        """``placement``'s physical tables by index (made once per placement and plan)."""
        key = (placement.spec.pattern, placement.spec.count)
        found = self._tables.get(key)
        if found is None:
            metadata = MetaData()
            found = self._tables[key] = {
                index: physical_table(self.logical, placement.spec.table_name(index), metadata)
                for index in range(placement.spec.count)
            }
        return dict(found)

    def by_database(self, placement: Placement) -> Iterator[tuple[str, list[int]]]:
        for database, indices in sorted(placement.spec.databases.items()):
            yield database, sorted(indices)

    def fed_by(self, source_index: int) -> tuple[int, ...]:
        """The target tables rows of source table ``source_index`` can go to.

        Both placements modulo the same key (``Gene`` or ``Mod``), the target's count a
        multiple of the source's: a row in source table ``s`` has ``key % n_source == s``,
        so its target ``t = key % n_target`` has ``t % n_source == s`` (a split 16 -> 64
        feeds each new table from one old one). Otherwise any target may get its rows."""
        every = tuple(range(self.target.spec.count))
        source, target = self.source, self.target
        modular = (Gene, Mod)
        if (
            source.key == target.key
            and type(source.strategy) in modular
            and type(target.strategy) in modular
            and target.spec.count % source.spec.count == 0
        ):
            return tuple(t for t in every if t % source.spec.count == source_index)
        return every

    @property
    def databases(self) -> list[str]:
        return sorted(set(self.source.spec.databases) | set(self.target.spec.databases))

    def describe(self) -> str:
        return (
            f"reshard job {self.job!r}: {self.logical.name}\n"
            f"  from {self.source.describe()}\n"
            f"  to   {self.target.describe()}\n"
            f"  copy in chunks of {self.chunk_rows} rows by {self.pk}; control database {self.control!r}"
        )

    def to_json(self) -> str:
        """What the job row stores: enough to recognize the plan, not to rebuild it."""
        def placement(p: Placement) -> dict[str, Any]:
            return {
                "count": p.spec.count,
                "pattern": p.spec.pattern,
                "databases": {k: list(v) for k, v in p.spec.databases.items()},
                "strategy": repr(p.strategy),
                "key": p.key,
            }

        return json.dumps(
            {"table": self.logical.name, "pk": self.pk, "source": placement(self.source),
             "target": placement(self.target), "control": self.control, "capture": self.capture},
            sort_keys=True,
        )
