"""The errors of :func:`~snowshard.sharding.bulk_load.bulk_insert`: a bad argument, or a
row that cannot be written, named by its index, raised before anything is written."""

from __future__ import annotations

from typing import NoReturn

from snowshard.sharding.errors import (
    InvalidShardKey,
    MissingShardKey,
    ShardingError,
    ShardKeyConflict,
    ShardKeyTypeError,
)
from snowshard.sharding.model import ShardedModel

__all__ = [
    "KEY_ERRORS",
    "ROW_ERRORS",
    "BulkInvalidShardKey",
    "BulkMissingShardKey",
    "BulkRowError",
    "BulkRowTypeError",
    "BulkShardKeyConflict",
    "BulkShardKeyTypeError",
    "InvalidBulkArgument",
    "row_failed",
    "where",
]


class InvalidBulkArgument(ShardingError, ValueError):
    """An argument of :func:`~snowshard.sharding.bulk_load.bulk_insert` that is not what it takes (the model, the rows,
    ``batch_size``, ``progress``)."""


class BulkRowError(ShardingError, ValueError):
    """A row given to :func:`~snowshard.sharding.bulk_load.bulk_insert` cannot be written; ``index`` is its position.

    Raised before any row is written: for an unknown column, a value its column type
    rejects, a missing value whose default needs a statement; the subclasses below for
    shard key problems.
    """

    def __init__(self, message: str, *, index: int) -> None:
        super().__init__(message)
        self.index = index


class BulkRowTypeError(BulkRowError, TypeError):
    """A row that is not a mapping, or a value of a type its column rejects."""


class BulkMissingShardKey(BulkRowError, MissingShardKey):
    """A row without a value in any shard key column (nor a gene to issue its ID with)."""


class BulkInvalidShardKey(BulkRowError, InvalidShardKey):
    """A row whose shard key value the strategy cannot route (negative, not decimal...)."""


class BulkShardKeyTypeError(BulkRowError, ShardKeyTypeError):
    """A row whose shard key value has a type the strategy cannot route."""


class BulkShardKeyConflict(BulkRowError, ShardKeyConflict):
    """A row whose shard keys (e.g. ``id`` and ``user_id``) name different shards."""


ROW_ERRORS: dict[type[ShardingError], type[BulkRowError]] = {
    MissingShardKey: BulkMissingShardKey,
    InvalidShardKey: BulkInvalidShardKey,
    ShardKeyTypeError: BulkShardKeyTypeError,
    ShardKeyConflict: BulkShardKeyConflict,
}

KEY_ERRORS = tuple(ROW_ERRORS)


def where(model: ShardedModel, index: int) -> str:
    return f"row {index} of the bulk load into {model.name}"


def row_failed(
    model: ShardedModel,
    index: int,
    text: str,
    kind: type[BulkRowError],
    cause: BaseException | None = None,
) -> NoReturn:
    raise kind(
        f"{where(model, index)}: {text}; no row of this load was written", index=index
    ) from cause
