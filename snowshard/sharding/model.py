"""What snowshard knows about one sharded model: :class:`ShardedModel`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import count as _count
from typing import Any, Optional

from sqlalchemy import Column, Table, inspect
from sqlalchemy.orm import Mapper
from sqlalchemy.types import Integer, TypeDecorator, TypeEngine

from snowshard._compat import deannotated
from snowshard.errors import SnowshardError
from snowshard.layout import parse_decimal
from snowshard.orm.defaults import SnowflakeDefault
from snowshard.sharding.errors import (
    InvalidShardKey,
    MissingShardKey,
    ShardKeyConflict,
    ShardKeyTypeError,
    UnknownShard,
)
from snowshard.sharding.generations import AmbiguousShard, Period, Timeline
from snowshard.spec import ShardSpec
from snowshard.strategies import Gene, Mod

__all__ = [
    "MODEL_INFO",
    "ShardedModel",
    "model_of_class",
    "model_of_mapper",
    "model_of_table",
    "snowflake_default_of",
]

MODEL_INFO = "snowshard_model"
"""``info`` key of a logical table and of the class manager of every mapped class of a
sharded model.

The logical table's ``info[MODEL_INFO]`` is its :class:`ShardedModel`; a class's is
``(model, shard)``, with shard None for the logical class. Kept there, not in a registry
of this module, so a declarative base that is dropped takes its models with it."""


def _is_integer(type_: TypeEngine[Any]) -> bool:
    if isinstance(type_, TypeDecorator):
        return _is_integer(type_.impl_instance)
    return isinstance(type_, Integer)


def snowflake_default_of(table: Table) -> SnowflakeDefault | None:
    """The snowflake default of ``table``'s single-column primary key, or None."""
    pk = list(table.primary_key.columns)
    arg = getattr(pk[0].default, "arg", None) if len(pk) == 1 else None
    return arg if isinstance(arg, SnowflakeDefault) else None


_serials = _count(1)


