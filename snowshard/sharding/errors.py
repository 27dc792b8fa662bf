"""The errors of sharded models and routed queries.

All derive from :class:`~snowshard.errors.SnowshardError`; those caused by a bad argument
also from ``ValueError`` or ``TypeError``. Each is raised before any SQL is sent. They
derive from :class:`sqlalchemy.exc.DontWrapMixin` too, so SQLAlchemy never wraps them in a
``StatementError``. Declaration mistakes raise :class:`~snowshard.spec.ShardConfigError`.
"""

from __future__ import annotations

from sqlalchemy.exc import DontWrapMixin

from snowshard.errors import ShardConfigError, SnowshardError

__all__ = [
    "FanOutExceeded",
    "FanOutForbidden",
    "InvalidFanOutLimit",
    "InvalidPage",
    "InvalidShardHint",
    "InvalidShardKey",
    "MissingShardKey",
    "ShardHintConflict",
    "ShardKeyChanged",
    "ShardKeyConflict",
    "ShardKeyTypeError",
    "ShardingError",
    "SubqueryResultError",
    "UnknownDatabase",
    "UnknownShard",
    "UnpropagatedListener",
    "UnsupportedShardQuery",
]


class ShardingError(SnowshardError, DontWrapMixin):
    """Base class of the errors raised while routing rows and statements to shards."""


class MissingShardKey(ShardingError, ValueError):
    """A row has no value in any shard key column (or a NULL gene parent)."""


class InvalidShardKey(ShardingError, ValueError):
    """A shard key value the strategy cannot route: negative, not a decimal number, ..."""


class ShardKeyTypeError(ShardingError, TypeError):
    """A shard key value of a type the strategy cannot route (``float``, ``bool``, ...)."""


class ShardKeyConflict(ShardingError, ValueError):
    """Two shard keys of one row (e.g. ``id`` and ``user_id``) name different shards."""


class ShardKeyChanged(ShardingError, ValueError):
    """An update would move a row to another shard; moving rows is not an update."""


class UnknownShard(ShardingError, ValueError):
    """A shard index outside ``0..count-1`` (asked for, or returned by a strategy)."""


class UnknownDatabase(ShardingError, ValueError):
    """A sharded table lives in a database the session was given no engine for."""


class FanOutForbidden(ShardingError):
    """A statement without a shard key would read every shard of a model that forbids it."""


class InvalidPage(ShardingError, ValueError):
    """A keyset page request with a bad size."""


class UnsupportedShardQuery(ShardingError):
    """A statement whose result cannot be computed shard by shard (the message says why)."""


class SubqueryResultError(ShardingError, ValueError):
    """A scalar subquery run before its statement (``subqueries_first=True``) returned
    more than one row, which a database refuses too."""


class UnpropagatedListener(ShardingError, ShardConfigError):
    """An event listener on a sharded model's logical class that would never run: its rows
    are instances of the physical classes, which only ``propagate=True`` listeners reach."""


class InvalidShardHint(ShardingError, ValueError):
    """A shard hint (``shard=`` / ``database=``) of the wrong type, or for a statement it
    cannot apply to."""


class ShardHintConflict(InvalidShardHint):
    """A shard hint that leaves out shards the statement's WHERE clause or rows need."""


class FanOutExceeded(ShardingError, AssertionError):
    """A statement inside :func:`snowshard.testing.max_fanout` touched more tables or
    databases than allowed (an ``AssertionError``, so pytest reports it as a failure)."""


class InvalidFanOutLimit(ShardingError, ValueError):
    """A fan-out cap of :func:`snowshard.testing.max_fanout` that is not a positive int."""
