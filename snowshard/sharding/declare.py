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

from typing import Any, ClassVar

from sqlalchemy import event
from sqlalchemy.orm import RelationshipProperty, declared_attr

from snowshard.sharding.errors import MissingShardKey
from snowshard.sharding.mapping import map_shards
from snowshard.sharding.model import ShardedModel
from snowshard.sharding.shards import Shards
from snowshard.spec import ShardConfigError

__all__ = ["PENDING_ID", "ROUTED_KEYS", "Sharded", "Shards", "logical_model", "sharded_model"]

PENDING_ID = "_snowshard_pending_id"
"""Instance ``__dict__`` key holding an ID issued at construction until ``__init__`` runs."""

ROUTED_KEYS = "_snowshard_routed_keys"
"""Instance ``__dict__`` key holding the shard key values the constructor routed by; a
flush that finds them unchanged need not route the row again."""

_PHYSICAL = "__snowshard_shard__"


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
        model = map_shards(cls, declaration, _PHYSICAL, per_class)
        type.__setattr__(cls, "__snowshard__", model)
        if model.issues_ids:
            event.listen(cls, "init", _apply_pending_id, propagate=True)

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        model = logical_model(cls)
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


def _apply_pending_id(target: Any, args: Any, kwargs: dict[str, Any]) -> None:
    """``init`` event: hand the ID issued by ``__new__`` to the constructor."""
    pending = target.__dict__.pop(PENDING_ID, None)
    if pending is not None:
        key = sharded_model(type(target)).id_key
        if key is not None:
            kwargs.setdefault(key, pending)


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


def logical_model(cls: type) -> ShardedModel | None:
    """The model ``cls`` is the logical class of, or None (a physical class inherits the
    model but does not hold it in its own ``__dict__``; neither does anything else)."""
    model: ShardedModel | None = cls.__dict__.get("__snowshard__")
    return model


def sharded_model(cls: type) -> ShardedModel:
    """The :class:`~snowshard.sharding.model.ShardedModel` of a logical or physical class."""
    for klass in cls.__mro__:
        model = logical_model(klass)
        if model is not None:
            return model
    raise ShardConfigError(
        f"{cls.__name__} is not a sharded model (see snowshard.sharding.Sharded)"
    )