class ShardedModel:
    """A logical model, its physical classes and tables, and how rows map to shards.

    Get it with :func:`snowshard.sharding.sharded_model`. ``classes[i]``, ``mappers[i]``
    and ``tables[i]`` belong to shard ``i``; ``table`` is the logical table, in no
    ``MetaData.tables`` (it is never created).

    With generations (``timeline`` not None, see :mod:`snowshard.sharding.generations`)
    the indices span every generation's tables; ``spec`` and ``strategy`` are then the
    :class:`~snowshard.sharding.generations.Timeline`, and ``generations`` lists each
    generation's own spec and strategy.
    """

    def __init__(
        self,
        cls: type,
        table: Table,
        spec: ShardSpec,
        strategy: Any,
        keys: Sequence[str],
        fan_out: bool,
        timeline: Timeline | None = None,
    ) -> None:
        self.cls = cls
        self.table = table
        self.timeline = timeline
        """The generations, when the model declares more than one (else None)."""
        self.generations: tuple[Period, ...] = (
            timeline.periods if timeline is not None else (Period(0, None, 0, 0, spec, strategy),)
        )
        """Each generation's tables, strategy and place in the index space (one if none)."""
        self.spec: ShardSpec | Timeline = timeline if timeline is not None else spec
        self.strategy: Any = timeline if timeline is not None else strategy
        self.keys = tuple(keys)
        self.fan_out = fan_out
        self.count = self.spec.count
        self.classes: tuple[type, ...] = ()
        self.mappers: tuple[Mapper[Any], ...] = ()
        self.tables: tuple[Table, ...] = ()
        self.key_columns: dict[str, Column[Any]] = {k: table.c[k] for k in self.keys}
        self._integer = frozenset(c.key for c in table.c if _is_integer(c.type))
        pk = list(table.primary_key.columns)
        self.id_key: Optional[str] = pk[0].key if len(pk) == 1 else None
        self.id_default: Optional[SnowflakeDefault] = snowflake_default_of(table)
        self.issues_ids = (
            self.id_key in self.keys
            and self.id_default is not None
            and (self.id_default.gene_from not in self.keys or timeline is not None)
        )
        """Whether ``Model(...)`` may issue the ID itself: the ID is the only key, or the
        model has generations (the ID's time picks the generation)."""
        self.gene_parent: Optional[tuple[str, str]] = None
        """(ID key, gene column) when the ID default takes a gene: both None is an error."""
        if self.id_key is not None and self.id_default is not None and self.id_default.gene_from:
            self.gene_parent = (self.id_key, self.id_default.gene_from)
        # Gene and Mod on a non-negative int: skip the generic path (hot in bulk inserts)
        self._fast: Optional[Callable[[int], int]] = None
        if timeline is not None:
            pass  # the generation comes first
        elif type(strategy) is Gene:
            self._fast = (spec.count - 1).__and__
        elif type(strategy) is Mod:
            self._fast = spec.count.__rmod__
        self.serial: int = next(_serials)
        """Unique for the life of the process (unlike ``id()``, never reused): names the
        model in cache keys."""
        self.binding: tuple[Any, ...] = (
            (strategy, spec.count, tuple(sorted(spec.databases.items())))
            if timeline is None
            else ("generations", self.serial)
        )
        """Models with equal ``binding`` put matching rows in tables of the same index.

        A model with generations binds with no other: a parent key's rows span
        generations, and its children's rows may be in another generation than it."""
        self.unions: dict[tuple[int, ...], Any] = {}
        """Cache of ``with_polymorphic`` entities over several tables (see mapping)."""

    @property
    def name(self) -> str:
        return self.cls.__name__

    def __repr__(self) -> str:
        return (
            f"ShardedModel({self.name}: {self.count} tables {self.spec.table_name(0)}.., "
            f"key={'/'.join(self.keys)}, strategy={self.strategy!r})"
        )

    # -- keys ------------------------------------------------------------------------

    def normalize(self, key: str, value: object) -> object:
        """``value`` as stored and routed: a decimal ``str`` in an integer column -> ``int``."""
        if key in self._integer:
            if isinstance(value, str):
                return parse_decimal(
                    value, what=f"integer for {self.name}.{key}", error=InvalidShardKey
                )
            if isinstance(value, bool) or not isinstance(value, int):
                raise ShardKeyTypeError(
                    f"{self.name}.{key} must be an int to pick a shard, got "
                    f"{type(value).__name__} {value!r}"
                )
        return value

    def shard_of(self, key: str, value: object) -> int:
        """The shard of a row whose ``key`` column holds ``value`` (not None).

        With generations, a key other than the ID names one table per generation:
        :class:`~snowshard.sharding.generations.AmbiguousShard` (use :meth:`shards_of`).
        """
        if self.timeline is not None:
            shards = self.shards_of(key, value)
            if len(shards) != 1:
                raise AmbiguousShard(
                    f"{self.name}.{key} = {value!r} names one table per generation "
                    f"({', '.join(self.tables[s].name for s in shards)}), not one; rows of "
                    f"{self.name} are placed by their ID's time: give "
                    f"{self.id_key} to pick one table"
                )
            return shards[0]
        if type(value) is int and value >= 0 and self._fast is not None:
            return self._fast(value)
        return self._local(self.strategy, self.count, key, value, self.normalize(key, value))

    def shards_of(self, key: str, value: object) -> tuple[int, ...]:
        """Every shard that can hold a row whose ``key`` column holds ``value`` (not None).

        One shard, except for a key other than the ID of a model with generations: one per
        generation, in generation order.
        """
        timeline = self.timeline
        if timeline is None:
            return (self.shard_of(key, value),)
        routed = self.normalize(key, value)
        if key == self.id_key:
            if not isinstance(routed, int) or routed < 0:
                raise InvalidShardKey(
                    f"{self.name}.{key} = {value!r} is not an ID (an int >= 0), so its time "
                    "cannot pick a generation"
                )
            period = timeline.period_of_id(routed)
            return (period.offset + self._local(period.strategy, period.count, key, value, routed),)
        return tuple(
            p.offset + self._local(p.strategy, p.count, key, value, routed)
            for p in timeline.periods
        )

    def _local(self, strategy: Any, count: int, key: str, value: object, routed: object) -> int:
        """``strategy.shard_of(routed)``, checked to be in ``0..count-1``."""
        try:
            shard = strategy.shard_of(routed)
        except TypeError as exc:
            raise ShardKeyTypeError(
                f"{self.name}.{key} = {value!r} cannot pick a shard: {exc}"
            ) from exc
        except (ValueError, SnowshardError) as exc:
            raise InvalidShardKey(
                f"{self.name}.{key} = {value!r} cannot pick a shard: {exc}"
            ) from exc
        if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < count:
            raise UnknownShard(
                f"{strategy!r}.shard_of({routed!r}) returned {shard!r} for "
                f"{self.name}.{key}; a shard must be an int in 0..{count - 1}"
            )
        return shard

    def shard_of_values(self, values: Mapping[str, Any], what: str = "row") -> Optional[int]:
        """The shard named by the keys present (not None) in ``values``, or None if none is.

        Raises :class:`ShardKeyConflict` if two keys name different shards. With
        generations only the ID names one shard: without it, None.
        """
        if self.timeline is not None:
            return self._shard_by_id(values, what)
        found: Optional[tuple[str, int]] = None
        for key in self.keys:
            value = values.get(key)
            if value is None:
                continue
            shard = self.shard_of(key, value)
            if found is not None and found[1] != shard:
                raise ShardKeyConflict(
                    f"{what} of {self.name}: {found[0]}={values[found[0]]!r} is in shard "
                    f"{found[1]} but {key}={value!r} is in shard {shard}; the keys must agree "
                    "(does the ID carry the parent's gene?)"
                )
            found = (key, shard)
        return None if found is None else found[1]

    def _shard_by_id(self, values: Mapping[str, Any], what: str) -> int | None:
        assert self.id_key is not None  # generations need an ID key
        id_value = values.get(self.id_key)
        if id_value is None:
            return None
        shard = self.shard_of(self.id_key, id_value)
        for key in self.keys:
            value = values.get(key)
            if key == self.id_key or value is None:
                continue
            if shard not in self.shards_of(key, value):
                raise ShardKeyConflict(
                    f"{what} of {self.name}: {self.id_key}={id_value!r} is in shard {shard} "
                    f"({self.tables[shard].name}) but {key}={value!r} can only be in "
                    f"{', '.join(self.tables[s].name for s in self.shards_of(key, value))}; "
                    "the keys must agree (does the ID carry the parent's gene?)"
                )
        return shard

    def issue_id(self, values: Mapping[str, Any], what: str) -> Any:
        """A new ID from the model's snowflake default, with the gene its row asks for."""
        default = self.id_default
        if default is None or self.id_key is None or self.id_key not in self.keys:
            raise MissingShardKey(
                f"{what} of {self.name} has no shard key; set "
                f"{' or '.join(self.keys)} so the row can be routed to its table"
            )
        gene = None
        if default.gene_from is not None:
            gene = values.get(default.gene_from)
            if gene is None:
                raise MissingShardKey(
                    f"{what} of {self.name} has no shard key and its ID takes its gene from "
                    f"{default.gene_from!r}, which is not set; set {default.gene_from}"
                )
            gene = self.normalize(default.gene_from, gene)
        value = default.generator.next_id(gene)
        column = self.table.c[self.id_key]
        as_string = bool(getattr(column.type, "as_string", False))
        return str(value) if as_string else value

    def route_new(self, values: Mapping[str, Any]) -> tuple[int, tuple[Any, ...], Any]:
        """(shard, key values, ID issued now or None) for a new row with these values.

        The key values are in the order of :attr:`keys`, the issued ID included.
        """
        given = tuple(values.get(key) for key in self.keys)
        if len(given) == 1 and given[0] is not None:  # the usual case, kept short
            return self.shard_of(self.keys[0], given[0]), given, None
        shard = self.shard_of_values(values, "a new row")
        if shard is not None:
            return shard, given, None
        new_id = self.issue_id(values, "a new row")
        assert self.id_key is not None
        given = tuple(new_id if key == self.id_key else v for key, v in zip(self.keys, given))
        return self.shard_of(self.id_key, new_id), given, new_id

    # -- placement -------------------------------------------------------------------

    def check_shard(self, shard: object) -> int:
        if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < self.count:
            raise UnknownShard(f"{self.name} has shards 0..{self.count - 1}, not {shard!r}")
        return shard

    def database_of(self, shard: int) -> str:
        return self.spec.database_of(self.check_shard(shard))

    def binds_with(self, other: ShardedModel) -> bool:
        """Whether rows of ``self`` and ``other`` with equal keys share a table index."""
        return self.binding == other.binding


def model_of_table(table: Any) -> Optional[ShardedModel]:
    """The model whose logical table ``table`` is (or an ORM-annotated copy of it), or None."""
    if not isinstance(table, Table):
        return None
    # an annotated copy may hold a copy of the table's __dict__ from before info was set
    model: Optional[ShardedModel] = deannotated(table).info.get(MODEL_INFO)
    return model


def model_of_class(cls: Any) -> Optional[tuple[ShardedModel, Optional[int]]]:
    """``(model, None)`` for a logical class, ``(model, shard)`` for a physical one, else None."""
    mapper = inspect(cls, raiseerr=False) if isinstance(cls, type) else None
    if not isinstance(mapper, Mapper):
        return None
    return model_of_mapper(mapper)


def model_of_mapper(mapper: Mapper[Any]) -> Optional[tuple[ShardedModel, Optional[int]]]:
    """:func:`model_of_class` of a mapper's class, without inspecting the class again."""
    entry: Optional[tuple[ShardedModel, Optional[int]]] = mapper.class_manager.info.get(MODEL_INFO)
    return entry
