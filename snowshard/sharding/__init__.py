"""Sharded SQLAlchemy models: rows routed to the right table and database by their key.

Declare a model once; snowshard maps one physical class per table and routes every
write and read through an ordinary :class:`~sqlalchemy.orm.Session` subclass::

    ids = Snowflake(Layout(worker_bits=6, gene_bits=4), worker=1)

    class Order(Sharded, Base):
        __tablename__ = "orders"                       # tables orders_00 .. orders_15
        __shards__ = Shards(16, key=("id", "user_id"))  # Gene(16)
        id: Mapped[int] = snowflake_pk(ids, gene_from="user_id")
        user_id: Mapped[int] = mapped_column(BigInteger, index=True)

    create_all(Base.metadata, bind=engine)
    with ShardedSession(engine) as session:
        session.add(Order(user_id=1820))     # into orders_12; Order.id % 16 == 1820 % 16
        session.commit()
        session.scalars(select(Order).where(Order.user_id == 1820)).all()   # orders_12 only
        session.scalars(select(Order).order_by(Order.id.desc()).limit(20))  # all 16, merged

Relationships of a sharded model are declared with ``@declared_attr`` (each physical class
gets its own); joins between sharded models use an explicit ON clause and are run table by
table when both are sharded alike ("binding tables").

Not supported (a clear error, or documented behaviour): ``HAVING`` and ``COUNT(DISTINCT)``
merged across shards; joins through a relationship attribute of a sharded model; joins of
models sharded differently; ``lazy="joined"`` relationships to sharded models; moving a row
to another shard by changing its key. Across databases, ORDER BY on strings merges by code
point (not the database collation), results are fully fetched before merging (no
streaming), and without ``twophase=True`` a commit is per database.

``python -m snowshard.demo`` runs this end to end on SQLite; ``examples/`` has the
multi-database, time-range and async variants. Modules: :mod:`~.declare` (the
declaration), :mod:`~.mapping` (physical tables and classes), :mod:`~.routing` (keys in
WHERE), :mod:`~.rewrite`, :mod:`~.execute` and :mod:`~.merge` (running statements on
shards), :mod:`~.session`, :mod:`~.schema`, :mod:`~.keyset`, :mod:`~.errors`, and :mod:`~.aio`
(asyncio; loaded on first use of its names, since it needs the ``async`` extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from snowshard.sharding.declare import Sharded, Shards, sharded_model
from snowshard.sharding.errors import (
    FanOutForbidden,
    InvalidPage,
    InvalidShardKey,
    MissingShardKey,
    ShardingError,
    ShardKeyChanged,
    ShardKeyConflict,
    ShardKeyTypeError,
    UnknownDatabase,
    UnknownShard,
    UnsupportedShardQuery,
)
from snowshard.sharding.keyset import Page, keyset, keyset_page
from snowshard.sharding.model import ShardedModel
from snowshard.sharding.schema import create_all, drop_all, tables_by_database
from snowshard.sharding.session import ShardedSession
from snowshard.spec import DEFAULT_DATABASE, ShardConfigError, ShardInfo, ShardSpec

if TYPE_CHECKING:
    from snowshard.sharding.aio import (
        AsyncShardedSession,
        create_all_async,
        drop_all_async,
        keyset_page_async,
    )

_ASYNC_NAMES = frozenset(
    {"AsyncShardedSession", "create_all_async", "drop_all_async", "keyset_page_async"}
)


def __getattr__(name: str) -> Any:
    """The asyncio names, imported on first use (they need the ``async`` extra)."""
    if name in _ASYNC_NAMES:
        from snowshard.sharding import aio

        return getattr(aio, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "DEFAULT_DATABASE",
    "AsyncShardedSession",
    "FanOutForbidden",
    "InvalidPage",
    "InvalidShardKey",
    "MissingShardKey",
    "Page",
    "ShardConfigError",
    "ShardInfo",
    "ShardKeyChanged",
    "ShardKeyConflict",
    "ShardKeyTypeError",
    "ShardSpec",
    "Sharded",
    "ShardedModel",
    "ShardedSession",
    "Shards",
    "ShardingError",
    "UnknownDatabase",
    "UnknownShard",
    "UnsupportedShardQuery",
    "create_all",
    "create_all_async",
    "drop_all",
    "drop_all_async",
    "keyset",
    "keyset_page",
    "keyset_page_async",
    "sharded_model",
    "tables_by_database",
]
