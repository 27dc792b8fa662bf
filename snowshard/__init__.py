"""snowshard: 64-bit snowflake IDs with genes, and shard routing for SQLAlchemy models.

>>> from snowshard import Layout
>>> Layout(epoch=0).compose(1572057648000)
6593687681236992000

``import snowshard`` loads only the standard library. ``snowshard.explain`` (what a sharded
statement would run, from :mod:`snowshard.sharding.explain`) and ``snowshard.recover``
(finish in-doubt two-phase commits, from :mod:`snowshard.operations`) need SQLAlchemy and
load it on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from snowshard.operations import recover
    from snowshard.sharding.explain import explain

_LAZY = {"explain": "snowshard.sharding.explain", "recover": "snowshard.operations"}

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
    "explain",
    "gene_of",
    "key_to_int",
    "recover",
    "skew",
    "strategies",
]


def __getattr__(name: str) -> Any:
    """``explain`` and ``recover``, imported on first use (they need SQLAlchemy)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'snowshard' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
