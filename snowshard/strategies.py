"""Shard strategies: which of ``count`` shards a key or ID belongs to.

Every strategy has ``count`` and ``shard_of(value) -> int`` in ``[0, count)``; any object
with those two members can be used where a strategy is expected.

=========  ===================================  ==============================================
strategy   shard of ``x``                        use it when
=========  ===================================  ==============================================
``Gene``   ``x & (n - 1)``                       children carry the parent's gene: parent key
                                                 and child ID give the same shard
``Mod``    ``x % n``                             keys are dense counters. On snowflake IDs it
                                                 piles rows into shard 0 at low rates (their
                                                 low bits are mostly zero when the sequence
                                                 restarts at 0 every tick) unless the
                                                 sequence continues across ticks
``Mix``    ``(x ^ (x >> 16)) % n``               routing snowflake IDs by themselves (Java
                                                 HashMap's spreading); breaks gene co-location
``Shift``  ``(x >> bits) % n``                   routing by worker (``bits`` = sequence+gene)
                                                 or by time (``bits`` = timestamp shift)
``Hash``   ``fmix64(x) % n``                     routing snowflake IDs when workers are few
                                                 and consecutive: every bit affects the shard
=========  ===================================  ==============================================

``Mix`` folds only bits 16 and up into the low bits. In the default layout those are the top
6 worker bits and the low timestamp bits, so 100 workers numbered 0..99 issuing one ID per
millisecond reach only 112 of 1024 shards (max/mean 10.2, measured in ``tests/test_skew.py``).
That beats plain ``Mod`` (everything in shard 0) but is not even; ``Hash`` and ``Shift.by_time``
are, and so is any strategy once the sequence continues across ticks (the default).

Strategies are values: ``Mod(8) == Mod(8)``, equal ones hash alike, and ``Mod(8) != Mix(8)``.

Non-int keys (str, bytes, UUID) are first turned into ints with
:func:`snowshard.genes.key_to_int`, so every strategy accepts the same keys as genes do.
"""

from __future__ import annotations

from typing import Protocol, cast, runtime_checkable

from snowshard.errors import StrategyError
from snowshard.genes import key_to_int
from snowshard.layout import Layout, check_layout

__all__ = ["Gene", "Hash", "Mix", "Mod", "ShardStrategy", "Shift", "StrategyError", "check_strategy",
           "colocates_genes"]


_MASK64 = (1 << 64) - 1


@runtime_checkable
class ShardStrategy(Protocol):
    """Anything with a shard ``count`` and ``shard_of(value)``."""

    @property
    def count(self) -> int: ...

    def shard_of(self, value: object) -> int: ...


def check_strategy(strategy: object, what: str = "strategy") -> ShardStrategy:
    """``strategy`` if it has an int ``count >= 1`` and a callable ``shard_of``.

    Otherwise :class:`StrategyError` naming the object and what it lacks.
    """
    count = getattr(strategy, "count", None)
    if (
        isinstance(count, bool)
        or not isinstance(count, int)
        or count < 1
        or not callable(getattr(strategy, "shard_of", None))
    ):
        raise StrategyError(
            f"{what} must be a shard strategy (an int count >= 1 and shard_of(value)), got "
            f"{type(strategy).__name__} {strategy!r}; use Gene(n), Mod(n), Mix(n), Hash(n) "
            "or Shift(n, bits)"
        )
    return cast(ShardStrategy, strategy)


