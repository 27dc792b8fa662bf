"""The declaration of how a model is sharded: :class:`Shards`, assigned to ``__shards__``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from snowshard.errors import ShardConfigError
from snowshard.sharding.generations import Generation
from snowshard.strategies import check_strategy

__all__ = ["Generation", "Shards"]


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
    :param generations: later layouts, each a
        :class:`~snowshard.sharding.generations.Generation` effective from its ``since``
        time, in increasing order; the fields above are generation 0. Rows go to the
        generation of their ID's time (see :mod:`snowshard.sharding.generations`).
    """

    count: int
    key: Union[str, Sequence[str]]
    strategy: Any = None
    pattern: str = "{name}_{index:02d}"
    databases: Mapping[str, Iterable[int]] = field(default_factory=dict)
    fan_out: bool = True
    generations: Sequence[Generation] = ()

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
        self._check_generations()

    def _check_generations(self) -> None:
        given = self.generations
        if isinstance(given, (str, bytes, Mapping)) or not isinstance(given, Sequence):
            raise ShardConfigError(
                f"Shards(generations=...) must be a list of Generation(since, count, ...), "
                f"got {type(given).__name__} {given!r}"
            )
        previous = None
        for number, generation in enumerate(given, start=1):
            if not isinstance(generation, Generation):
                raise ShardConfigError(
                    f"Shards(generations=...)[{number - 1}] must be a Generation(since, count, "
                    f"...), got {type(generation).__name__} {generation!r}"
                )
            if previous is not None and generation.since_ms <= previous[1]:
                raise ShardConfigError(
                    f"Shards(generations=...): generation {number} since={generation.since!r} "
                    f"is not after generation {previous[0]}'s since={given[number - 2].since!r}; "
                    "list generations in strictly increasing time"
                )
            previous = (number, generation.since_ms)
        object.__setattr__(self, "generations", tuple(given))

    @property
    def keys(self) -> tuple[str, ...]:
        """The shard key attribute names, as a tuple."""
        if isinstance(self.key, str):
            return (self.key,)
        return tuple(self.key)
