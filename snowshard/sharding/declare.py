"""Declaring a sharded model once: :class:`Shards` and the :class:`Sharded` mixin.

::

    class Order(Sharded, Base):
        __tablename__ = "orders"
        __shards__ = Shards(16, key=("id", "user_id"))          # Gene(16) by default
        id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger, index=True)

The class body is written once, as for a plain model. Declaring it maps one *physical*
class per table (``orders_00`` .. ``orders_15``, see :mod:`snowshard.sharding.mapping`)
and keeps ``Order`` as the *logical* model that statements name. ``Order(user_id=1820)``
builds an instance of the physical class the strategy picks, so the shard key must be
given to the constructor (or, for a model keyed by its snowflake ID alone, the ID is
issued right there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Union

from sqlalchemy.orm import RelationshipProperty, declared_attr

from snowshard.sharding.errors import MissingShardKey
from snowshard.spec import ShardConfigError

if TYPE_CHECKING:
    from snowshard.sharding.model import ShardedModel

__all__ = ["PENDING_ID", "ROUTED_KEYS", "Sharded", "Shards", "sharded_model"]

PENDING_ID = "_snowshard_pending_id"
"""Instance ``__dict__`` key holding an ID issued at construction until ``__init__`` runs."""

ROUTED_KEYS = "_snowshard_routed_keys"
"""Instance ``__dict__`` key holding the shard key values the constructor routed by; a
flush that finds them unchanged need not route the row again."""

_PHYSICAL = "__snowshard_shard__"


@dataclass(frozen=True)
class Shards:
    """How a model is sharded; assign one to ``__shards__`` in the class body.

    :param count: number of physical tables.
    :param key: the shard key column(s), by attribute name. Several keys must name the
        same shard for every row, e.g. ``("id", "user_id")`` when ``id`` carries the gene
        of ``user_id`` and the strategy co-locates genes (``Gene`` or power-of-two ``Mod``).
    :param strategy: any object with ``count`` and ``shard_of(value)`` (see
        :mod:`snowshard.strategies`); default ``Gene(count)`` for a power of two, else
        ``Mod(count)``.
    :param pattern: physical table names, a :meth:`str.format` template with ``name``
        (the logical ``__tablename__``) and ``index``.
    :param databases: database key -> table indices it holds; default: all in one
        database (``"default"``, served by the session's ``bind``).
    :param fan_out: if False, a statement without a shard key raises
        :class:`~snowshard.sharding.errors.FanOutForbidden` instead of reading every shard.
    """

    count: int
    key: Union[str, Sequence[str]]
    strategy: Any = None
    pattern: str = "{name}_{index:02d}"
    databases: Mapping[str, Iterable[int]] = field(default_factory=dict)
    fan_out: bool = True

    @property
    def keys(self) -> tuple[str, ...]:
        """The shard key attribute names, as a tuple."""
        if isinstance(self.key, str):
            return (self.key,)
        return tuple(self.key)


class Sharded:
    """Mixin making a declarative model sharded; put it before the declarative base.

    The class must define ``__shards__ = Shards(...)`` (an intermediate class may instead
    set ``__abstract__ = True``). After the class body, ``sharded_model(cls)`` describes the
    physical classes, tables and strategy.
    """

    __shards__: ClassVar[Shards]
    __snowshard__: ClassVar[ShardedModel]

    def __init_subclass__(cls, **kw: Any) -> None:
        if _PHYSICAL in cls.__dict__ or cls.__dict__.get("__abstract__", False):
            super().__init_subclass__(**kw)
            return
        declaration = cls.__dict__.get("__shards__")
        if not isinstance(declaration, Shards):
            raise ShardConfigError(
                f"{cls.__name__} derives from Sharded but has no __shards__ = Shards(...); "
                "declare the table count and shard key, or set __abstract__ = True"
            )
        per_class = _per_class_attributes(cls)
        super().__init_subclass__(**kw)
        from snowshard.sharding.mapping import map_shards

        model = map_shards(cls, declaration, _PHYSICAL, per_class)
        type.__setattr__(cls, "__snowshard__", model)

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        model: ShardedModel | None = cls.__dict__.get("__snowshard__")
        if model is None:  # an intermediate abstract class
            return object.__new__(cls)
        if args:
            raise MissingShardKey(
                f"{cls.__name__}(...) takes keyword arguments only, so the shard key "
                f"({', '.join(model.keys)}) can pick the table"
            )
        shard, keys, pending_id = model.route_new(kwargs)
        instance: Any = object.__new__(model.classes[shard])
        instance.__dict__[ROUTED_KEYS] = keys
        if pending_id is not None:
            instance.__dict__[PENDING_ID] = pending_id
        return instance


def _per_class_attributes(cls: type) -> dict[str, Any]:
    """``@declared_attr`` members, which each physical class evaluates for itself."""
    found: dict[str, Any] = {}
    for name, value in cls.__dict__.items():
        if isinstance(value, RelationshipProperty):
            raise ShardConfigError(
                f"{cls.__name__}.{name}: declare relationships of a sharded model with "
                "@declared_attr (def {name}(cls): return relationship(..., primaryjoin=lambda: "
                "cls.<column> == ...)), so each physical class gets its own"
            )
        if isinstance(value, declared_attr) and not name.startswith("__"):
            found[name] = value
    return found


def sharded_model(cls: type) -> ShardedModel:
    """The :class:`~snowshard.sharding.model.ShardedModel` of a logical or physical class."""
    for klass in cls.__mro__:
        model = klass.__dict__.get("__snowshard__")
        if model is not None:
            return model  # type: ignore[no-any-return]
    raise ShardConfigError(
        f"{cls.__name__} is not a sharded model (see snowshard.sharding.Sharded)"
    )
