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
gets its own); joins between sharded models, with an explicit ON clause or through a
relationship (read as its explicit join, :mod:`~.relationship_joins`), are run table by
table when both are sharded alike ("binding tables").

Every statement either returns what one plain table would, or raises
:class:`~snowshard.sharding.errors.UnsupportedShardQuery` before any SQL runs
(:mod:`~.analysis` decides: pushed down exactly, merged, or refused); SQL that would still
name a logical table, which no database holds, is stopped before it is sent
(:mod:`~.logical_guard`). Refused today, with the
rewrite to use in the message: ``SUM``/``AVG(DISTINCT)`` of non-integers, window functions not
partitioned by the shard key, keyless subqueries of a sharded model inside a routed query,
joins of models sharded differently or through a relationship with a ``secondary``
table (or of an alias, or of a physical class), and plain unsharded tables joined across
databases (declare them :class:`~.reference.Reference` tables). Moving a row to another
shard by changing its key is refused too. A merge orders and groups strings by code
point, so it is refused where their collation compares otherwise (:mod:`~.collation`).
Databases are queried concurrently and their rows merged as they stream
(:mod:`~.sources`, :mod:`~.stream`), and without ``twophase=True`` a commit is per
database (a partial failure raises :class:`~.commit_errors.PartialCommitError`).

``python -m snowshard.demo`` runs this end to end on SQLite; ``examples/`` has the
multi-database, time-range and async variants. Modules: :mod:`~.declare` (the
declaration), :mod:`~.generations` (layouts that change over time), :mod:`~.mapping`
(physical tables and classes), :mod:`~.routing` (keys in WHERE), :mod:`~.rewrite`,
:mod:`~.execute` and :mod:`~.merge` (running statements on shards), :mod:`~.reference`
(tables copied into every database), :mod:`~.bulk_load` (bulk loads at ``COPY`` speed),
:mod:`~.replicas` (reads from read replicas), :mod:`~.hints` (forcing statements to
tables or databases), :mod:`~.explain`, :mod:`~.session`, :mod:`~.schema`,
:mod:`~.keyset`, :mod:`~.collation` (strings in merges), :mod:`~.errors`, and
:mod:`~.aio` (asyncio; loaded on first use of its names, since it needs the ``async``
extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from snowshard.sharding.bulk_errors import BulkRowError
from snowshard.sharding.bulk_load import BulkReport, bulk_insert, progress_bar
from snowshard.sharding.declare import Sharded, Shards, sharded_model
from snowshard.sharding.errors import (
    FanOutExceeded,
    FanOutForbidden,
    InvalidPage,
    InvalidShardHint,
    InvalidShardKey,
    MissingShardKey,
    ShardHintConflict,
    ShardingError,
    ShardKeyChanged,
    ShardKeyConflict,
    ShardKeyTypeError,
    SubqueryResultError,
    UnknownDatabase,
    UnknownShard,
    UnpropagatedListener,
    UnsupportedShardQuery,
)
from snowshard.sharding.explain import Explanation, explain
from snowshard.sharding.generations import AmbiguousShard, Generation
from snowshard.sharding.hints import shard_hint
from snowshard.sharding.keyset import Page, keyset, keyset_page
from snowshard.sharding.model import ShardedModel
from snowshard.sharding.reference import Reference, reference_table
from snowshard.sharding.replicas import Replicas, ReplicaUnavailable
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
    "AmbiguousShard",
    "AsyncShardedSession",
    "BulkReport",
    "BulkRowError",
    "Explanation",
    "FanOutExceeded",
    "FanOutForbidden",
    "Generation",
    "InvalidPage",
    "InvalidShardHint",
    "InvalidShardKey",
    "MissingShardKey",
    "Page",
    "Reference",
    "ReplicaUnavailable",
    "Replicas",
    "ShardConfigError",
    "ShardHintConflict",
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
    "SubqueryResultError",
    "UnknownDatabase",
    "UnknownShard",
    "UnpropagatedListener",
    "UnsupportedShardQuery",
    "bulk_insert",
    "create_all",
    "create_all_async",
    "drop_all",
    "drop_all_async",
    "explain",
    "keyset",
    "keyset_page",
    "keyset_page_async",
    "progress_bar",
    "reference_table",
    "shard_hint",
    "sharded_model",
    "tables_by_database",
]
