"""snowshard: 64-bit snowflake IDs with genes, and shard routing for SQLAlchemy models.

>>> from snowshard import Layout
>>> Layout(epoch=0).compose(1572057648000)
6593687681236992000
"""

from __future__ import annotations

from snowshard import strategies
from snowshard.clock import ManualClock
from snowshard.errors import (
    ClockMovedBackwards,
    ClockStalled,
    ConfigurationError,
    FieldOutOfRange,
    IdTypeError,
    InvalidId,
    LayoutError,
    LayoutExpired,
    MissingExtra,
    SnowshardError,
    WorkerIdError,
)
from snowshard.generator import Snowflake, WorkerClaim, WorkerLease
from snowshard.genes import gene_of, key_to_int
from snowshard.layout import DEFAULT_EPOCH, Layout, Parts
from snowshard.skew import Skew, skew
from snowshard.strategies import StrategyError

__all__ = [
    "DEFAULT_EPOCH",
    "ClockMovedBackwards",
    "ClockStalled",
    "ConfigurationError",
    "FieldOutOfRange",
    "IdTypeError",
    "InvalidId",
    "Layout",
    "LayoutError",
    "LayoutExpired",
    "ManualClock",
    "MissingExtra",
    "Parts",
    "Skew",
    "Snowflake",
    "SnowshardError",
    "StrategyError",
    "WorkerClaim",
    "WorkerIdError",
    "WorkerLease",
    "gene_of",
    "key_to_int",
    "skew",
    "strategies",
]
