"""The declaration of how a model is sharded: :class:`Shards`, assigned to ``__shards__``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from snowshard.errors import ShardConfigError
from snowshard.strategies import check_strategy

__all__ = ["Shards"]


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

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ShardConfigError(
                f"Shards(count=...) must be an int >= 1, got {self.count!r}"
            )
        keys = (self.key,) if isinstance(self.key, str) else self.key
        if (
            isinstance(keys, (bytes, Mapping))
            or not isinstance(keys, Sequence)
            or not keys
            or not all(isinstance(k, str) and k for k in keys)
        ):
            raise ShardConfigError(
                f"Shards(key=...) must name a column attribute (a non-empty str) or a "
                f"sequence of them, got {self.key!r}"
            )
        if self.strategy is not None:
            check_strategy(self.strategy)
        if not isinstance(self.fan_out, bool):
            raise ShardConfigError(f"Shards(fan_out=...) must be True or False, got {self.fan_out!r}")

    @property
    def keys(self) -> tuple[str, ...]:
        """The shard key attribute names, as a tuple."""
        if isinstance(self.key, str):
            return (self.key,)
        return tuple(self.key)