def _check_count(name: str, n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise StrategyError(f"{name} needs a shard count >= 1, got {n!r}")
    return n


class _Base:
    """Value semantics shared by the strategies: equal parameters, equal strategies.

    Two strategies are equal, and hash alike, when they are of the same class and have the
    same parameters (:meth:`params`), so a strategy can key a dict or a cache. They are
    immutable: assigning an attribute raises :class:`AttributeError`.
    """

    __slots__ = ("count",)
    count: int

    def __init__(self, n: int) -> None:
        object.__setattr__(self, "count", _check_count(type(self).__name__, n))

    def params(self) -> tuple[int, ...]:
        """The constructor's arguments, in order: ``type(s)(*s.params()) == s``."""
        return (self.count,)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.count})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Base) or type(other) is not type(self):
            return NotImplemented
        return other.params() == self.params()

    def __hash__(self) -> int:
        return hash((type(self), self.params()))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(
            f"{type(self).__name__} is immutable (it can key dicts); build a new one instead "
            f"of setting {name!r}"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; cannot delete {name!r}")

    def __reduce__(self) -> tuple[type[_Base], tuple[int, ...]]:
        return type(self), self.params()


class Mod(_Base):
    """``x % n``: plain modulo."""

    __slots__ = ()

    def shard_of(self, value: object) -> int:
        return key_to_int(value) % self.count


class Mix(_Base):
    """``(x ^ (x >> 16)) % n``: fold the high bits into the low ones first."""

    __slots__ = ()

    def shard_of(self, value: object) -> int:
        x = key_to_int(value)
        return (x ^ (x >> 16)) % self.count


class Hash(_Base):
    """``fmix64(x) % n``: MurmurHash3's 64-bit finalizer, so every bit of ``x`` counts."""

    __slots__ = ()

    def shard_of(self, value: object) -> int:
        x = key_to_int(value) & _MASK64
        x ^= x >> 33
        x = (x * 0xFF51AFD7ED558CCD) & _MASK64
        x ^= x >> 33
        x = (x * 0xC4CEB9FE1A85EC53) & _MASK64
        x ^= x >> 33
        return x % self.count


class Shift(_Base):
    """``(x >> bits) % n``: drop the low ``bits`` (sequence, gene, ...) before the modulo."""

    __slots__ = ("bits",)
    bits: int

    def __init__(self, n: int, bits: int) -> None:
        super().__init__(n)
        if isinstance(bits, bool) or not isinstance(bits, int) or not 0 <= bits <= 63:
            raise StrategyError(f"Shift bits must be an int in 0..63, got {bits!r}")
        object.__setattr__(self, "bits", bits)

    def params(self) -> tuple[int, ...]:
        return (self.count, self.bits)

    @classmethod
    def by_worker(cls, n: int, layout: Layout) -> Shift:
        """Route by the datacenter and worker bits (shift off sequence and gene)."""
        return cls(n, check_layout(layout).worker_shift)

    @classmethod
    def by_time(cls, n: int, layout: Layout) -> Shift:
        """Route by the timestamp (``id >> 22`` in the default layout): even at any rate."""
        return cls(n, check_layout(layout).timestamp_shift)

    def shard_of(self, value: object) -> int:
        return (key_to_int(value) >> self.bits) % self.count

    def __repr__(self) -> str:
        return f"Shift({self.count}, bits={self.bits})"


class Gene(_Base):
    """``x & (n - 1)``: the low bits, i.e. the gene; ``n`` must be a power of two.

    ``Gene(n).shard_of(parent_key) == Gene(n).shard_of(child_id)`` whenever the child's ID
    was generated with ``gene=parent_key`` and ``n <= 2**gene_bits``.
    """

    __slots__ = ()

    def __init__(self, n: int) -> None:
        super().__init__(n)
        if n & (n - 1):
            lower = 1 << (n.bit_length() - 1)
            raise StrategyError(
                f"Gene needs a power-of-two shard count, got {n}; use {lower} or {lower * 2}"
            )

    def shard_of(self, value: object) -> int:
        return key_to_int(value) & (self.count - 1)


def colocates_genes(strategy: object, layout: Layout) -> bool:
    """Whether ``strategy`` sends a parent key and its children's IDs to the same shard.

    True for ``Gene(n)`` and for ``Mod(n)`` with ``n`` a power of two, when
    ``n <= 2**layout.gene_bits``; False for every other strategy. An object that is not a
    strategy (no ``count`` and ``shard_of``) raises :class:`StrategyError`.
    """
    layout = check_layout(layout)
    check_strategy(strategy)
    if not isinstance(strategy, (Gene, Mod)):
        return False
    n = strategy.count
    return n & (n - 1) == 0 and n <= (1 << layout.gene_bits)
